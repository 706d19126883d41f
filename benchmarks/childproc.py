"""Measuring a benchmark child process by itself: its CPU time and its own peak resident memory.

``getrusage(...).ru_maxrss`` is no good for a child: Linux carries the high-water mark across ``fork`` and keeps it
over ``execve``, so a small child of a big parent reports the parent's peak. ``VmHWM`` in ``/proc/self/status``
belongs to the address space the child got at ``exec``: that is the figure :func:`own_peak_rss_mib` reads (from
inside the child). :func:`run_child` runs a command and returns its JSON line plus the CPU seconds the kernel
accounted to that process alone (the ``RUSAGE_CHILDREN`` difference around it: children run one at a time),
interpreter start-up and imports included.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Sequence


def own_peak_rss_mib() -> float:
    """Peak resident memory of this process since its ``exec`` (VmHWM), MiB; ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(cmd: Sequence[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
              timeout_s: float = 1800.0) -> dict[str, Any]:
    """Run ``cmd``; return the JSON object of its last stdout line. Raises RuntimeError with its stderr tail when
    it fails."""
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
