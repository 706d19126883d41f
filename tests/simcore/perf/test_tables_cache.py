"""The binary cache of built tables (simcore.perf.tables.use_cache_dir): same tables, rebuilt when damaged."""
from __future__ import annotations

from pathlib import Path

import pytest

from simcore.perf import tables as T


@pytest.fixture
def cache(tmp_path: Path):  # type: ignore[no-untyped-def]
    T.use_cache_dir(tmp_path)
    try:
        yield tmp_path
    finally:
        T.use_cache_dir(None)


def _probe(t: T.GpuTables) -> list[float]:
    """A few lookups through every table kind the Llama/Qwen models use."""
    g = t.gemm["bf16"].curve(6144, 4096)
    ctx = t.context_attention["bf16"].curve_over_length(4, 32, 8)
    gen = t.generation_attention["bf16"].curve_over_length(64, 32, 8)
    return [g(m) for m in (1, 37, 900, 8192)] + [ctx(x) for x in (100, 3000)] + [gen(x) for x in (500, 70000)]


def test_cached_tables_are_the_built_ones_and_damage_is_rebuilt(cache: Path) -> None:
    fresh = T.build_tables("h100_sxm")
    assert fresh is not None
    first = T.load_tables("h100_sxm")  # builds and writes the file
    files = list(cache.glob("tables-h100_sxm-*.pickle"))
    assert len(files) == 1 and files[0].stat().st_size > 100_000
    assert fresh.digest in files[0].name
    T.load_tables.cache_clear()
    again = T.load_tables("h100_sxm")  # read back from the file
    assert again is not first and again.digest == fresh.digest
    assert _probe(again) == _probe(fresh)
    files[0].write_bytes(b"not a pickle")
    T.load_tables.cache_clear()
    rebuilt = T.load_tables("h100_sxm")
    assert rebuilt is not None and _probe(rebuilt) == _probe(fresh)
    assert T._read_cached(files[0], fresh.digest) is not None  # replaced by a good file


def test_no_cache_dir_builds_in_process_and_writes_nothing(tmp_path: Path) -> None:
    T.use_cache_dir(None)
    assert T.load_tables("a100_sxm") is not None
    assert not list(tmp_path.iterdir())
    assert T.load_tables("no_such_gpu") is None
