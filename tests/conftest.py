"""Shared test fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

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
