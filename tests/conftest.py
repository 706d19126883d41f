"""Shared test fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI (`CI` set, as CI services set it) draws the same Hypothesis examples on every run, so a clean checkout's result does
# not depend on luck; local runs keep exploring new examples (and replay failures from .hypothesis/).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared next to the repository: real data and docs (read-only)."""
    if not SHARED.is_dir():
        pytest.fail(f"../shared not found at {SHARED}: tests need the project's shared data")
    return SHARED


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO
