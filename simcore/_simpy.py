"""SimPy, imported without ``importlib.metadata`` (start-up): ``from simcore._simpy import simpy``.

SimPy 4.1's ``__init__`` ends with ``__version__ = importlib.metadata.version("simpy")``. Importing
``importlib.metadata`` loads email, zipfile, csv, bz2, lzma, socket, datetime and ~40 more modules, and the call
scans ``sys.path`` and parses SimPy's ``METADATA``: ≈ 100 M instructions, about two and a half times SimPy's own
modules and as much as a third of the mocker's whole 100-request process (docs/architecture.md, Start-up, third
pass). Nothing in shadowsim reads ``simpy.__version__``.

So the first import of SimPy here runs SimPy's own ``__init__`` unchanged, with a stand-in in
``sys.modules["importlib.metadata"]`` for the length of that import only. The stand-in's ``version("simpy")``
raises its ``PackageNotFoundError`` (which ``__init__`` catches: "package is not installed"); any other name or
attribute goes to the real module, so nothing else can get a different answer from it. Afterwards the stand-in
is gone and ``simpy.__version__`` is answered on first access, from the real ``importlib.metadata`` (a module
``__getattr__``, PEP 562): the same string as before, only later. Where ``importlib.metadata`` is already
imported (nothing to save), where SimPy already is, or while other threads run (one of them could import
``importlib.metadata`` in that moment), this is a plain ``import simpy``.
"""
from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

_METADATA = "importlib.metadata"


class _PackageNotFoundError(ModuleNotFoundError):
    """What the stand-in raises for ``version("simpy")``: SimPy's ``except ...PackageNotFoundError`` catches it."""


class _MetadataStandIn(ModuleType):
    """``importlib.metadata`` during SimPy's import: ``version("simpy")`` is not looked up, the rest is real."""

    PackageNotFoundError = _PackageNotFoundError

    def version(self, name: str) -> str:
        if name == "simpy":
            raise _PackageNotFoundError(name)
        return str(_real_metadata().version(name))

    def __getattr__(self, name: str) -> Any:
        return getattr(_real_metadata(), name)


def _real_metadata() -> Any:
    """The real ``importlib.metadata``; asked for while the stand-in is in place, it replaces it for good."""
    if isinstance(sys.modules.get(_METADATA), _MetadataStandIn):
        del sys.modules[_METADATA]
    import importlib.metadata  # sets the package's attribute over the stand-in's

    return sys.modules[_METADATA]


def _simpy_version(name: str) -> Any:
    """SimPy's module ``__getattr__``: ``__version__`` from the real ``importlib.metadata``, once."""
    if name != "__version__":
        raise AttributeError(f"module 'simpy' has no attribute {name!r}")
    mod = sys.modules["simpy"]
    try:
        value = _real_metadata().version("simpy")
    except _real_metadata().PackageNotFoundError:  # not installed (SimPy then has no __version__)
        raise AttributeError("module 'simpy' has no attribute '__version__'") from None
    mod.__version__ = value
    return value


def _other_threads_running() -> bool:
    # every thread of the interpreter, also those started with `_thread` (threading.active_count sees only its own)
    return len(sys._current_frames()) > 1


def import_simpy() -> ModuleType:
    """The ``simpy`` module, imported as described above."""
    mod = sys.modules.get("simpy")
    if mod is not None:
        return mod
    if _METADATA in sys.modules or _other_threads_running():
        import simpy
        return simpy
    import importlib

    stand_in = _MetadataStandIn(_METADATA)
    sys.modules[_METADATA] = stand_in
    importlib.metadata = stand_in  # type: ignore[attr-defined]  # ``importlib.metadata.version`` reads it
    try:
        import simpy
    finally:
        if sys.modules.get(_METADATA) is stand_in:
            del sys.modules[_METADATA]
        if importlib.__dict__.get("metadata") is stand_in:
            del importlib.metadata  # type: ignore[attr-defined]
    if "__version__" not in simpy.__dict__ and "__getattr__" not in simpy.__dict__:
        simpy.__getattr__ = _simpy_version  # type: ignore[attr-defined]
    return simpy


if TYPE_CHECKING:
    import simpy
else:
    simpy = import_simpy()
