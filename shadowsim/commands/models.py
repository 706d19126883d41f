"""List the models shadowsim can simulate: every one is read from its public config.json (no guessing).

Any of these ids (case-insensitive; the organisation and an -Instruct suffix are optional) works as --model;
so does the path of a local config.json of a supported architecture (Llama, Mistral, Qwen2/3, Qwen3-MoE,
Mixtral, DeepSeek-V2/V3/R1, Kimi-K2, the text backbone of Qwen3-VL).

Examples:
  shadowsim models
  shadowsim models --filter qwen3
  shadowsim models --json | jq '.[] | select(.num_experts > 0) | .id'
"""
from __future__ import annotations

import argparse
import json

from shadowsim.catalogue import models


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", default=None, metavar="TEXT", help="only ids containing TEXT (case-insensitive)")
    p.add_argument("--json", action="store_true", help="print the records as a JSON list on stdout")
    p.add_argument("--all", action="store_true",
                   help="also list widely served models that cannot be simulated yet, with the reason")


def run(args: argparse.Namespace) -> int:
    rows = [m for m in models() if not args.filter or args.filter.lower() in m["id"].lower()]
    missing: list[dict[str, str]] = []
    if args.all:
        from simcore.models.loader import not_modelled

        missing = [{"id": k, "not_modelled": v} for k, v in sorted(not_modelled().items())
                   if not args.filter or args.filter.lower() in k]
    if args.json:
        print(json.dumps(rows + missing, indent=1))
        return 0
    head = ("id", "arch", "params B", "active B", "layers", "attn", "experts", "KV B/tok", "context", "prec")
    body = [(m["id"], m["architecture"].removesuffix("ForCausalLM").removesuffix("ForConditionalGeneration"),
             f"{m['params_billion']:g}", f"{m['active_params_billion']:g}", str(m["num_layers"]), m["attention"],
             f"{m['num_experts']}/{m['experts_per_token']}" if m["num_experts"] else "-",
             f"{m['kv_bytes_per_token']:,}", f"{m['context_length_tokens']:,}", m["precision"]) for m in rows]
    _table(head, body)
    print(f"{len(rows)} models (KV B/tok: bf16 KV bytes per token over all layers, TP 1)")
    for m in missing:
        print(f"not modelled: {m['id']}: {m['not_modelled']}")
    return 0


def _table(head: tuple[str, ...], body: list[tuple[str, ...]]) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for r in body:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
