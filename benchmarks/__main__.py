"""``python -m benchmarks`` (``make bench``): run every ``benchmarks/bench_*.py`` module's ``main()`` in turn.

Each benchmark prints its own figures and one JSON line. A failing benchmark is reported and the others still
run; the exit status is 1 if any failed. ``python -m benchmarks sim cache`` runs only the named ones. Options
(``--json``, ...) go to the benchmarks that take them (``ACCEPTS_ARGS``); with ``--json`` the section headers are
left out, so ``python -m benchmarks ingest --json`` prints one JSON line.
"""
from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"benchmarks.{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    root = str(HERE.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    first_opt = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    wanted, options = set(argv[:first_opt]), argv[first_opt:]
    quiet = "--json" in options
    failed: list[str] = []
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        if not quiet:
            print(f"== {path.name} ==", flush=True)
        t0 = time.perf_counter()
        try:
            mod = _load(path)
            if getattr(mod, "ACCEPTS_ARGS", False):
                mod.main(options)
            elif options and not quiet:
                print(f"   ({name} takes no options; ignored: {' '.join(options)})")
                mod.main()
            else:
                mod.main()
        except Exception:  # noqa: BLE001 - report and keep going
            traceback.print_exc()
            failed.append(name)
        if not quiet:
            print(f"   ({time.perf_counter() - t0:.1f} s)\n", flush=True)
    if failed:
        print(f"failed benchmarks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
