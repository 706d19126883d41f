"""Build validation/sglang_deepseek_b200_inferencex.csv: the DeepSeek-R1 fp8 TP8 EP1 B200 SGLang 0.5.9 rows of
../shared/data/validation/sglang_deepseek_b200_b300.csv with the launch flags and benchmark client they were
really measured with.

**Whose runs these are.** The rows' ids (``dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg87``: model prefix ``dsr1``,
runner ``b200``, framework, precision, ISLxOSL, concurrency, config id) are InferenceX (SemiAnalysisAI/InferenceX,
formerly InferenceMAX) database records; aiconfigurator reads such records through its InferenceX adapter
(ai-dynamo/aiconfigurator @095f58a ``src/aiconfigurator/sdk/config_adapter/inferencex.py``: ``("dsr1", "fp8") →
deepseek-ai/DeepSeek-V3``, hardware ``b200 → b200_sxm``). They are not deployments of aiconfigurator's
generator, so the file's reconstructed ``server_args`` (``--enable-mixed-chunk --max-prefill-tokens isl+1500``)
do not describe them. InferenceX publishes its launch scripts. At SemiAnalysisAI/InferenceX @12ba0ae07
(2026-03-25, "Update DSR1 h200 & b200 sglang image to v0.5.9-cu130"), ``.github/configs/nvidia-master.yaml``
has two TP8 EP1 fp8 B200 SGLang v0.5.9 configurations:

- ``dsr1-fp8-b200-sglang``: 1024×1024 and 1024×8192 at C 4…64, 8192×1024 at C 4 (11 points), launched by
  ``benchmarks/single_node/dsr1_fp8_b200.sh``: ``--cuda-graph-max-bs 128 --max-running-requests 128
  --mem-fraction-static 0.82 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 32768 --max-prefill-tokens 32768
  --enable-flashinfer-allreduce-fusion --scheduler-recv-interval {10 if C < 16 else 30} --disable-radix-cache
  --attention-backend trtllm_mla --stream-interval 30 --ep-size 1 --moe-runner-backend flashinfer_trtllm
  --quantization fp8`` (no ``--enable-mixed-chunk``);
- ``dsr1-fp8-b200-sglang-mtp``: all three lengths at C 4…512 with EAGLE speculative decoding
  (``dsr1_fp8_b200_mtp.sh``: ``--speculative-algorithm EAGLE --speculative-num-steps 2
  --speculative-num-draft-tokens 3 --speculative-eagle-topk 1``, ``--max-running-requests 512``,
  ``--chunked-prefill-size 16384 --max-prefill-tokens 16384``, recv interval as above).

The 11 ``cfg87`` rows are exactly the first configuration's 11 points; 3 more rows (ids
``2026_03_25_…``) carry the same TTFT and TPOT (to 1e-15 relative) and are the same runs filed again. Every other
0.5.9 TP8 EP1 fp8 B200 row is a point of the MTP configuration (the only other one in the master file); the
simulator does not run speculative decoding in ``validate`` yet, so those rows are left out here (the count is
printed). Rule per output row in ``deployment_note``.

**The client.** Both scripts call ``run_benchmark_serving`` (``benchmarks/benchmark_lib.sh``): InferenceX's fork of
vLLM's benchmark_serving, ``--dataset-name random --random-range-ratio 0.8`` (``.github/workflows/
benchmark-tmpl.yml``: ``RANDOM_RANGE_RATIO: 0.8``) ``--num-prompts 10·C --max-concurrency C --request-rate inf
--ignore-eos --num-warmups 2·C``; seed 0 (``--seed`` default). Lengths: ``randint(int(L·0.8), L + 1)`` for input
and output (``sample_random_requests``), the rule `simcore.benchmark_clients.bench_serving_lengths` draws. The
warm-up sends 2·C copies of the first request and awaits them all before the run.

**Flags the simulator does not model** (listed in ``deployment_note``, left out of ``server_args``):
``--enable-flashinfer-allreduce-fusion`` (all-reduce fused with the next RMSNorm), ``--attention-backend
trtllm_mla`` (SGLang's SM100 default, which the pricing assumes), ``--moe-runner-backend flashinfer_trtllm`` and
``--quantization fp8`` (the checkpoint's block fp8, which the pricing assumes; the MoE runner is SGLang's SM100
default for DeepSeek fp8, ``server_args._handle_model_specific_adjustments``), ``--data-parallel-size 1``,
``--tensor-parallel-size 8`` (the row's ``tp``) and the environment ``SGL_ENABLE_JIT_DEEPGEMM=false
SGLANG_ENABLE_FLASHINFER_GEMM=true``.

    python validation/build_deepseek_inferencex.py           # writes the CSV
    python validation/build_deepseek_inferencex.py --check   # exits 1 if the CSV in the repo differs
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT.parent.parent / "shared" / "data" / "validation" / "sglang_deepseek_b200_b300.csv"
OUT = ROOT / "sglang_deepseek_b200_inferencex.csv"
PLAIN_CONFIG_ID = "_cfg87"  # dsr1-fp8-b200-sglang's 11 points (isl×osl×C as in nvidia-master.yaml @12ba0ae07)
RANGE_RATIO = "0.8"
NOT_SIMULATED = ("not simulated: --enable-flashinfer-allreduce-fusion --attention-backend trtllm_mla "
                 "--moe-runner-backend flashinfer_trtllm --quantization fp8 --data-parallel-size 1")


def launch_flags(concurrency: int) -> str:
    """``dsr1_fp8_b200.sh`` @12ba0ae07, TP 8, the flags the simulator models."""
    recv = 30 if concurrency >= 16 else 10
    return (f"--cuda-graph-max-bs 128 --max-running-requests 128 --mem-fraction-static 0.82 "
            f"--kv-cache-dtype fp8_e4m3 --chunked-prefill-size 32768 --max-prefill-tokens 32768 "
            f"--scheduler-recv-interval {recv} --disable-radix-cache --stream-interval 30 --ep-size 1")


def _selected(r: dict[str, str]) -> bool:
    return (r["gpu"] == "b200_sxm" and r["precision"] == "fp8" and r["tp"] == "8" and r["ep"] == "1"
            and r["sglang_version"] == "0.5.9")


def build(source: Path) -> tuple[list[str], list[dict[str, str]], int]:
    """(fields, rows, number of MTP-configuration rows left out)."""
    with source.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = [r for r in reader if _selected(r)]
    # the same run filed twice carries the same TTFT and TPOT up to the last printed digit (1e-15 relative)
    key = lambda r: (r["isl"], r["osl"], r["concurrency"], round(float(r["measured_ttft_ms"]), 6),  # noqa: E731
                     round(float(r["measured_tpot_ms"]), 6))
    plain = {key(r): r["id"] for r in rows if r["id"].endswith(PLAIN_CONFIG_ID)}
    assert len(plain) == 11, f"expected the 11 points of dsr1-fp8-b200-sglang, found {len(plain)}"
    out, left_out = [], 0
    for r in rows:
        first = plain.get(key(r))
        if first is None:
            left_out += 1  # a point of dsr1-fp8-b200-sglang-mtp (EAGLE), not simulated by validate yet
            continue
        c = int(r["concurrency"])
        r = dict(r)
        r["server_args"] = launch_flags(c)
        r["client"] = "bench_serving"
        r["random_range_ratio"] = RANGE_RATIO
        r["seed"] = "0"
        r["num_requests"] = str(10 * c)
        r["warmup_requests"] = str(2 * c)
        rule = "dsr1-fp8-b200-sglang" if r["id"] == first else f"dsr1-fp8-b200-sglang (same run as {first})"
        r["deployment_note"] = f"{rule}; {NOT_SIMULATED}"
        out.append(r)
    extra = [f for f in ("client", "random_range_ratio", "seed", "warmup_requests", "deployment_note")
             if f not in fields]
    return fields + extra, out, left_out


def render(fields: list[str], rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({f: r.get(f, "") for f in fields})
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    a = ap.parse_args(argv)
    fields, rows, left_out = build(a.source)
    text = render(fields, rows)
    if a.check:
        if not a.out.exists() or a.out.read_text() != text:
            print(f"{a.out} is stale: rerun python validation/build_deepseek_inferencex.py", file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(f"wrote {a.out}: {len(rows)} rows ({left_out} EAGLE/MTP-configuration rows left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
