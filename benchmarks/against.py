"""This checkout against another revision, for the benchmarks that measure both side by side (``bench_loop``,
``bench_dp``): their options (``[ROUNDS] [--against REV] [--reps N]``), the other revision's files (``git archive``
into a temporary directory), the alternating rounds (the order flips every round, so a drift in the machine's load
falls on both) and the comparison of two sides' figures and result digests.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable


def options(argv: list[str], rounds: int, reps: int) -> tuple[int, str | None, int]:
    """(rounds, the revision to compare against or None, reps) from ``[ROUNDS] [--against REV] [--reps N]``, with
    the benchmark's defaults."""
    args = list(argv)
    against = None
    if "--against" in args:
        i = args.index("--against")
        against = args[i + 1]
        del args[i:i + 2]
    if "--reps" in args:
        i = args.index("--reps")
        reps = int(args[i + 1])
        del args[i:i + 2]
    args = [a for a in args if not a.startswith("-")]
    return (int(args[0]) if args else rounds), against, reps


def sides(repo: Path, against: str | None, tmp: str) -> list[tuple[str, Path]]:
    """``[("this", repo)]``, plus ``(short rev, its files extracted under tmp)`` when ``against`` names one."""
    out = [("this", repo)]
    if against:
        rev = subprocess.run(["git", "rev-parse", "--short", against], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.strip()
        old = Path(tmp) / "old"
        old.mkdir()
        tar = subprocess.run(["git", "archive", rev], cwd=repo, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
        out.append((rev, old))
    return out


def run_script(checkout: Path, script: str, *args: str) -> dict[str, Any]:
    """The JSON object a child prints last, running ``python -c script args...`` in ``checkout`` (its code first on
    the child's ``sys.path`` when the script puts "." there); a failing child raises with the end of its stderr."""
    out = subprocess.run([sys.executable, "-c", script, *args], cwd=checkout, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child in {checkout} failed: {out.stderr.strip()[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternate(checkouts: list[tuple[str, Path]], rounds: int,
              measure: Callable[[Path], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``measure(checkout)`` ``rounds`` times per side, the order flipping every round; the results by side."""
    got: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in checkouts}
    for k in range(rounds):
        for name, path in (checkouts if k % 2 == 0 else checkouts[::-1]):
            got[name].append(measure(path))
    return got


def compare(summary: dict[str, Any], case: str, checkouts: list[tuple[str, Path]]) -> str:
    """Speed-up (the other side's ``cpu_s`` over this one's) and whether the digests agree, into ``summary`` under
    ``case``; the text for the case's line ("" without a second side)."""
    if len(checkouts) < 2:
        return ""
    this, old = checkouts[0][0], checkouts[1][0]
    speedup = summary[f"{case}.{old}.cpu_s"] / summary[f"{case}.{this}.cpu_s"]
    same = summary[f"{case}.{this}.digest"] == summary[f"{case}.{old}.digest"]
    summary[f"{case}.speedup"] = speedup
    summary[f"{case}.identical_results"] = same
    return f" | {speedup:.2f}x, results {'identical' if same else 'DIFFERENT'}"
