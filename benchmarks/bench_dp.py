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
import subprocess
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


def _measure(checkout: Path, args: str, reps: int, scratch: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, f"{SERVER} {args}", str(reps), str(scratch)], cwd=checkout,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child in {checkout} failed: {out.stderr.strip()[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    args = list(argv if argv is not None else sys.argv[1:])
    against = None
    reps = 3
    if "--against" in args:
        i = args.index("--against")
        against = args[i + 1]
        del args[i:i + 2]
    if "--reps" in args:
        i = args.index("--reps")
        reps = int(args[i + 1])
        del args[i:i + 2]
    args = [a for a in args if not a.startswith("-")]
    rounds = int(args[0]) if args else 2
    summary: dict = {"bench": "dp", "rounds": rounds, "reps": reps}
    with tempfile.TemporaryDirectory() as tmp:
        sides = [("this", REPO)]
        if against:
            rev = subprocess.run(["git", "rev-parse", "--short", against], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.strip()
            old = Path(tmp) / "old"
            old.mkdir()
            tar = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
            sides.append((rev, old))
            summary["against"] = rev
        print(f"shadowsim predict, DeepSeek-V3 on 8x H200, TP8 DP-attention 8 (CPU s of the command, min of {reps} "
              f"per process), {rounds} alternating rounds" + (f", this checkout vs {sides[1][0]}" if against else ""))
        for case, case_args in CASES:
            got: dict[str, list[dict]] = {name: [] for name, _ in sides}
            for k in range(rounds):
                for name, path in (sides if k % 2 == 0 else sides[::-1]):
                    got[name].append(_measure(path, case_args, reps, Path(tmp)))
            line = f"  {case:<8}"
            for name, _ in sides:
                cpu = min(g["cpu_s"] for g in got[name])
                digests = ",".join(sorted({g["digest"] for g in got[name]}))
                summary[f"{case}.{name}.cpu_s"] = cpu
                summary[f"{case}.{name}.digest"] = digests
                line += f" | {name}: {cpu:.3f} s cpu, {got[name][0]['steps']:,} steps, digest {digests}"
            if against:
                this, old_name = sides[0][0], sides[1][0]
                speedup = summary[f"{case}.{old_name}.cpu_s"] / summary[f"{case}.{this}.cpu_s"]
                same = summary[f"{case}.{this}.digest"] == summary[f"{case}.{old_name}.digest"]
                summary[f"{case}.speedup"] = speedup
                summary[f"{case}.identical_results"] = same
                line += f" | {speedup:.2f}x, results {'identical' if same else 'DIFFERENT'}"
            print(line, flush=True)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
