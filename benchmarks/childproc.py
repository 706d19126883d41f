"""Measuring a benchmark child process by itself: its CPU time and its own peak resident memory.

``getrusage(...).ru_maxrss`` is no good for a child: Linux carries the high-water mark across ``fork`` (and
``vfork``, which ``subprocess`` uses) into ``execve``, so a small child of a big parent reports the parent's peak
(``tests/benchmarks/test_childproc.py`` shows it). ``VmHWM`` in ``/proc/<pid>/status`` belongs to the address
space the child got at ``exec``: that is the figure :func:`own_peak_rss_mib` reads (from inside the child) and
:func:`peak_rss_of` (from outside, while it runs). An in-process part of a benchmark starts its own count with
:func:`reset_peak_rss` (``/proc/self/clear_refs``). :func:`run_child` runs a command and returns its JSON line plus
the CPU seconds the kernel accounted to that process alone (the ``RUSAGE_CHILDREN`` difference around it: children
run one at a time), interpreter start-up and imports included. :func:`compile_sources` writes the checkout's
bytecode first, as an install does, so that children measure shadowsim rather than compiling it
(``PYTHONDONTWRITEBYTECODE`` would otherwise make every child compile every module again).

The measured children import this module: it imports only ``json``, ``os`` and ``typing`` at module level.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence


def peak_rss_of(pid: int | str) -> float | None:
    """Peak resident memory (VmHWM, MiB) of process ``pid`` ("self" for this one) since its ``exec`` or the last
    :func:`reset_peak_rss`; None when /proc cannot tell (no such process, not Linux)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def own_peak_rss_mib() -> float:
    """Peak resident memory of this process since its ``exec`` (VmHWM), MiB; ru_maxrss where /proc is missing."""
    peak = peak_rss_of("self")
    if peak is not None:
        return peak
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Start this process's peak-memory count again from its resident size now (Linux ≥ 4.0: ``5`` into
    ``/proc/self/clear_refs``), so :func:`own_peak_rss_mib` measures what follows; False where that fails."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def compile_sources(root: str | os.PathLike[str], packages: Sequence[str] = ("simcore", "streams", "shadowsim",
                                                                             "exporters", "benchmarks")) -> bool:
    """Write the bytecode of ``root``'s packages (``__pycache__``), as ``pip install`` does for an installed
    package; False when some file could not be compiled or written (a read-only checkout: the children then pay
    for compiling)."""
    import compileall
    from pathlib import Path

    ok = True
    for pkg in packages:
        d = Path(root) / pkg
        if d.is_dir():
            ok = bool(compileall.compile_dir(str(d), quiet=1, workers=1)) and ok
    return ok


def run_child(cmd: Sequence[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
              timeout_s: float = 1800.0) -> dict[str, Any]:
    """Run ``cmd``; return the JSON object of its last stdout line. Raises RuntimeError with its stderr tail when
    it fails."""
    import subprocess

    proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {err.strip()[-2000:]}")
    lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{cmd[0]} printed no JSON line: {out.strip()[-500:]} {err.strip()[-500:]}")
    return json.loads(lines[-1])


def run_child_timed(cmd: Sequence[str], **kw: Any) -> dict[str, Any]:
    """:func:`run_child`, plus ``process_cpu_s``: the CPU seconds of that child alone (RUSAGE_CHILDREN delta;
    children are run one at a time)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = run_child(cmd, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return res


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without the variables of a virtual environment, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env
