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
    (decode runs included) imports no numpy (~0.1 s of CPU); the first process, which builds them, does. Neither
    imports pydantic (~0.1 s: the settings and specs are simcore.frozen_model records), any I/O stack, the
    speculative-decoding and DP-attention modules a plain server does not use, nor ``importlib.metadata``
    (SimPy's ``__version__``: simcore._simpy) or ``importlib.resources`` (the data files are found beside the
    modules) with the email module they pull in, nor SimPy's resources and ``rt`` (its ``__init__`` is not run:
    simcore._simpy); only the process that builds the tables loads zipfile (the
    ``.npz`` files), hashlib (the table files' digests, memoized for the next process), pickle (writing; reading
    needs only the C unpickler) and tempfile (the cache's atomic write)."""
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
heavy = [m for m in ("pydantic", "pydantic_core", "kafka", "prometheus_client", "scipy", "yaml", "pandas",
                    "simcore.speculative", "simcore.dp_attention", "importlib.metadata", "importlib.resources",
                    "email", "simpy.resources", "simpy.rt") if m in sys.modules]
assert not heavy, heavy
building = [m for m in ("zipfile", "tempfile", "hashlib", "pickle") if m in sys.modules]  # np.load, digests, write
print("numpy" in sys.modules, building == ["zipfile", "tempfile", "hashlib", "pickle"] if building else False)
"""
    root = str(Path(__file__).resolve().parents[3])
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
            for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True True", "False False"], [r.stderr[-500:] for r in runs]


def _file(cache: Path) -> Path:
    files = list(cache.glob("tables-h100_sxm-*.pickle"))
    assert len(files) == 1, files
    return files[0]


def test_a_process_unpickles_only_the_tables_it_uses(cache: Path) -> None:
    """Lazily: the file's header is read at load, each table on first use (a bf16 Llama run uses 3 of 13)."""
    fresh = T.build_tables("h100_sxm")
    assert fresh is not None
    T.load_tables("h100_sxm")  # miss: builds and writes
    T.load_tables.cache_clear()
    hit = T.load_tables("h100_sxm")
    assert hit is not None and isinstance(hit.gemm, T._LazyTables)
    assert hit.gemm._loaded == {} and hit.context_attention._loaded == {}
    assert sorted(hit.gemm) == sorted(fresh.gemm) and "bf16" in hit.gemm and len(hit.gemm) == len(fresh.gemm)
    assert _probe(hit) == _probe(fresh)
    assert sorted(hit.gemm._loaded) == ["bf16"] and sorted(hit.context_mla._loaded) == []
    assert hit.gemm.get("int2") is None
    with pytest.raises(KeyError):
        hit.gemm["int2"]
    # a pickle of the loaded tables (sweep workers) holds plain dicts of every table
    import pickle
    again = pickle.loads(pickle.dumps(hit))
    assert type(again.gemm) is dict and sorted(again.gemm) == sorted(fresh.gemm) and _probe(again) == _probe(fresh)
    assert type(again) is T.GpuTables and again.moe is not None and again.moe.cols.keys() == fresh.moe.cols.keys()


def test_the_moe_table_is_unpickled_on_first_use_only(cache: Path) -> None:
    """The MoE table (about 1 MB of the H100's 2.2 MB cache file) is read, CRC-checked and unpickled when ``moe``
    is first asked for, not at load: a dense model's process never reads it. Asked for, it is the built table;
    assigned, the assigned one."""
    import numpy as np

    fresh = T.build_tables("h100_sxm")
    assert fresh is not None and fresh.moe is not None
    T.load_tables("h100_sxm")
    T.load_tables.cache_clear()
    hit = T.load_tables("h100_sxm")
    assert hit is not None and hit._lazy_moe is not None and hit._lazy_moe._loaded == {}
    _probe(hit)  # the Llama lookups price no MoE
    assert hit._lazy_moe is not None and hit._lazy_moe._loaded == {}
    moe = hit.moe
    assert moe is not None and hit._lazy_moe is None and hit.moe is moe
    assert moe.cols.keys() == fresh.moe.cols.keys()
    assert all(np.array_equal(moe.cols[k], fresh.moe.cols[k]) for k in fresh.moe.cols)
    T.load_tables.cache_clear()
    other = T.load_tables("h100_sxm")
    assert other is not None
    other.moe = None
    assert other.moe is None and other._lazy_moe is None


def test_stale_and_foreign_files_are_not_used(cache: Path) -> None:
    """The name carries the digest of the table files and of the code; a file whose header says another digest or
    format (copied over, or an older shadowsim's) is rebuilt, not trusted."""
    fresh = T.build_tables("h100_sxm")
    assert fresh is not None
    T.load_tables("h100_sxm")
    f = _file(cache)
    assert fresh.digest in f.name and T._code_digest() in f.name
    other = T.build_tables("a100_sxm")
    assert other is not None
    f.write_bytes(T._cache_bytes(other))  # the A100's tables under the H100's name: another digest inside
    assert T._read_cached(f, fresh.digest) is None
    T.load_tables.cache_clear()
    got = T.load_tables("h100_sxm")
    assert got is not None and got.digest == fresh.digest and _probe(got) == _probe(fresh)
    assert T._read_cached(f, fresh.digest) is not None  # replaced
    data = f.read_bytes()
    f.write_bytes(b"SHSIMTB1" + data[8:])  # another format
    assert T._read_cached(f, fresh.digest) is None


def test_a_cut_or_damaged_file_never_changes_a_result(cache: Path) -> None:
    fresh = T.build_tables("h100_sxm")
    assert fresh is not None
    T.load_tables("h100_sxm")
    f = _file(cache)
    good = f.read_bytes()
    f.write_bytes(good[: len(good) // 2])  # cut short (a full disk): refused at load, rebuilt
    assert T._read_cached(f, fresh.digest) is None
    T.load_tables.cache_clear()
    assert _probe(T.load_tables("h100_sxm")) == _probe(fresh)
    assert f.read_bytes() == good
    # one byte of the bf16 GEMM table flipped: the header is fine, that table fails its CRC when first used and
    # comes from a rebuild, which also rewrites the file
    n = int.from_bytes(good[8:16], "little")
    import pickle
    off, length, _ = pickle.loads(good[16:16 + n])["entries"]["gemm"]["bf16"]
    bad = bytearray(good)
    bad[16 + n + off + length // 2] ^= 0xFF
    f.write_bytes(bytes(bad))
    T.load_tables.cache_clear()
    damaged = T.load_tables("h100_sxm")
    assert damaged is not None and _probe(damaged) == _probe(fresh)
    assert f.read_bytes() == good


_WRITER = """
import sys
sys.path.insert(0, {root!r})
from simcore.perf import tables as T
T.use_cache_dir({cache!r})
t = T.load_tables("h100_sxm")
print(t.gemm["bf16"].curve(6144, 4096)(900))
"""


def test_concurrent_writers_leave_one_whole_file(tmp_path: Path) -> None:
    """Four processes miss at once, each builds and writes (a uniquely named sibling, then a rename): the file
    left is whole, nothing half-written is left behind, and a fifth process loads it."""
    import subprocess
    import sys
    root = str(Path(__file__).resolve().parents[3])
    code = _WRITER.format(root=root, cache=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=240)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and len(set(outs)) == 1, outs
    names = sorted(p.name for p in tmp_path.iterdir())
    memos = [n for n in names if n.startswith("digests-h100_sxm-") and n.endswith(".txt")]  # the digests' memo
    files = [n for n in names if n not in memos]
    assert len(memos) == 1, names
    assert len(files) == 1 and files[0].startswith("tables-h100_sxm-") and files[0].endswith(".pickle"), files
    T.use_cache_dir(tmp_path)
    try:
        fresh = T.build_tables("h100_sxm")
        assert fresh is not None
        hit = T._read_cached(tmp_path / files[0], fresh.digest)
        assert hit is not None and _probe(hit) == _probe(fresh)
        assert str(hit.gemm["bf16"].curve(6144, 4096)(900)) == outs[0]
    finally:
        T.use_cache_dir(None)


def test_an_unwritable_cache_only_costs_the_build(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    T.use_cache_dir(blocker / "tables")  # its parent is a file: mkdir fails
    try:
        got = T.load_tables("h100_sxm")
        assert got is not None and type(got.gemm) is dict
        assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    finally:
        T.use_cache_dir(None)


def _package_copy(tmp_path: Path) -> Path:
    """simcore/perf's table files and the two sources the digests cover, copied (new inodes and times)."""
    import shutil

    pkg = tmp_path / "perf"
    package = Path(T._PACKAGE)  # an os.path string (start-up: no pathlib in simcore.perf.tables)
    shutil.copytree(package / "data" / "tables" / "h100_sxm", pkg / "data" / "tables" / "h100_sxm")
    for mod in ("tables.py", "interp.py"):
        shutil.copy(package / mod, pkg / mod)
    return pkg


def test_the_digests_are_memoized_by_file_signature_and_a_rewritten_file_is_hashed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start-up: the SHA-256 over the table files and sources is done once per file signature (name, size,
    inode, modification and status-change times); a file rewritten with the same size and its old modification
    time (as `cp -p` or tar would leave it) still gets a new status-change time, so it is hashed again."""
    import os
    import time

    pkg = _package_copy(tmp_path)
    monkeypatch.setattr(T, "_PACKAGE", pkg)
    T.use_cache_dir(tmp_path / "cache")
    try:
        real = (T.tables_digest("h100_sxm"), T._code_digest())
        hashed: list[str] = []
        monkeypatch.setattr(T, "tables_digest", lambda gpu: hashed.append(gpu) or real[0] + "")
        assert T._digests("h100_sxm") == real and hashed == ["h100_sxm"]  # first: computed, memo written
        assert T._digests("h100_sxm") == real and hashed == ["h100_sxm"]  # then: from the memo
        assert len(list((tmp_path / "cache").glob("digests-h100_sxm-*.txt"))) == 1

        f = pkg / "data" / "tables" / "h100_sxm" / "allreduce.npz"
        st = f.stat()
        body = bytearray(f.read_bytes())
        body[-1] ^= 0xFF
        time.sleep(0.01)
        f.write_bytes(bytes(body))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same modification time
        monkeypatch.undo()
        monkeypatch.setattr(T, "_PACKAGE", pkg)
        assert T._digests("h100_sxm")[0] != real[0]  # hashed again: the content changed
    finally:
        T.use_cache_dir(None)


def test_a_damaged_digest_memo_is_computed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _package_copy(tmp_path)
    monkeypatch.setattr(T, "_PACKAGE", pkg)
    T.use_cache_dir(tmp_path / "cache")
    try:
        real = T._digests("h100_sxm")
        (memo,) = (tmp_path / "cache").glob("digests-h100_sxm-*.txt")
        for bad in ("", "x", memo.read_text().replace(real[0], "0" * 12, 1).split("\n")[0] + "\nshort\nx\n"):
            memo.write_text(bad)
            assert T._digests("h100_sxm") == real
    finally:
        T.use_cache_dir(None)
