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


def test_moe_columns_survive_the_cache(cache: Path) -> None:
    import numpy as np
    fresh = T.build_tables("h100_sxm")
    T.load_tables("h100_sxm")
    T.load_tables.cache_clear()
    again = T.load_tables("h100_sxm")
    assert fresh is not None and again is not None and fresh.moe is not None and again.moe is not None
    assert fresh.moe.cols.keys() == again.moe.cols.keys()
    assert all(np.array_equal(fresh.moe.cols[k], again.moe.cols[k]) for k in fresh.moe.cols)


def test_a_short_simulation_from_the_cache_imports_no_numpy(tmp_path: Path) -> None:
    """Start-up: with the tables cached, loading them, building the latency model and simulating 100 requests
    (decode runs included) imports no numpy (~0.1 s of CPU); the first process, which builds them, does."""
    import subprocess
    import sys
    code = f"""
import sys
from simcore.perf.tables import use_cache_dir
use_cache_dir({str(tmp_path)!r})
from simcore.engine import simulate
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.request import RequestSpec
from simcore.settings import ServerSettings
lat = build_latency_model(load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm"), 1, "bf16")
reqs = [RequestSpec(f"r{{i}}", 0.05 * i, 1000 + 37 * i, 300 + i, 300 + i) for i in range(100)]
res = simulate(ServerSettings(), lat, reqs, kv_capacity_tokens=400_000)
assert len(res.records) == 100 and res.steps > 300, res.steps
print("numpy" in sys.modules)
"""
    root = str(Path(__file__).resolve().parents[3])
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
            for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr[-500:] for r in runs]
