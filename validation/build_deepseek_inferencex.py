"""Build validation/sglang_deepseek_inferencex.csv: the DeepSeek-R1 B200 SGLang 0.5.9 and B300 0.5.10.post1 rows of
validation/sglang_deepseek_b200_b300_deployed.csv (TP/EP as launched) with the launch flags and benchmark client
they were really measured with.

**Whose runs these are.** The rows' ids (``dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg87``: model prefix ``dsr1``,
runner ``b200``, framework, precision, ISLxOSL, concurrency, config id) are InferenceX (SemiAnalysisAI/InferenceX,
formerly InferenceMAX) database records; aiconfigurator reads such records through its InferenceX adapter
(ai-dynamo/aiconfigurator @095f58a ``src/aiconfigurator/sdk/config_adapter/inferencex.py``: ``("dsr1", "fp8") →
deepseek-ai/DeepSeek-V3``, hardware ``b200 → b200_sxm``). They are not deployments of aiconfigurator's
generator, so the file's reconstructed ``server_args`` (``--enable-mixed-chunk --max-prefill-tokens isl+1500``)
do not describe them. InferenceX publishes its launch scripts. At SemiAnalysisAI/InferenceX @12ba0ae07
(2026-03-25, "Update DSR1 h200 & b200 sglang image to v0.5.9-cu130"; the launch lines stay unchanged until the
v0.5.11 image, 6d089f7ab, 2026-05-14) ``.github/configs/nvidia-master.yaml`` has three B200 SGLang v0.5.9 DeepSeek-R1
configurations, launched by ``benchmarks/single_node/*.sh``:

- ``dsr1-fp8-b200-sglang`` (``dsr1_fp8_b200.sh``): TP8 EP1 at 1024×1024 and 1024×8192, C 4…64, and 8192×1024 at
  C 4 (11 points, exactly the 11 ``cfg87`` rows): ``--cuda-graph-max-bs 128 --max-running-requests 128
  --mem-fraction-static 0.82 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 32768 --max-prefill-tokens 32768
  --enable-flashinfer-allreduce-fusion --scheduler-recv-interval {10 if C < 16 else 30} --disable-radix-cache
  --attention-backend trtllm_mla --stream-interval 30 --ep-size 1 --moe-runner-backend flashinfer_trtllm
  --quantization fp8`` (no ``--enable-mixed-chunk``); TP4 EP1 at 8192×1024, C 4…32 (4 points): the TP4 branch,
  ``--cuda-graph-max-bs 32 --max-running-requests 32 --mem-fraction-static 0.95 --chunked-prefill-size 8192
  --max-prefill-tokens 8192 --scheduler-recv-interval 10``, the rest alike;
- ``dsr1-fp8-b200-sglang-mtp`` (``dsr1_fp8_b200_mtp.sh``): TP8 EP1, all three lengths at C 4…512, EAGLE
  speculative decoding (``--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-num-draft-tokens 3
  --speculative-eagle-topk 1``), ``--max-running-requests 512``, ``--chunked-prefill-size 16384
  --max-prefill-tokens 16384``; every TP8 EP1 fp8 row that is not a ``cfg87`` point is one of these (the only
  other TP8 EP1 fp8 configuration). They go to ``validation/sglang_deepseek_inferencex_eagle.csv`` (24 distinct
  runs; the accepted length is not recorded, ``validate`` assumes its default, `simcore.speculative`);
- ``dsr1-fp4-b200-sglang`` (``dsr1_fp4_b200.sh``, nvidia/DeepSeek-R1-0528-FP4-V2): TP4 EP4 at the three lengths, C
  4…128, and TP8 EP8 at 1024×1024 / 1024×8192, C 4…128, and 8192×1024, C 4…16 (33 points; the file has exactly
  33 distinct nvfp4 0.5.9 TP4/EP4 and TP8/EP8 measurements): ``--cuda-graph-max-bs 256 --max-running-requests 256
  --mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 16384 --ep-size EP --quantization
  modelopt_fp4 --enable-flashinfer-allreduce-fusion --scheduler-recv-interval {10 if C < 16 else 30}
  --enable-symm-mem --disable-radix-cache --attention-backend trtllm_mla --moe-runner-backend flashinfer_trtllm
  --stream-interval 10`` (``--max-prefill-tokens`` not given: SGLang's 16384).

The B300 rows (SGLang 0.5.10.post1) are InferenceX's ``dsr1-fp8-b300-sglang`` and ``dsr1-fp4-b300-sglang``
(added @5b302f147 and @9ebeafb4e, 2026-04-17, image ``v0.5.10.post1-cu130`` until 2026-05-16): the same search
spaces as on B200 (fp8: TP8 1024×1024 at C 4…64 and 8192×1024 at C 4, TP4 8192×1024 at C 4…32, the 6 ``cfg719``
and 4 ``cfg720`` rows; nvfp4 without 1024×8192: TP4/EP4 at C 4…128, 12 ``cfg717`` rows, TP8/EP8, 9 ``cfg718``
rows), launched by ``dsr1_fp8_b300.sh`` / ``dsr1_fp4_b300.sh`` with the B200 scripts' flags (unchanged in that
window); there was no B300 EAGLE configuration then.

**The B300 runs' prompts were ~5× longer on the server than the client counted.** The v0.5.10.post1 image pins
``transformers==5.3.0``, which loads DeepSeek-R1's tokenizer with a ``Metaspace`` pre-tokenizer and a non-byte-level
decoder; the server repairs its copy, InferenceX's client repaired its own only for a local ``--model`` directory
(``_fix_tokenizer_for_sglang`` @ef01c2205) while the B300 scripts passed the Hub id, until @5fe6d56ee (2026-05-15,
"~5x client/server tokenizer mismatch"). The client's random prompts (decoded from random ids and re-encoded
until the client counts ``isl``-range tokens) then reach the server as ``B300_TOKEN_FACTOR[isl]`` times as many tokens,
reproduced with transformers 5.3.0 by ``validation/client_tokenizer_inflation.py`` (its docstring). B300 rows get
that factor in ``server_tokens_per_prompt_token``; B200 0.5.9 (transformers 4.57.1) rows are unaffected.

**The server encodes every prompt, one at a time.** The client sends text; SGLang's tokenizer manager encodes it
synchronously in its one asyncio process (``managers/tokenizer_manager.py`` ``_tokenize_texts``), so each TTFT
includes its prompt's encoding and that of every prompt ahead of it. B200 rows get the CPU time per prompt token
measured by ``validation/tokenizer_cost.py`` in ``server_tokenize_us_per_token`` (``B200_TOKENIZE_US_PER_TOKEN``); the
B300 rows' text (decoded by the broken tokenizer) was not measured and stays blank.

A measurement filed twice (same configuration and load, TTFT and TPOT equal to 1e-15 relative) is kept once.
Each output row names its configuration in ``deployment_note``.

**The client.** All scripts call ``run_benchmark_serving`` (``benchmarks/benchmark_lib.sh``): InferenceX's fork of
vLLM's benchmark_serving, ``--dataset-name random --random-range-ratio 0.8`` (``.github/workflows/
benchmark-tmpl.yml``: ``RANDOM_RANGE_RATIO: 0.8``) ``--num-prompts 10·C --max-concurrency C --request-rate inf
--ignore-eos --num-warmups 2·C``, ``--backend vllm`` (the completions API, no chat template), seed 0 (``--seed``
default). Lengths: ``randint(int(L·0.8), L + 1)`` for input and output (``sample_random_requests``), the rule
`simcore.benchmark_clients.bench_serving_lengths` draws. The warm-up sends 2·C copies of the first request and
awaits them all before the run.

**Flags the simulator does not model** (listed in ``deployment_note``, left out of ``server_args``):
``--enable-flashinfer-allreduce-fusion`` (all-reduce fused with the next RMSNorm), ``--enable-symm-mem``
(symmetric-memory all-reduce), ``--attention-backend trtllm_mla`` (SGLang's SM100 default, which the pricing
assumes), ``--moe-runner-backend flashinfer_trtllm`` (SGLang's SM100 default for DeepSeek fp8/fp4,
``server_args._handle_model_specific_adjustments``), ``--quantization fp8 / modelopt_fp4`` (the row's precision),
``--data-parallel-size 1``, ``--tensor-parallel-size`` (the row's ``tp``) and the environment
``SGL_ENABLE_JIT_DEEPGEMM=false SGLANG_ENABLE_FLASHINFER_GEMM=true`` (fp8 script).

**One source of truth.** The configurations, their search spaces, flags, client, tokenizer effects and the rules
that recognise a row (and its twins) are data in the installed package, ``shadowsim/known_deployments.py`` (its
docstring; the constants named here live there). This script only selects the B200 0.5.9 / B300 0.5.10.post1 runs
of the deployed file and writes their columns (`Match.columns`); ``shadowsim validate`` simulates the shared file's
rows with the same entries (``--deployment as-deployed``, docs/accuracy.md §3.15). Derived from the registry, the
two CSVs are byte-identical to the ones this script wrote with its own rules before.

    python validation/build_deepseek_inferencex.py           # writes the CSV
    python validation/build_deepseek_inferencex.py --check   # exits 1 if the CSV in the repo differs
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from shadowsim.measurement_files import render_csv, write_or_check

from shadowsim import known_deployments as registry

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "sglang_deepseek_b200_b300_deployed.csv"  # TP/EP as launched (build_deepseek_deployed.py)
OUT = ROOT / "sglang_deepseek_inferencex.csv"
OUT_EAGLE = ROOT / "sglang_deepseek_inferencex_eagle.csv"  # the EAGLE configuration's rows (slow to simulate)
# the configurations this file holds: B200 SGLang 0.5.9 and B300 0.5.10.post1 (the registry also knows a 0.5.6 one)
VERSIONS = ("0.5.9", "0.5.10.post1")


def build(source: Path) -> tuple[list[str], list[dict[str, str]], dict[str, int], list[dict[str, str]]]:
    """(fields, rows, counts per rule: rows kept per configuration and ``same run`` rows left out, the EAGLE
    configuration's rows for OUT_EAGLE). Which configuration a row measured, its flags and client: the registry
    (`shadowsim.known_deployments`: `recognise_all`, `Match.columns`), the one source of truth that ``shadowsim
    validate`` also simulates the shared file's rows with."""
    with source.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    out: list[dict[str, str]] = []
    eagle: list[dict[str, str]] = []
    counts: dict[str, int] = {}
    for r, (m, first) in zip(rows, registry.recognise_all(rows)):
        if m is None or m.deployment.sglang_version not in VERSIONS:
            continue
        if first is not None:
            counts["same run (left out)"] = counts.get("same run (left out)", 0) + 1
            continue
        assert not m.relabelled, r["id"]  # the deployed file has the tp as launched
        r = dict(r)
        r.update(m.columns(int(r["isl"]), int(r["osl"]), int(r["concurrency"])))
        cfg = m.deployment.name
        counts[cfg] = counts.get(cfg, 0) + 1
        (eagle if cfg.endswith("-mtp") else out).append(r)
    extra = [f for f in ("client", "random_range_ratio", "seed", "warmup_requests", "server_tokens_per_prompt_token",
                         "server_tokenize_us_per_token", "deployment_note")
             if f not in fields]
    return fields + extra, out, counts, eagle


def render(fields: list[str], rows: list[dict[str, str]]) -> str:
    return render_csv(fields, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    a = ap.parse_args(argv)
    fields, rows, counts, eagle = build(a.source)
    outputs = ((a.out, render(fields, rows)), (a.out.with_name(OUT_EAGLE.name), render(fields, eagle)))
    status = write_or_check(outputs, check=a.check, rebuild="python validation/build_deepseek_inferencex.py")
    if a.check:
        return status
    print(f"wrote {a.out}: {len(rows)} rows; {counts}; {OUT_EAGLE.name}: {len(eagle)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
