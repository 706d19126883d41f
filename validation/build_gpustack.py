"""Build validation/gpustack_sglang.csv: GPUStack's published SGLang benchmarks as `shadowsim validate` rows.

Source: ../shared/data/gpustack_perf_lab (gpustack/gpustack @47277d7, docs/performance-lab, Apache-2.0; licence
notice in validation/NOTICE). `gpustack_bench_results.csv` holds one line per engine run parsed from the
markdown pages: the page, the hardware line, the engine versions, the serve command and the bench printout.
Only the SGLang lines are used.

Benchmark protocol, from every page's "Benchmark Script" section:

    vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt
        --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000   [--max-concurrency 4]

- `--request-rate` is not given, so it is `inf`: every prompt is sent at once (the printouts say "Peak concurrent
  requests: 1000"); with `--max-concurrency C` (qwen3-8b/h100-latency.md) C clients send back to back. Both are
  written as a closed loop: `concurrency` = C, or the number of requests for the burst (one request per client);
- no warm-up (vllm bench sends one test prompt before measuring and does not count it): `warmup_requests` 0;
- `num_requests` = the printout's "Successful requests" (1000, or 100 at `--max-concurrency 4`; 984 in one run);
- ShareGPT lengths: the printout gives totals only, so `isl` = Total input tokens / requests and `osl` = Total
  generated tokens / requests (both as the client counted them; the server also sees the chat template, which
  `shadowsim validate` adds as `--prompt-overhead-tokens`). `length_dist` is `fixed` (every request at the
  means); `shadowsim validate --length-dist exponential|sharegpt` reruns with a spread (docs/accuracy.md §3.5);
- measured: Mean TTFT, Mean TPOT (ms), Request throughput (req/s).

Server: model, TP, EP, DP attention from the serve command; GPU from the hardware line; version from the engine
versions. The flags the simulator models (`simcore.server_flags`, the table of `shadowsim predict`) go into the
`server_args` column as typed, so `validate` simulates the server that was measured. A flag the simulator does not
model (torch.compile, pipeline parallelism, a
non-default attention backend, ...) puts its reason in the `unsupported` column, and `validate` skips the row with
it; unknown models are left for `validate` to refuse (the catalogue may grow). `dp_attention` is the DP-attention
size SGLang runs: `--dp-size` with `--enable-dp-attention`, 1 without `--dp-size` (SGLang then turns it off). Model ids that
are the same architecture as a catalogued config are mapped (`MODEL_ALIASES`); checkpoints that only quantize a
catalogued model become its id plus a `precision`.

Usage (from the repo root):
    python validation/build_gpustack.py                 # writes validation/gpustack_sglang.csv
    python validation/build_gpustack.py --check         # exits 1 if the CSV in the repo differs
    python validation/build_gpustack.py --shape         # prints SHAREGPT_SHAPE_* for simcore/perf/validation.py
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import sys
from pathlib import Path

from shadowsim.measurement_files import render_csv, write_or_check

HERE = Path(__file__).resolve().parent
DEFAULT_SHARED = HERE.parent.parent / "shared"
SOURCE = Path("data/gpustack_perf_lab/gpustack_bench_results.csv")
DOCS = Path("data/gpustack_perf_lab/docs/performance-lab")
SHAPE_STREAM = Path("data/llmservingsim/workloads/sharegpt-qwen3-32b-300-sps10.jsonl")
OUT = HERE / "gpustack_sglang.csv"

COLUMNS = ("id", "model", "gpu", "precision", "tp", "ep", "dp_attention", "isl", "osl", "concurrency",
           "request_rate", "num_requests", "sglang_version", "measured_ttft_ms", "measured_tpot_ms",
           "measured_throughput_rps", "warmup_requests", "length_dist", "unsupported", "server_args", "source")

# Same architecture (config.json differs only in context length / weights): the catalogued id simulates them.
MODEL_ALIASES = {
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "Qwen/Qwen3-235B-A22B",
}
# Quantized checkpoints of a catalogued model: (catalogued id, precision). Qwen's -FP8 releases are 128×128
# block-scaled fp8 (their config's weight_block_size), as Qwen/Qwen3-32B-FP8 in the catalogue.
QUANTIZED = {"Qwen/Qwen3-8B-FP8": ("Qwen/Qwen3-8B", "fp8_block"), "Qwen/Qwen3-14B-FP8": ("Qwen/Qwen3-14B", "fp8_block")}
GPUS = (("H200 SXM", "h200_sxm"), ("H100 SXM", "h100_sxm"), ("A100 SXM", "a100_sxm"))
# Flags with no effect on what is simulated (networking, templates, parsers) or already read into columns.
HARMLESS = {"--host", "--port", "--model-path", "--model", "--tp-size", "--tp", "--ep-size", "--dp-size", "--dp",
            "--enable-dp-attention", "--chat-template", "--reasoning-parser", "--tool-call-parser",
            "--context-length"}


def _simulated_flags() -> set[str]:
    import sys as _sys

    root = str(HERE.parent)
    if root not in _sys.path:
        _sys.path.insert(0, root)
    from simcore.server_flags import SERVER_FLAGS, SGLANG_ABBREVIATIONS

    # and the abbreviations SGLang's argparse accepts (`--dp 8`), kept as typed
    return {f.flag for f in SERVER_FLAGS if f.sglang} | set(SGLANG_ABBREVIATIONS)


# The SGLang flags `shadowsim predict` models (simcore.server_flags): they travel in the `server_args` column.
SIMULATED_FLAGS = _simulated_flags()


def _server_args(flags: dict[str, str | None]) -> str:
    """The serve command's flags that the simulator models, as typed (`server_args` column)."""
    return " ".join(k if v is None else f"{k} {shlex.quote(v)}" for k, v in flags.items() if k in SIMULATED_FLAGS)


def _flags(cmd: str) -> dict[str, str | None]:
    """`--flag value` / `--flag=value` / bare `--flag` → {flag: value or None}."""
    toks = shlex.split(cmd.replace("\\", " "))
    out: dict[str, str | None] = {}
    for i, t in enumerate(toks):
        if not t.startswith("--"):
            continue
        if "=" in t:
            k, v = t.split("=", 1)
            out[k] = v
        else:
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            out[t] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def _unsupported(flags: dict[str, str | None], gpu: str) -> str | None:
    if int(flags.get("--pp-size") or 1) > 1:
        return "pipeline parallelism is not modelled"
    if "--enable-torch-compile" in flags:
        return "torch.compile is not modelled"
    backend = flags.get("--attention-backend")
    # SGLang's default on Hopper for GQA models is fa3, so naming it changes nothing there
    if backend is not None and not (backend == "fa3" and gpu in ("h100_sxm", "h200_sxm")):
        return f"non-default attention backend ({backend}) is not modelled"
    other = sorted(k for k in flags if k not in HARMLESS and k not in ("--pp-size", "--attention-backend")
                   and k not in SIMULATED_FLAGS)
    if other:
        return f"server flag(s) {' '.join(other)} not modelled"
    return None


def _protocol(doc: Path) -> tuple[int, int | None]:
    """(--num-prompts, --max-concurrency or None) of the page's ShareGPT benchmark command."""
    for line in doc.read_text().splitlines():
        if "bench serve" in line and "sharegpt" in line:
            f = _flags(line.strip())
            return int(f["--num-prompts"] or 0), int(f["--max-concurrency"]) if f.get("--max-concurrency") else None
    raise SystemExit(f"{doc}: no ShareGPT `vllm bench serve` command found")


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def build(shared: Path) -> tuple[list[dict[str, object]], list[str]]:
    """Rows for the CSV, and lines naming the SGLang runs left out (no benchmark result)."""
    rows: list[dict[str, object]] = []
    dropped: list[str] = []
    seen: dict[str, int] = {}
    with (shared / SOURCE).open(newline="") as fh:
        records = [r for r in csv.DictReader(fh) if r["engine"] == "sglang"]
    for r in records:
        m = json.loads(r["metrics"])
        if not m.get("Successful requests") or not m.get("Mean TTFT (ms)"):
            dropped.append(f"{r['file']} | {r['serve_cmd']}: no benchmark result on the page")
            continue
        flags = _flags(r["serve_cmd"])
        hf = flags.get("--model-path") or flags.get("--model") or ""
        model, precision = QUANTIZED.get(hf, (MODEL_ALIASES.get(hf, hf), ""))
        gpu = next((g for key, g in GPUS if key in r["hardware"]), r["hardware"])
        version = re.search(r"SGLang:\s*v?([0-9][0-9a-z.]*)", r["engine_versions"])
        tp = int(flags.get("--tp-size") or flags.get("--tp") or 1)
        dp = int(flags.get("--dp-size") or flags.get("--dp") or 1)
        # SGLang turns DP attention off at --dp-size 1 (the default): ServerArgs._handle_data_parallelism, "if
        # self.dp_size == 1: self.enable_dp_attention = False", in 0.5.3, 0.5.6.post2 and 0.5.9 alike; so
        # `--tp-size 8 --enable-dp-attention` alone serves plain TP8
        dp_att = dp if "--enable-dp-attention" in flags and dp > 1 else 1
        num_prompts, max_conc = _protocol(shared / DOCS / r["file"])
        n = int(m["Successful requests"])
        base = f"{_slug(r['file'].removesuffix('.md'))}_{_slug(r['section'].split('>')[-1])[:40]}"
        seen[base] = seen.get(base, 0) + 1
        rows.append({
            "id": base if seen[base] == 1 else f"{base}_{seen[base]}",
            "model": model, "gpu": gpu, "precision": precision, "tp": tp,
            "ep": int(flags.get("--ep-size") or 1), "dp_attention": dp_att,
            "isl": round(int(m["Total input tokens"]) / n), "osl": round(int(m["Total generated tokens"]) / n),
            # rate inf: a burst of all prompts (one per client), or C back-to-back clients
            "concurrency": max_conc or n, "request_rate": "inf", "num_requests": n,
            "sglang_version": version.group(1) if version else "",
            "measured_ttft_ms": m["Mean TTFT (ms)"], "measured_tpot_ms": m["Mean TPOT (ms)"],
            "measured_throughput_rps": m["Request throughput (req/s)"],
            "warmup_requests": 0, "length_dist": "fixed",
            "unsupported": _unsupported(flags, gpu) or "",
            "server_args": _server_args(flags),
            "source": f"{r['file']} | {r['section']} | {' '.join(r['serve_cmd'].split())} | "
                      f"num_prompts {num_prompts}",
        })
    return rows, dropped


def render(rows: list[dict[str, object]]) -> str:
    return render_csv(COLUMNS, rows)


def shape(shared: Path, quantiles: int = 20) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Quantile-midpoint shapes (value / mean) of the ShareGPT-derived stream, filtered as vLLM's ShareGPT loader."""
    import numpy as np

    recs = [json.loads(line) for line in (shared / SHAPE_STREAM).open()]
    i = np.array([x["input_toks"] for x in recs])
    o = np.array([x["output_toks"] for x in recs])
    keep = (i >= 4) & (i <= 1024) & (o >= 4) & (i + o <= 2048)
    q = (np.arange(quantiles) + 0.5) / quantiles
    out = []
    for a in (i[keep], o[keep]):
        v = np.quantile(a, q)
        out.append(tuple(round(float(x), 3) for x in v / v.mean()))
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared folder (default ../shared)")
    ap.add_argument("--out", type=Path, default=OUT, help="CSV to write (default validation/gpustack_sglang.csv)")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    ap.add_argument("--shape", action="store_true", help="print the ShareGPT length shapes and exit")
    a = ap.parse_args(argv)
    if a.shape:
        ins, outs = shape(a.shared)
        print(f"SHAREGPT_SHAPE_INPUT = {ins}\nSHAREGPT_SHAPE_OUTPUT = {outs}")
        return 0
    rows, dropped = build(a.shared)
    text = render(rows)
    for d in dropped:
        print(f"left out: {d}", file=sys.stderr)
    status = write_or_check([(a.out, text)], check=a.check, rebuild="python validation/build_gpustack.py")
    if a.check:
        return status
    flagged = sum(1 for r in rows if r["unsupported"])
    print(f"wrote {a.out}: {len(rows)} rows ({flagged} marked unsupported), {len(dropped)} left out", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
