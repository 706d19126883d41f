"""SGLang's real scheduler on the Qwen3-32B TP1 rows' shape: how many requests run at once in a given KV pool?

The TP1 rows of ../shared/data/validation/sglang_qwen3_32b_h100.csv (16 closed-loop clients, isl 1024/2048, osl
128–512, ignore_eos) imply by Little's law that only ~5 (1024-token prompts) or ~2–3 (2048) requests ran at once
(docs/accuracy.md §3.4). This drives SGLang 0.5.23's own ``Scheduler`` (the oracle environment of ``make oracle``,
overlap scheduling on, CUDA graphs off, on CPU with the oracle's tiny dummy-weight model and virtual clock) and
shadowsim's server through the same closed loop — prompts of isl + 8 tokens (the chat template), osl outputs,
chunked prefill 8192, max prefill 16384 — in a pool of CAP tokens, compares them step by step, and prints the mean
decode batch of each side. The admission rules of 0.5.8 that decide this (``PrefillAdder``, ``new_token_ratio``,
``retract_decode``) are those of 0.5.23 (read in both wheels); the step times are the oracle's shared linear
function, so only the scheduling decisions are real, which is all the question needs.

Usage (repo root, after `make oracle` has built the environment once):
    python validation/qwen_tp1_oracle_probe.py ISL OSL [REQUESTS] [CAP]
e.g. `1024 128 160 18383` (SGLang's default pool for the row) or `1024 128 160 7101` (the pool at
--mem-fraction-static 0.8).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str]) -> int:
    from oracle import env as oracle_env
    from oracle import shadow_side
    from oracle.__main__ import SglangRun, default_trace
    from oracle.compare import compare, format_row
    from oracle.scenarios import Scenario, ServerFlags, shared_prefix_workload

    if len(argv) < 2:
        print(__doc__.split("Usage")[1], file=sys.stderr)
        return 2
    isl, osl = int(argv[0]), int(argv[1])
    n = int(argv[2]) if len(argv) > 2 else 160
    cap = int(argv[3]) if len(argv) > 3 else 18383
    # the oracle's tiny Llama derives a 32,768-token context; every prompt here is far below it
    flags = ServerFlags(max_total_tokens=cap, chunked_prefill_size=8192, max_prefill_tokens=16384,
                        max_running_requests=2048, context_length=32768, disable_overlap_schedule=False)
    reqs = shared_prefix_workload(5, n, 0, (isl + 8, isl + 9), (osl, osl + 1), True)
    sc = Scenario(f"qwen-tp1-{isl}x{osl}-{n}-{cap}", "Qwen3-32B TP1 row shape", "scheduler", flags, reqs,
                  concurrency=16)
    run = SglangRun(oracle_env.build(), [sc], default_trace(), 1, False)
    try:
        theirs = run.result(sc)
    finally:
        run.close()
    ours = shadow_side.run(sc, None)
    print(format_row(compare(sc.name, sc.kind, theirs, ours)))
    for name, trace in (("SGLang 0.5.23", theirs), ("shadowsim", ours)):
        dec = [s for s in trace["steps"] if s.get("mode") == "decode"]
        rest = dec[len(dec) // 4:]  # past the first round
        print(f"{name}: {len(trace['steps'])} steps, mean decode batch {sum(s['n_dec'] for s in rest) / len(rest):.2f}"
              f" (last three quarters), {sum(len(s.get('retracted') or []) for s in trace['steps'])} retractions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
