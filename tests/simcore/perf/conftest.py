"""Fixtures of the performance-model tests."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest


@pytest.fixture
def validation_builder(repo_dir: Path) -> Callable[[str], ModuleType]:
    """Load a builder script of validation/ (plain scripts, not a package) by file name, e.g. "build_gpustack"."""
    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, repo_dir / "validation" / f"{name}.py")
        assert spec is not None and spec.loader is not None, name
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return load
