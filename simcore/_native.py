"""Which file a shadowsim module is imported from: its compiled extension (``setup.py``'s ``NATIVE_MODULES``,
built by ``make venv`` / ``make native``) or its ``.py`` source.

A meta-path finder, installed by ``simcore/__init__.py`` (and ``streams/__init__.py``), in front of the standard
path finder for the ``simcore`` and ``streams`` packages. It asks the standard finder for the module's spec and
changes only one thing: where that spec is a compiled extension (``radix_cache.cpython-311-x86_64-linux-gnu.so``),
the ``.py`` beside it is imported instead when

- ``SHADOWSIM_PURE_PYTHON=1`` is set (read once, at the first import of the package): pure Python, by choice;
- the compiled file is older than its source (the source was edited or checked out after the build): a stale
  build is never used silently; it warns once (``RuntimeWarning``) naming the modules and the fix.

Nothing else changes: a module with no extension, or an extension with no ``.py`` beside it, imports as usual.
:func:`compiled_modules` names the modules imported compiled so far (the tests check the compiled path is the one
used where it was built).
"""
from __future__ import annotations

import os
import sys
import warnings
from importlib.machinery import ExtensionFileLoader, PathFinder, SourceFileLoader
from importlib.util import spec_from_file_location

PURE_PYTHON_ENV = "SHADOWSIM_PURE_PYTHON"
PURE_PYTHON = os.environ.get(PURE_PYTHON_ENV, "") == "1"
PACKAGES = ("simcore.", "streams.")
# a compiled file written less than this before its source still counts as built from it (an install or checkout
# writes the two files in either order within a moment)
STALE_SLACK_S = 2.0

_compiled: list[str] = []
_stale: list[str] = []


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
        try:
            source_mtime = os.stat(source).st_mtime
        except OSError:
            _compiled.append(fullname)
            return spec  # shipped compiled only
        if PURE_PYTHON:
            return spec_from_file_location(fullname, source, loader=SourceFileLoader(fullname, source))
        if source_mtime > os.stat(compiled).st_mtime + STALE_SLACK_S:
            _stale.append(fullname)
            warnings.warn(f"shadowsim: {fullname}'s compiled module {compiled} is older than {source}; importing "
                          f"the source instead (rebuild: `make native`, i.e. python setup.py build_ext --inplace)",
                          RuntimeWarning, stacklevel=2)
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
