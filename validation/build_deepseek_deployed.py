"""Build validation/sglang_deepseek_b200_b300_deployed.csv: the DeepSeek B200/B300 measurements with the TP/EP
the servers were really launched with, one row per measurement.

Source: ../shared/data/validation/sglang_deepseek_b200_b300.csv (aiconfigurator @095f58a silicon measurements,
Apache-2.0; notice in validation/NOTICE). That file labels some runs two ways. The collection files the same run
under DeepSeek-R1 (ids ``..._tp4_0_ep4_0_NNN``: the launch flags in the run's own name) and under DeepSeek-V3
(ids ``..._cfgNNN`` with ``tp`` 16 / ``ep`` 4 and ``tp`` 64 / ``ep`` 8): 14 pairs have bit-identical TTFT and
TPOT, and every pair maps ``tp`` = 16 → 4 (``ep`` 4) and 64 → 8 (``ep`` 8), i.e. the cfg rows' ``tp`` column is
tp × ep. Physics agrees: TP64 over eight 8-GPU nodes would pay ~120 inter-node all-reduces per decode step (≥ 20 ms
at 10 µs a hop, `simcore.perf.moe_parallel`) against the 8 ms measured, and SGLang's FP4 MoE runners accept
only ``ep_size`` 1 or ``tp_size`` (``arg_groups/moe_hook.py:handle_moe_kernel_config``), so TP16/EP4 nvfp4
cannot be launched at all.

Rules (each output row says which one in ``deployment_note``):

- ``twin``: a cfg row with a bit-identical R1 twin is dropped (the twin, whose id carries its flags, stays);
- ``tp×ep``: a cfg row with ``ep`` > 1 and no twin (cfg199 on B200, cfg717/cfg718 on B300) gets ``tp`` =
  ``tp / ep`` by the same labelling (inferred, not proven by a twin);
- ``memory``: B200 fp8 TP4 rows (five) get ``--mem-fraction-static 0.95`` appended to ``server_args``: SGLang
  0.5.9's default fraction on a 179 GiB B200 (0.855, ``simcore.memory.default_mem_fraction_static``) leaves
  −4.6 GiB for the KV cache after 156.7 GiB of fp8 weights per rank, so the measured server cannot have run with
  it (SGLang refuses to start: "Not enough memory"); 0.95 is an assumption, not a record (it gives a 188k-token
  pool). It takes effect where ``validate`` reads ``server_args``;
- ``as labelled``: everything else is copied unchanged.

    python validation/build_deepseek_deployed.py           # writes the CSV
    python validation/build_deepseek_deployed.py --check   # exits 1 if the CSV in the repo differs
"""
from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

from shadowsim.measurement_files import render_csv, write_or_check

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT.parent.parent / "shared" / "data" / "validation" / "sglang_deepseek_b200_b300.csv"
OUT = ROOT / "sglang_deepseek_b200_b300_deployed.csv"
_FLAGS_IN_ID = re.compile(r"_tp(\d+)_0_ep(\d+)_0_")
_CFG_ID = re.compile(r"_cfg\d+$")


def build(source: Path) -> tuple[list[str], list[dict[str, str]]]:
    with source.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    key = lambda r: (r["gpu"], r["precision"], r["isl"], r["osl"], r["concurrency"],  # noqa: E731
                     r["measured_ttft_ms"], r["measured_tpot_ms"])
    flagged = {key(r): r for r in rows if _FLAGS_IN_ID.search(r["id"])}
    out = []
    for r in rows:
        r = dict(r)
        twin = flagged.get(key(r))
        if _CFG_ID.search(r["id"]) and twin is not None and twin["id"] != r["id"]:
            m = _FLAGS_IN_ID.search(twin["id"])
            assert m is not None and int(r["tp"]) == int(m.group(1)) * int(m.group(2)), (r["id"], twin["id"])
            continue  # rule "twin"
        if r["gpu"] == "b200_sxm" and r["precision"] == "fp8" and int(r["tp"]) == 4:
            r["server_args"] = (r["server_args"] + " --mem-fraction-static 0.95").strip()
            r["deployment_note"] = "memory: --mem-fraction-static 0.95 assumed (the default leaves no KV cache)"
        elif _CFG_ID.search(r["id"]) and int(r["ep"]) > 1:
            r["tp"] = str(int(r["tp"]) // int(r["ep"]))
            r["deployment_note"] = "tp×ep: tp column divided by ep (same labelling as the twinned cfg rows)"
        else:
            r["deployment_note"] = "as labelled"
        out.append(r)
    return fields + ["deployment_note"], out


def render(fields: list[str], rows: list[dict[str, str]]) -> str:
    return render_csv(fields, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    a = ap.parse_args(argv)
    text = render(*build(a.source))
    status = write_or_check([(a.out, text)], check=a.check, rebuild="python validation/build_deepseek_deployed.py")
    if a.check:
        return status
    print(f"wrote {a.out} ({text.count(chr(10)) - 1} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
