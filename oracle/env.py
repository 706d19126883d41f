"""Build (once) and locate the oracle's Python environment: SGLang 0.5.23 and what its scheduler imports.

The environment is ~6 GB (the default PyPI torch wheel brings CUDA libraries that stay unused on CPU), so it lives
outside the checkout, keyed by a hash of the lock files: ``~/.cache/shadowsim/oracle-<hash>``. A build goes into a
temporary folder and is renamed into place only when it imports SGLang's scheduler, so a half-built environment is
never reused. Stdlib only: this runs under the system Python before any environment exists.

    python3 -m oracle.env            # build if missing, print the environment's python
    python3 -m oracle.env --path     # print where it would be, build nothing
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK_FILES = (HERE / "sglang.lock", HERE / "requirements.lock")
# What `make oracle` needs to import before it trusts an environment.
SMOKE_IMPORT = (
    "from sglang.test.test_utils import maybe_stub_sgl_kernel; maybe_stub_sgl_kernel(); "
    "import sglang.srt.managers.scheduler, sglang.srt.mem_cache.radix_cache, torch; print(torch.__version__)"
)


class EnvironmentBuildError(RuntimeError):
    """The oracle environment could not be built; the message says which step failed and why."""


def lock_hash() -> str:
    digest = hashlib.sha256()
    digest.update(f"python{sys.version_info.major}.{sys.version_info.minor}\n".encode())
    for path in LOCK_FILES:
        digest.update(path.name.encode() + b"\n" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("SHADOWSIM_ORACLE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shadowsim"
    )
    return Path(base)


def env_dir() -> Path:
    return cache_root() / f"oracle-{lock_hash()}"


def env_python(root: Path | None = None) -> Path:
    return (root or env_dir()) / "bin" / "python"


def is_built(root: Path | None = None) -> bool:
    return ((root or env_dir()) / ".complete").is_file()


def _run(step: str, cmd: list[str], log) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise EnvironmentBuildError(f"{step} failed (exit {proc.returncode}); see {log.name}")


def build(quiet: bool = False) -> Path:
    """Return the environment's python, building the environment first if it is missing."""
    target = env_dir()
    if is_built(target):
        return env_python(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + f".building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    log_path = target.with_name(target.name + ".build.log")
    started = time.monotonic()
    if not quiet:
        print(f"oracle: building its environment in {target} (~6 GB, several minutes; log {log_path})", flush=True)
    with open(log_path, "w") as log:
        _run("venv creation", [sys.executable, "-m", "venv", str(staging)], log)
        pip = [str(env_python(staging)), "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
        _run("dependency install", pip + ["--no-deps", "-r", str(LOCK_FILES[1])], log)
        _run("sglang install", pip + ["--no-deps", "-r", str(LOCK_FILES[0])], log)
        _run("smoke import of SGLang's scheduler", [str(env_python(staging)), "-c", SMOKE_IMPORT], log)
    # venv scripts embed their own path; the oracle only ever runs `bin/python -m ...`, which is relocatable.
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    elapsed = time.monotonic() - started
    (target / ".complete").write_text(f"built in {elapsed:.0f} s\n")
    if not quiet:
        print(f"oracle: environment built in {elapsed:.0f} s", flush=True)
    return env_python(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m oracle.env", description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", action="store_true", help="print the environment folder and whether it is built")
    args = parser.parse_args(argv)
    if args.path:
        print(env_dir(), "built" if is_built() else "missing")
        return 0
    try:
        print(build())
    except (EnvironmentBuildError, OSError) as exc:
        print(f"oracle: cannot build the SGLang environment: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
