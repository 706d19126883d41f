"""Build of shadowsim's optional compiled modules (Cython 3, pure-Python mode; the rest is in pyproject.toml).

The modules in :data:`NATIVE_MODULES` are compiled from their own ``.py`` sources (the ``.py`` stays the single
source; an optional ``.pxd`` beside it declares C types for its hottest classes). Each extension is optional: a
machine without a C compiler (or, with ``--no-build-isolation``, without Cython: pip's build isolation otherwise
fetches it) installs pure Python, and the package imports the ``.py`` files (``simcore/_native.py``:
``SHADOWSIM_PURE_PYTHON=1`` forces that; a stale build, one compiled file older than its source or a ``.pxd``, is
not used at all). ``make venv`` (``pip install -e .``) builds them in place; after editing one of these sources,
``make native`` (``python setup.py build_ext --inplace``) rebuilds them. docs/architecture.md (Speed) has the
figures.
"""
from __future__ import annotations

import os

from setuptools import setup

# The one list of compiled modules (dotted names; the source is the module's .py). Add a module here only where a
# benchmark shows it pays (python benchmarks/bench_loop.py 3 --against main), with identical results.
NATIVE_MODULES: tuple[str, ...] = (
    "simcore.frozen_new",
    "simcore.radix_cache",
    "simcore.kv_cache",
    "simcore.scheduler",
    "simcore.server_state",
    "simcore.server_results",
    "simcore.decode_run",
    "simcore.server_core",
    "simcore.server",
    "simcore.perf.interp",
    "simcore.perf.costs",
    "simcore.perf.step",
    # the ingest decoder (issue 11): the batch-line parser, the log-line header, the consumer's partition loop
    # (tests/streams/test_native_streams.py; figures in docs/shadow.md, Ingest speed)
    "streams.adapters.sglang_log",
    "streams.adapters.log_prefix",
    "streams.kafka_io",
    # the consumer's record-batch reader (issue 11: kafka-python's per-record loop in C; tests/streams/test_kafka_records.py)
    "streams.kafka_records",
)

# How Cython compiles them: Python semantics everywhere (annotations are not C types, division and indexing as in
# Python), so the compiled module computes exactly what the .py does; only the .pxd declarations add C types.
CYTHON_DIRECTIVES = {
    "language_level": 3,
    "annotation_typing": False,
    "binding": True,
    "embedsignature": False,
    "cdivision": False,
    "boundscheck": True,
    "wraparound": True,
    "initializedcheck": True,
    "always_allow_keywords": True,
    "profile": False,
}
# no fused multiply-add or fast-math: every float operation rounds as CPython's does
C_FLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math"]


def _a_pxd_is_newer_than_a_build() -> bool:
    """Whether any ``.pxd`` is newer than any compiled module of NATIVE_MODULES already built in place.

    ``simcore/_native.py`` counts a compiled module older than the newest ``.pxd`` as stale (the whole build is then
    imported from source), while Cython's own dependency check rebuilds only the modules that cimport the changed
    ``.pxd``; so after a ``.pxd`` change every module is rebuilt (``cythonize(force=True)``), and ``make native``
    leaves a build the finder uses."""
    from importlib.machinery import EXTENSION_SUFFIXES

    here = os.path.dirname(os.path.abspath(__file__))
    pxds = [os.path.join(d, f) for pkg in ("simcore", "streams") for d, _, fs in os.walk(os.path.join(here, pkg))
            for f in fs if f.endswith(".pxd")]
    newest_pxd = max((os.stat(p).st_mtime for p in pxds), default=0.0)
    for name in NATIVE_MODULES:
        stem = os.path.join(here, *name.split("."))
        for suffix in EXTENSION_SUFFIXES:
            if os.path.exists(stem + suffix) and os.stat(stem + suffix).st_mtime < newest_pxd:
                return True
    return False


def _extensions() -> list:
    if os.environ.get("SHADOWSIM_PURE_PYTHON") == "1":
        return []  # pure-Python install asked for
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("setup.py: Cython not installed; shadowsim installs as pure Python")
        return []
    from setuptools import Extension

    exts = [Extension(name, [name.replace(".", "/") + ".py"], extra_compile_args=C_FLAGS) for name in NATIVE_MODULES]
    exts = cythonize(exts, compiler_directives=CYTHON_DIRECTIVES, quiet=True, force=_a_pxd_is_newer_than_a_build())
    for ext in exts:
        ext.optional = True  # no C compiler: a warning, and that module stays pure Python (cythonize drops the flag)
    return exts


if __name__ == "__main__":
    setup(ext_modules=_extensions())
