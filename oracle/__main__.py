"""``make oracle``: SGLang 0.5.23's real scheduler and radix caches beside shadowsim's, scenario by scenario.

    python -m oracle [--only NAME ...] [--list] [--json] [--fresh] [--jobs N]

Runs in the project environment (it imports simcore). SGLang's side runs in the oracle's own environment
(built once by :mod:`oracle.env`, ~6 GB, cached outside the checkout), one subprocess per scenario. SGLang's
traces are deterministic functions of the scenario, so they are cached beside the environment, keyed by the
scenario, the driver's source and the lock files; ``--fresh`` reruns them.

Prints one row per scenario: steps (or requests) compared, divergent ones, the first divergence (where, field,
ours vs SGLang), cache-hit tokens of both sides (and tree sizes for the cache replays). Exit status: 0 when every
scenario matches, 1 on any divergence, 2 when the SGLang environment cannot be built or SGLang's side fails
(with the reason; nothing is skipped silently).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oracle import env as oracle_env
from oracle import shadow_side
from oracle.compare import compare, format_row
from oracle.scenarios import Scenario, all_scenarios

ROOT = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "sglang_side.py"


def default_trace() -> Path:
    shared = Path(os.environ.get("SHARED", ROOT.parent / "shared"))
    return shared / "data" / "mooncake" / "conversation_trace.jsonl"


def trace_key(sc: Scenario, trace: Path) -> str:
    h = hashlib.sha256()
    h.update(sc.to_json().encode())
    h.update(DRIVER.read_bytes())
    h.update((DRIVER.parent / "scenarios.py").read_bytes())
    h.update(oracle_env.lock_hash().encode())
    if sc.kind == "cache":
        h.update(trace.read_bytes())
    return h.hexdigest()[:20]


class SglangSideError(RuntimeError):
    pass


class SglangRun:
    """SGLang's side for the scenarios whose traces are not cached: one subprocess that imports SGLang once and
    forks a child per scenario (``oracle.sglang_side``); traces are picked up as they appear."""

    def __init__(self, python: Path, scenarios: list[Scenario], trace: Path, jobs: int, fresh: bool) -> None:
        self.cache_dir = oracle_env.env_dir() / "traces"
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.cached = {sc.name: self.cache_dir / f"{sc.name}-{trace_key(sc, trace)}.json" for sc in scenarios}
        todo = [sc for sc in scenarios if fresh or not self.cached[sc.name].is_file()]
        self.tmp = tempfile.TemporaryDirectory(prefix="oracle-")
        self.out = Path(self.tmp.name)
        self.proc: subprocess.Popen | None = None
        if todo:
            paths = []
            for sc in todo:
                p = self.out / f"{sc.name}.scenario.json"
                p.write_text(sc.to_json())
                paths.append(str(p))
                self.cached[sc.name].unlink(missing_ok=True)
            envv = dict(os.environ, PYTHONPATH=str(ROOT), ORACLE_MOONCAKE_TRACE=str(trace), OMP_NUM_THREADS="1",
                        TOKENIZERS_PARALLELISM="false")
            self.log = open(self.out / "sglang_side.log", "w")
            self.proc = subprocess.Popen([str(python), "-m", "oracle.sglang_side", str(self.out), str(jobs), *paths],
                                         cwd=ROOT, env=envv, stdout=self.log, stderr=subprocess.STDOUT)

    def result(self, sc: Scenario) -> dict:
        cached = self.cached[sc.name]
        fresh_out, err = self.out / f"{sc.name}.json", self.out / f"{sc.name}.error"
        while not cached.is_file():
            if fresh_out.is_file():
                fresh_out.rename(cached)
                break
            if err.is_file():
                raise SglangSideError(f"SGLang side of {sc.name} failed:\n{_tail(err.read_text())}")
            if self.proc is None or self.proc.poll() is not None:
                if fresh_out.is_file() or err.is_file():
                    continue
                log = (self.out / "sglang_side.log").read_text() if self.proc is not None else ""
                raise SglangSideError(f"SGLang side exited before {sc.name} (exit "
                                      f"{None if self.proc is None else self.proc.returncode}):\n{_tail(log)}")
            time.sleep(0.2)
        return json.loads(cached.read_text())

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        self.tmp.cleanup()


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m oracle", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these scenarios (see --list)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--json", action="store_true", help="one JSON object per scenario on stdout instead of rows")
    p.add_argument("--fresh", action="store_true", help="rerun SGLang's side even when its trace is cached")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("ORACLE_JOBS", "2")),
                   help="SGLang subprocesses at once (default 2, env ORACLE_JOBS)")
    p.add_argument("--trace", type=Path, default=None, help="Mooncake conversation trace (default "
                   "$SHARED/data/mooncake/conversation_trace.jsonl, SHARED defaulting to ../shared)")
    a = p.parse_args(argv)
    scenarios = all_scenarios()
    if a.list:
        for sc in scenarios:
            print(f"{sc.name:<26} {sc.description}")
        return 0
    if a.only:
        unknown = sorted(set(a.only) - {s.name for s in scenarios})
        if unknown:
            print(f"oracle: unknown scenario(s) {', '.join(unknown)}; see --list", file=sys.stderr)
            return 2
        scenarios = [s for s in scenarios if s.name in a.only]
    trace = a.trace or default_trace()
    if any(s.kind == "cache" for s in scenarios) and not trace.is_file():
        print(f"oracle: Mooncake trace not found at {trace} (set SHARED or --trace)", file=sys.stderr)
        return 2
    try:
        python = oracle_env.build()
    except (oracle_env.EnvironmentBuildError, OSError) as exc:
        print(f"oracle: cannot build the SGLang environment: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    failures: list[str] = []
    results = []
    sglang = SglangRun(python, scenarios, trace, a.jobs, a.fresh)
    try:
        if not a.json:
            print(f"{'scenario':<26} {'':4} {'compared':>15}  divergent; cache hits", flush=True)
        for sc in scenarios:
            ours = shadow_side.run(sc, trace)
            try:
                theirs = sglang.result(sc)
            except SglangSideError as exc:
                failures.append(str(exc))
                print(f"{sc.name:<26} FAIL {exc}", file=sys.stderr, flush=True)
                continue
            c = compare(sc.name, sc.kind, theirs, ours)
            results.append(c)
            print(json.dumps(c.to_dict()) if a.json else format_row(c), flush=True)
    finally:
        sglang.close()
    bad = [c.name for c in results if not c.ok]
    if not a.json:
        print(f"oracle: {len(results) - len(bad)}/{len(scenarios)} scenarios match SGLang 0.5.23 "
              f"({time.monotonic() - started:.0f} s)" + (f"; divergent: {', '.join(bad)}" if bad else ""))
    if failures:
        return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
