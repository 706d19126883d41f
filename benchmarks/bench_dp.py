"""A DP-attention server's simulation (``simcore.dp_attention``), this checkout against another revision: CPU seconds
of ``shadowsim predict`` runs and identical results.

What it runs, in a fresh interpreter per measurement: ``shadowsim predict --model deepseek-ai/DeepSeek-V3 --gpu h200
--tp 8 --enable-dp-attention --dp-size 8`` on three closed-loop workloads (``brief``: 48 clients, 192 requests of
1000 + 200 tokens; ``uniform``: 256 clients, 2048 requests of 1000 + 1000 tokens, whose lockstep shapes repeat;
``ranged``: the same with ``--random-range-ratio 0.5``, lengths drawn from 50-100 %, whose shapes rarely repeat). Each
command is run in-process (``shadowsim.cli.main``) once to load the tables, then ``REPS`` times, each timed with
``time.process_time``: the whole command, parsing, building the latency models, simulating and the summary; the
figure is the fastest over all rounds and reps (other load on a shared machine only ever adds CPU time). Each child
also prints a SHA-256 digest of the JSON summary (wall time left out) and of every request record (``--out``), so a
speed change that changes results shows up as a digest mismatch.

Run: ``python benchmarks/bench_dp.py [ROUNDS] [--against REV] [--reps N]`` (default 2 rounds, 3 reps);
``python -m benchmarks dp`` runs it without a comparison.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ACCEPTS_ARGS = True
SERVER = "--model deepseek-ai/DeepSeek-V3 --gpu h200 --tp 8 --enable-dp-attention --dp-size 8"
CASES = (("brief", "--concurrency 48 --num-requests 192 --input-len 1000 --output-len 200"),
         ("uniform", "--concurrency 256 --num-requests 2048 --input-len 1000 --output-len 1000"),
         ("ranged", "--concurrency 256 --num-requests 2048 --input-len 1000 --output-len 1000 --random-range-ratio 0.5"))

# The child, run with cwd = the checkout measured (its code first on sys.path); argv = predict arguments, reps, a
# scratch directory for the records.
_CHILD = r"""
import contextlib, hashlib, io, json, sys, time
sys.path.insert(0, ".")
from shadowsim.cli import main
args, reps, out = sys.argv[1].split(), int(sys.argv[2]), sys.argv[3] + "/records.jsonl"
times = []
for k in range(reps + 1):  # the first run loads the tables and curves: not timed
    buf = io.StringIO()
    t0 = time.process_time()
    with contextlib.redirect_stdout(buf):
        main(["predict", *args, "--json", "--out", out])
    if k:
        times.append(time.process_time() - t0)
summary = json.loads(buf.getvalue())
summary.pop("wall_time_s", None)
h = hashlib.sha256(json.dumps(summary, sort_keys=True).encode())
with open(out, "rb") as f:
    h.update(f.read())
print(json.dumps({"cpu_s": min(times), "steps": summary.get("steps"), "digest": h.hexdigest()[:16]}))
"""


def main(argv: list[str] | None = None) -> dict:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.against import alternate, compare, options, run_script, sides

    rounds, against, reps = options(list(argv if argv is not None else sys.argv[1:]), rounds=2, reps=3)
    summary: dict = {"bench": "dp", "rounds": rounds, "reps": reps}
    with tempfile.TemporaryDirectory() as tmp:
        checkouts = sides(REPO, against, tmp)
        if against:
            summary["against"] = checkouts[1][0]
        vs = f", this checkout vs {checkouts[1][0]}" if against else ""
        print(f"shadowsim predict, DeepSeek-V3 on 8x H200, TP8 DP-attention 8 (CPU s of the command, min of {reps} "
              f"per process), {rounds} alternating rounds{vs}")
        for case, case_args in CASES:
            got = alternate(checkouts, rounds,  # noqa: B023 - each lambda runs inside this iteration
                            lambda path: run_script(path, _CHILD, f"{SERVER} {case_args}", str(reps), tmp))
            line = f"  {case:<8}"
            for name, _ in checkouts:
                cpu = min(g["cpu_s"] for g in got[name])
                digests = ",".join(sorted({g["digest"] for g in got[name]}))
                summary[f"{case}.{name}.cpu_s"] = cpu
                summary[f"{case}.{name}.digest"] = digests
                line += f" | {name}: {cpu:.3f} s cpu, {got[name][0]['steps']:,} steps, digest {digests}"
            print(line + compare(summary, case, checkouts), flush=True)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
