"""Which file a shadowsim module is imported from: its compiled extension (``setup.py``'s ``NATIVE_MODULES``,
built by ``make venv`` / ``make native``) or its ``.py`` source.

A meta-path finder, installed by ``simcore/__init__.py`` (and ``streams/__init__.py``), in front of the standard
path finder for the ``simcore`` and ``streams`` packages. It asks the standard finder for the module's spec and
changes only one thing: where that spec is a compiled extension (``radix_cache.cpython-311-x86_64-linux-gnu.so``),
the ``.py`` beside it is imported instead when

- ``SHADOWSIM_PURE_PYTHON=1`` is set (read once, at the first import of the package): pure Python, by choice;
- the build is stale: some compiled file of the same build (every extension under ``simcore/`` and ``streams/``)
  is older than its own ``.py`` or than any ``.pxd`` there (a source or its C declarations edited, checked out or
  merged after the build). The build is then used all or not at all: compiled modules ``cimport`` each other's
  extension types, so one module imported from its source next to compiled ones that expect its C layout would
  fail at import. A stale build is never used; it warns once (``RuntimeWarning``) naming the stale modules and the
  fix.

Nothing else changes: a module with no extension, or an extension with no ``.py`` beside it, imports as usual.
:func:`compiled_modules` names the modules imported compiled so far (the tests check the compiled path is the one
used where it was built).
"""
from __future__ import annotations

import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, PathFinder, SourceFileLoader
from importlib.util import spec_from_file_location

PURE_PYTHON_ENV = "SHADOWSIM_PURE_PYTHON"
PURE_PYTHON = os.environ.get(PURE_PYTHON_ENV, "") == "1"
PACKAGES = ("simcore.", "streams.")
# a compiled file written less than this before its source still counts as built from it (an install or checkout
# writes the two files in either order within a moment)
STALE_SLACK_S = 2.0

_compiled: list[str] = []
_stale: list[str] = []
_stale_by_tree: dict[tuple[str, ...], list[str]] = {}
_warned: set[tuple[str, ...]] = set()


def _build_dirs(fullname: str, compiled: str) -> tuple[str, ...]:
    """The package directories one build wrote extensions into: the top package of ``fullname`` and its sibling
    packages the finder covers (``simcore`` beside ``streams``)."""
    top = os.path.dirname(compiled)
    for _ in range(fullname.count(".") - 1):
        top = os.path.dirname(top)
    parent = os.path.dirname(top)
    siblings = (os.path.join(parent, p.rstrip(".")) for p in PACKAGES)
    return tuple(sorted({top, *(d for d in siblings if os.path.isdir(d))}))


def _stale_extensions(dirs: tuple[str, ...]) -> list[str]:
    """The compiled files under ``dirs`` older than their ``.py`` or than the newest ``.pxd`` (computed once)."""
    if dirs in _stale_by_tree:
        return _stale_by_tree[dirs]
    extensions: list[tuple[str, float, float]] = []  # (compiled file, its mtime, its source's mtime)
    newest_pxd = 0.0
    suffixes = tuple(EXTENSION_SUFFIXES)
    todo = list(dirs)
    # os.walk's files (every entry but the folders; symlinked folders neither walked into nor counted as files),
    # by os.scandir, looking only at names that can matter (≈ 3 M instructions less at start-up: ~230 entries)
    while todo:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # os.walk skips what it cannot list
            continue
        for entry in entries:
            name = entry.name
            if entry.is_dir():
                if name != "__pycache__" and not entry.is_symlink():
                    todo.append(entry.path)
            elif name.endswith(".pxd"):
                newest_pxd = max(newest_pxd, os.stat(entry.path).st_mtime)
            elif name.endswith(suffixes):
                source = os.path.join(folder, name.split(".", 1)[0] + ".py")
                if os.path.exists(source):
                    extensions.append((entry.path, os.stat(entry.path).st_mtime, os.stat(source).st_mtime))
    stale = sorted(path for path, built, source in extensions if max(source, newest_pxd) > built + STALE_SLACK_S)
    _stale_by_tree[dirs] = stale
    return stale


class NativeOrSourceFinder:
    """The standard path finder's spec, with a compiled module swapped for its source where it must not be used."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):  # noqa: ANN001 - importlib's protocol
        if not fullname.startswith(PACKAGES):
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not ExtensionFileLoader:
            return spec
        compiled = spec.origin
        source = os.path.join(os.path.dirname(compiled), os.path.basename(compiled).split(".", 1)[0] + ".py")
        if not os.path.exists(source):
            _compiled.append(fullname)
            return spec  # shipped compiled only
        if PURE_PYTHON:
            return spec_from_file_location(fullname, source, loader=SourceFileLoader(fullname, source))
        dirs = _build_dirs(fullname, compiled)
        stale = _stale_extensions(dirs)
        if stale:
            _stale.append(fullname)
            if dirs not in _warned:
                _warned.add(dirs)
                warnings.warn(f"shadowsim: the compiled build is stale ({', '.join(stale)} older than its .py source "
                              f"or a .pxd); importing every compiled module from its .py source instead (rebuild: "
                              f"`make native`, i.e. python setup.py build_ext --inplace)", RuntimeWarning, stacklevel=2)
            return spec_from_file_location(fullname, source, loader=SourceFileLoader(fullname, source))
        _compiled.append(fullname)
        return spec


def compiled_modules() -> tuple[str, ...]:
    """The modules imported from their compiled extension so far, in import order."""
    return tuple(_compiled)


def stale_modules() -> tuple[str, ...]:
    """The modules whose compiled extension was older than the source, so imported from the source."""
    return tuple(_stale)


def install() -> None:
    """Put the finder in front of the standard one (once per interpreter)."""
    if not any(f is NativeOrSourceFinder for f in sys.meta_path):
        sys.meta_path.insert(0, NativeOrSourceFinder)
