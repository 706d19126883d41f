"""List the GPUs shadowsim knows: memory, HBM bandwidth, interconnect and dense peak FLOP/s per dtype.

Names and aliases work as --gpu (h100_sxm, H100, "NVIDIA H100 80GB HBM3", ...). GPUs with measured per-op tables
(simcore/perf/data) use them under --latency-backend auto; the others use the roofline model.

Examples:
  shadowsim gpus
  shadowsim gpus --json
"""
from __future__ import annotations

import argparse
import json

from shadowsim.catalogue import gpus
from shadowsim.commands.models import _table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the records as a JSON list on stdout")


def run(args: argparse.Namespace) -> int:
    rows = gpus()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = ("name", "memory GiB", "HBM TB/s", "link GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "aliases")
    body = [(g["name"], f"{g['memory_gib']:g}", f"{g['hbm_tb_per_s']:g}", f"{g['interconnect_gb_per_s']:g}",
             f"{g['peak_tflops'].get('bf16', 0):g}", f"{g['peak_tflops'].get('fp8', 0) or '-'}",
             ", ".join(g["aliases"][:3])) for g in rows]
    _table(head, body)
    print(f"{len(rows)} GPUs (dense peaks, no sparsity)")
    return 0
