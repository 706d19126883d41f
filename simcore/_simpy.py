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

SimPy's ``__init__`` also imports its resources (``Container``, ``Resource``, ``Store``: generic classes, whose
``typing`` subscripts cost ≈ 20 M instructions, docs/architecture.md, Start-up, fifth pass) and ``rt``, which the
simulator does not use on its path (only ``simcore.benchmark_clients`` takes a ``Resource``). So the package
module is made from its own spec without running ``__init__`` at first (``importlib.util.module_from_spec``: the
same ``__name__``, ``__file__``, ``__path__``, ``__spec__``), ``simpy.core``, ``simpy.events`` and
``simpy.exceptions`` are imported into it as ``__init__`` would import them, and the names ``__init__`` takes
from them are set on it (``Environment``, ``Event``, ``Process``, ``Timeout``, ``AllOf``, ``AnyOf``,
``Interrupt``, ``SimPyException``: the same objects). The first access to any other name of the package (a
module ``__getattr__``: ``simpy.Resource``, ``from simpy import Store``, ``__all__``, ``__doc__``'s table …) runs
SimPy's ``__init__`` unchanged in that same module (its loader's ``exec_module``, under a lock), after which the
module is what ``import simpy`` makes; ``import simpy.resources.store`` and the like work before that as after.
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


# what SimPy's __init__ imports from its core modules: set on the package before its __init__ has run
_CORE_NAMES = (("simpy.core", ("Environment",)),
               ("simpy.events", ("AllOf", "AnyOf", "Event", "Process", "Timeout")),
               ("simpy.exceptions", ("Interrupt", "SimPyException")))


def _stand_in_placed() -> _MetadataStandIn | None:
    """The ``importlib.metadata`` stand-in put in place (module docstring); None where that would save nothing
    (the real one already imported) or is not safe (other threads run)."""
    if _METADATA in sys.modules or _other_threads_running():
        return None
    import importlib

    stand_in = _MetadataStandIn(_METADATA)
    sys.modules[_METADATA] = stand_in
    importlib.metadata = stand_in  # type: ignore[attr-defined]  # ``importlib.metadata.version`` reads it
    return stand_in


def _stand_in_removed(stand_in: _MetadataStandIn | None, mod: ModuleType) -> None:
    """Take the stand-in away again; SimPy's ``__version__`` is then answered by the real module, on first use."""
    if stand_in is None:
        return
    import importlib

    if sys.modules.get(_METADATA) is stand_in:
        del sys.modules[_METADATA]
    if importlib.__dict__.get("metadata") is stand_in:
        del importlib.metadata  # type: ignore[attr-defined]
    if "__version__" not in mod.__dict__ and "__getattr__" not in mod.__dict__:
        mod.__getattr__ = _simpy_version  # type: ignore[attr-defined]


def _run_init(mod: ModuleType) -> None:
    """SimPy's own ``__init__``, run in the partly made package ``mod``, with the stand-in where it saves the
    import."""
    spec = mod.__spec__
    assert spec is not None and spec.loader is not None
    stand_in = _stand_in_placed()
    try:
        spec.loader.exec_module(mod)
    finally:
        _stand_in_removed(stand_in, mod)


class _Completion:
    """The partly made package's ``__getattr__``: SimPy's ``__init__`` on the first other name, then the name."""

    def __init__(self, mod: ModuleType) -> None:
        import _thread

        self.mod, self.lock, self.done = mod, _thread.allocate_lock(), False

    def __call__(self, name: str) -> Any:
        mod = self.mod
        with self.lock:
            if not self.done:
                self.done = True
                if mod.__dict__.get("__getattr__") is self:
                    del mod.__getattr__  # type: ignore[attr-defined]
                _run_init(mod)
        if name in mod.__dict__:
            return mod.__dict__[name]
        if name == "__version__" and mod.__dict__.get("__getattr__") is _simpy_version:
            return _simpy_version(name)
        raise AttributeError(f"module 'simpy' has no attribute {name!r}")


def _partial_package() -> ModuleType | None:
    """``simpy`` with its core modules only, its ``__init__`` run on first use of another name (module docstring);
    None where SimPy's package cannot be found as an ordinary one (then a plain import decides)."""
    import importlib.util

    spec = importlib.util.find_spec("simpy")
    if spec is None or spec.loader is None or not spec.submodule_search_locations or \
            not hasattr(spec.loader, "exec_module"):
        return None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["simpy"] = mod
    try:
        for sub, names in _CORE_NAMES:
            __import__(sub)
            core = sys.modules[sub]
            for name in names:
                setattr(mod, name, getattr(core, name))
    except BaseException:
        for sub in ("simpy", "simpy.core", "simpy.events", "simpy.exceptions"):
            sys.modules.pop(sub, None)
        raise
    mod.__getattr__ = _Completion(mod)  # type: ignore[attr-defined]
    return mod


def import_simpy() -> ModuleType:
    """The ``simpy`` module, imported as described above."""
    mod = sys.modules.get("simpy")
    if mod is not None:
        return mod
    if _METADATA in sys.modules or _other_threads_running():
        import simpy
        return simpy
    partial = _partial_package()
    if partial is not None:
        return partial
    stand_in = _stand_in_placed()  # not an ordinary package on sys.path: SimPy's __init__ now, with the stand-in
    try:
        import simpy
    finally:
        if stand_in is not None:
            _stand_in_removed(stand_in, sys.modules.get("simpy") or ModuleType("simpy"))
    return simpy


if TYPE_CHECKING:
    import simpy
else:
    simpy = import_simpy()
