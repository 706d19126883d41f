"""What setup.py compiles and what a build left next to the sources, for the tests that compare compiled and pure
runs (tests/simcore/test_native.py, tests/streams/test_native_streams.py)."""
from __future__ import annotations

import ast
import importlib.machinery
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def native_modules() -> tuple[str, ...]:
    """setup.py's NATIVE_MODULES, read without running setup.py."""
    for node in ast.parse((REPO / "setup.py").read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "NATIVE_MODULES" for t in targets):
                return tuple(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise AssertionError("setup.py has no NATIVE_MODULES")


def built_file(module: str) -> Path | None:
    """The compiled extension of ``module`` next to its .py, if one was built."""
    base = REPO / Path(*module.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if base.with_name(base.name + suffix).is_file():
            return base.with_name(base.name + suffix)
    return None
