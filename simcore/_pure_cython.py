"""The few Cython pure-mode names the compiled modules use (setup.py NATIVE_MODULES), as no-ops, for machines
without Cython: a module does ``try: import cython`` / ``except ImportError: from simcore import _pure_cython as
cython``. Compiled, ``import cython`` is Cython's own directive and this module is never imported; interpreted,
``@cython.locals(...)`` leaves the function as it is, so the .py runs unchanged."""
from __future__ import annotations

from typing import Any, Callable

compiled = False
long = double = bint = Py_ssize_t = int  # type names, only ever passed to `locals`


def locals(**types: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: A001 - Cython's name
    """Cython's ``@cython.locals(name=type, ...)``: C types of a function's locals when compiled; here nothing."""
    def keep(func: Callable[..., Any]) -> Callable[..., Any]:
        return func
    return keep
