"""SGLang-measured per-op latency tables (vendored from aiconfigurator), as interpolating lookups.

Each table is one GPU's measurements of one op class, latency in **milliseconds per call** (one layer):

- ``gemm``: (dtype, m tokens, n out-features, k in-features);
- ``context_attention``: (kv dtype, batch, isl, q heads, kv heads), head_dim 128, no cached prefix;
- ``generation_attention``: (kv dtype, batch, kv length = isl + step, q heads, kv heads), one query token;
- ``allreduce``: SGLang custom all-reduce, (CUDA graph or eager, GPUs, message size in bf16 *elements*:
  the collector allocates a [size/4096, 4096] bf16 tensor);
- ``moe``: fused MoE (dtype, routing distribution, tokens, hidden, expert inter size, top-k, experts, tp, ep);
- ``context_mla`` / ``generation_mla``: DeepSeek MLA attention (kv dtype, batch, length, q heads per rank).

The files are .npz column stores written from aiconfigurator's parquet files (see data/README.md). Tables
are loaded lazily, once per process per GPU. Lookups that the hot path needs are reduced to 1-D `Curve`s
for one op shape (the model's n and k are fixed, only the token count varies).
"""
from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from simcore.perf.interp import Curve, LazyNumpy, LogGrid

try:  # start-up: the C unpickler alone; pickle.py (≈ 5 M instructions to import) only where tables are written
    from _pickle import loads as _unpickle
except ImportError:  # pragma: no cover - a Python without the accelerator
    from pickle import loads as _unpickle

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
else:
    np = LazyNumpy()  # start-up: imported when tables are built, not when they are loaded from the cache

# simcore/perf: its data/ and the sources named in the cache's code digest. Paths here are os.path strings, not
# pathlib's: importing pathlib (with urllib.parse, ipaddress, fnmatch) is ≈ 17 M instructions of start-up
_PACKAGE = os.path.dirname(__file__)
DTYPE_CODES = {"bf16": 0, "fp16": 0, "fp8": 1, "fp8_block": 2, "int4": 3, "nvfp4": 4}


def tables_dir_names() -> list[str]:
    """GPUs (aiconfigurator system names) that have vendored measured tables."""
    root = os.path.join(_PACKAGE, "data", "tables")
    return sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))


def _load_npz(gpu: str, name: str) -> dict[str, np.ndarray] | None:
    f = os.path.join(_PACKAGE, "data", "tables", gpu, f"{name}.npz")
    if not os.path.isfile(f):
        return None
    with open(f, "rb") as fh:
        z = np.load(fh)
        return {k: z[k] for k in z.files}


def _select(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def _median3_along_first_axis(logv: np.ndarray) -> np.ndarray:
    """Running median of three neighbouring token counts (log latency), ends and holes untouched.

    Neighbouring GEMM measurements differ by 3–6% run to run (one collection can show m = 1024 and 1025
    20% apart); a median of three removes such isolated outliers while keeping steps that persist over two
    or more grid points (tile-count boundaries). It lowers the held-out error (docs/accuracy.md §2)."""
    out = logv.copy()
    for i in range(1, logv.shape[0] - 1):
        win = np.stack([logv[i - 1], logv[i], logv[i + 1]])
        valid = ~np.isnan(win).any(axis=0)
        out[i] = np.where(valid, np.median(win, axis=0), logv[i])
    return out


class GemmTable:
    """GEMM latency for one dtype over a (m, n, k) grid."""

    def __init__(self, grid: LogGrid) -> None:
        self.grid = grid
        self._curves: dict[tuple[int, int], Curve] = {}

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray], smooth: bool = True) -> GemmTable:
        grid = LogGrid.from_points([cols["m"], cols["n"], cols["k"]], cols["latency_ms"])
        if smooth:
            grid.logv = _median3_along_first_axis(grid.logv)
        return cls(grid)

    def curve(self, n: int, k: int) -> Curve:
        """Latency (ms) as a function of m for the fixed weight shape (n, k)."""
        key = (n, k)
        c = self._curves.get(key)
        if c is None:
            c = self._curves[key] = self.grid.curve_along(0, [float(n), float(k)])
        return c

    def latency_ms(self, m: int, n: int, k: int) -> float:
        return self.curve(n, k)(m)


class AttentionTable:
    """Context or generation attention latency over (batch, length) for each (q heads, kv heads) pair."""

    def __init__(self, grids: dict[tuple[int, int], LogGrid]) -> None:
        self.grids = grids
        self._cache: dict[tuple[int, int], LogGrid] = {}
        self._curves: dict[tuple[int, int, int], Curve] = {}

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray], length: np.ndarray) -> AttentionTable:
        grids: dict[tuple[int, int], LogGrid] = {}
        pairs = set(zip(cols["heads"].tolist(), cols["kv_heads"].tolist()))
        for h, kv in pairs:
            m = (cols["heads"] == h) & (cols["kv_heads"] == kv)
            grids[(h, kv)] = LogGrid.from_points([cols["batch"][m], length[m]], cols["latency_ms"][m])
        return cls(grids)

    def grid_for(self, heads: int, kv_heads: int) -> LogGrid:
        """The grid for this head configuration, interpolated over q heads (log-log) when not measured."""
        key = (heads, kv_heads)
        if key in self.grids:
            return self.grids[key]
        if key in self._cache:
            return self._cache[key]
        same_kv = sorted(h for h, kv in self.grids if kv == kv_heads)
        if not same_kv:  # nearest kv-head count, then scale by kv heads (attention reads ∝ kv heads)
            kvs = sorted({kv for _, kv in self.grids}, key=lambda v: abs(math.log(v / kv_heads)))
            base_kv = kvs[0]
            g = self.grid_for(max(heads * base_kv // kv_heads, base_kv), base_kv)
            out = LogGrid(g.axes, np.exp(g.logv) * (kv_heads / base_kv))
        else:
            lo = max([h for h in same_kv if h <= heads], default=same_kv[0])
            hi = min([h for h in same_kv if h >= heads], default=same_kv[-1])
            a, b = self.grids[(lo, kv_heads)], self.grids[(hi, kv_heads)]
            if lo == hi:
                out = LogGrid(a.axes, np.exp(a.logv) * (heads / lo))
            else:
                w = (math.log(heads) - math.log(lo)) / (math.log(hi) - math.log(lo))
                axes = a.axes if a.logv.size <= b.logv.size else b.axes
                va = np.array([[a.at([x, y]) for y in axes[1]] for x in axes[0]])
                vb = np.array([[b.at([x, y]) for y in axes[1]] for x in axes[0]])
                out = LogGrid(axes, np.exp((1 - w) * np.log(va) + w * np.log(vb)))
        self._cache[key] = out
        return out

    def curve_over_length(self, batch: int, heads: int, kv_heads: int) -> Curve:
        """Latency (ms) as a function of sequence length for a fixed batch size."""
        key = (batch, heads, kv_heads)
        c = self._curves.get(key)
        if c is None:
            c = self._curves[key] = self.grid_for(heads, kv_heads).curve_along(1, [float(batch)])
        return c

    def latency_ms(self, batch: int, length: float, heads: int, kv_heads: int) -> float:
        return self.grid_for(heads, kv_heads).at([float(batch), float(length)])


class AllReduceTable:
    """SGLang custom all-reduce latency by message size, per (CUDA graph?, number of GPUs)."""

    def __init__(self, curves: dict[tuple[bool, int], Curve]) -> None:
        self.curves = curves

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray]) -> AllReduceTable:
        curves = {}
        for g in (0, 1):
            for n in sorted(set(cols["num_gpus"].tolist())):
                m = (cols["graph"] == g) & (cols["num_gpus"] == n)
                if m.any():
                    # Stored per element; keep the curve in bytes (bf16: 2 bytes per element).
                    curves[(bool(g), int(n))] = Curve(cols["message_elements"][m] * 2.0, cols["latency_ms"][m])
        return cls(curves)

    def latency_ms(self, message_bytes: float, num_gpus: int, graph: bool) -> float | None:
        c = self.curves.get((graph, num_gpus)) or self.curves.get((not graph, num_gpus))
        return None if c is None else c(message_bytes)


class MoeTable:
    """Fused-MoE latency by token count, for exactly measured expert configurations."""

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        self.cols = cols
        self._curves: dict[tuple[Any, ...], Curve | None] = {}

    # pickled without numpy (start-up): columns as (dtype, bytes), arrays rebuilt on first use of `cols`
    def __getstate__(self) -> dict[str, Any]:
        cols = self.__dict__.get("cols")
        raw = self.__dict__.get("_raw") if cols is None else {k: (v.dtype.str, v.tobytes()) for k, v in cols.items()}
        return {"_raw": raw, "_curves": self._curves}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__dict__.update(st)

    def __getattr__(self, name: str) -> Any:
        if name == "cols" and "_raw" in self.__dict__:
            self.cols = {k: np.frombuffer(b, dtype=d).copy() for k, (d, b) in self.__dict__["_raw"].items()}
            return self.cols
        raise AttributeError(name)

    def curve(self, *, dtype: str, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int,
              power_law: bool = True) -> Curve | None:
        """Latency (ms) vs tokens for this configuration, or None when it was not measured."""
        key = (dtype, hidden, inter, topk, experts, tp, ep, power_law)
        if key in self._curves:
            return self._curves[key]
        c = self.cols
        m = ((c["dtype"] == DTYPE_CODES.get(dtype, -1)) & (c["hidden"] == hidden) & (c["inter"] == inter)
             & (c["topk"] == topk) & (c["experts"] == experts) & (c["tp"] == tp) & (c["ep"] == ep))
        sub = m & (c["power_law"] == int(power_law))
        if not sub.any():
            sub = m
        out = Curve(c["tokens"][sub], c["latency_ms"][sub]) if sub.any() else None
        self._curves[key] = out
        return out


class GpuTables:
    """All measured tables of one GPU; any member may be None when not measured.

    ``digest``: SHA-256 (12 hex digits) over the table files' bytes, part of the latency model's hash."""

    def __init__(self, gpu: str, gemm: dict[str, GemmTable], context_attention: dict[str, AttentionTable],
                 generation_attention: dict[str, AttentionTable], allreduce: AllReduceTable | None,
                 moe: MoeTable | None, context_mla: dict[str, AttentionTable] | None = None,
                 generation_mla: dict[str, AttentionTable] | None = None, digest: str = "") -> None:
        self.gpu = gpu
        self.gemm = gemm
        self.context_attention = context_attention
        self.generation_attention = generation_attention
        self.allreduce = allreduce
        self.moe = moe
        self.context_mla = context_mla if context_mla is not None else {}
        self.generation_mla = generation_mla if generation_mla is not None else {}
        self.digest = digest


def build_tables(gpu: str, drop: dict[str, Any] | None = None) -> GpuTables | None:
    """Load a GPU's tables. ``drop`` (tests only) removes rows before gridding, to measure held-out error:
    ``{"gemm_m": set_of_m, "ctx_isl": set_of_isl, "gen_step": set_of_steps}``."""
    g = _load_npz(gpu, "gemm")
    if g is None:
        return None
    drop = drop or {}
    codes = {v: k for k, v in DTYPE_CODES.items() if k != "fp16"}
    if "gemm_m" in drop:
        g = _select(g, ~np.isin(g["m"], list(drop["gemm_m"])))
    gemm = {codes[int(d)]: GemmTable.from_columns(_select(g, g["dtype"] == d)) for d in np.unique(g["dtype"])}
    ctx, gen = {}, {}
    c = _load_npz(gpu, "context_attention")
    if c is not None:
        if "ctx_isl" in drop:
            c = _select(c, ~np.isin(c["isl"], list(drop["ctx_isl"])))
        for d in np.unique(c["kv_dtype"]):
            s = _select(c, c["kv_dtype"] == d)
            ctx[codes[int(d)]] = AttentionTable.from_columns(s, s["isl"])
    q = _load_npz(gpu, "generation_attention")
    if q is not None:
        if "gen_step" in drop:
            q = _select(q, ~np.isin(q["step"], list(drop["gen_step"])))
        for d in np.unique(q["kv_dtype"]):
            s = _select(q, q["kv_dtype"] == d)
            gen[codes[int(d)]] = AttentionTable.from_columns(s, s["isl"] + s["step"])
    mla: dict[str, dict[str, AttentionTable]] = {"context": {}, "generation": {}}
    for kind in mla:
        t = _load_npz(gpu, f"{kind}_mla")
        if t is None:
            continue
        t["kv_heads"] = np.ones_like(t["heads"])  # one latent KV "head" shared by all query heads
        for d in np.unique(t["kv_dtype"]):
            s = _select(t, t["kv_dtype"] == d)
            mla[kind][codes[int(d)]] = AttentionTable.from_columns(s, s["isl"] + s["step"])
    a = _load_npz(gpu, "allreduce")
    mo = _load_npz(gpu, "moe")
    return GpuTables(gpu, gemm, ctx, gen, AllReduceTable.from_columns(a) if a is not None else None,
                     MoeTable(mo) if mo is not None else None, mla["context"], mla["generation"],
                     tables_digest(gpu))


def tables_digest(gpu: str) -> str:
    """Content hash of a GPU's vendored table files (name and bytes, in name order)."""
    import hashlib  # start-up: a process that finds its digests memoized (`_digests`) hashes nothing here

    h = hashlib.sha256()
    root = os.path.join(_PACKAGE, "data", "tables", gpu)
    for name in sorted(os.listdir(root)):
        if name.endswith(".npz"):
            h.update(name.encode())
            with open(os.path.join(root, name), "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()[:12]


# ---- binary cache of built tables (start-up) -------------------------------------------------------------
# Building a GPU's grids (hole filling, smoothing) costs ~0.5 s of CPU (and numpy's import); reading them back
# ~1 ms plus ~0.3 ms per table a run uses. The edge (CLI, benchmarks) names a cache folder with `use_cache_dir`;
# the core never looks one up by itself (no environment).
#
# One file per GPU, ``tables-<gpu>-<table digest>-<code digest>.pickle``: the magic, the header length (8 bytes,
# little endian), the header (a pickle: format, GPU, table digest, and per table its offset, length and CRC-32),
# then each table pickled on its own. A process unpickles the header, the all-reduce and MoE tables, and of the
# per-dtype tables only those it asks for (`_LazyTables`): a bf16 Llama run reads 3 of the 11. A file that is short, of another format or digest, or whose
# header does not unpickle is rebuilt; a table whose bytes fail their CRC or do not unpickle is taken from a
# rebuild (and the file rewritten), so a damaged cache never changes a result, it only costs the build.
_CACHE_FORMAT = 2
_MAGIC = b"SHSIMTB2"
_TABLE_MEMBERS = ("gemm", "context_attention", "generation_attention", "context_mla", "generation_mla")
_cache_dir: str | None = None


def use_cache_dir(path: str | Path | None) -> None:
    """Keep built tables in ``path``, one binary file per GPU named by the digest of its table files and of the
    code that builds them (tables.py, interp.py), so a later process loads them instead of building them.
    ``None`` (the default): build in every process. A damaged or stale file is rebuilt and replaced."""
    global _cache_dir
    _cache_dir = os.fspath(path) if path is not None else None
    load_tables.cache_clear()


@lru_cache(maxsize=1)
def _code_digest() -> str:
    import hashlib

    h = hashlib.sha256(str(_CACHE_FORMAT).encode())
    for mod in ("tables.py", "interp.py"):
        with open(os.path.join(_PACKAGE, mod), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:12]


def _cache_file(gpu: str, digest: str, code_digest: str | None = None) -> str | None:
    code = code_digest if code_digest is not None else _code_digest()
    return None if _cache_dir is None else os.path.join(_cache_dir, f"tables-{gpu}-{digest}-{code}.pickle")


# The two digests that name a cache file cost a SHA-256 over the GPU's 0.6 MB of table files and the two
# sources in every process (≈ 20 M instructions under valgrind, ≈ 1 ms with the reads). A small memo beside the
# cache keeps them per *file signature*: name, size, inode and the modification and status-change times (ns) of
# each table file and source. A rewritten file always gets a new status-change time (no copy or checkout tool
# can set it), so a changed file is hashed again; only the signature's own files are trusted this way.
def _file_signature(gpu: str) -> str:
    parts = [f"format {_CACHE_FORMAT}"]
    root = os.path.join(_PACKAGE, "data", "tables", gpu)
    files = [os.path.join(root, name) for name in sorted(os.listdir(root)) if name.endswith(".npz")]
    for f in [*files, os.path.join(_PACKAGE, "tables.py"), os.path.join(_PACKAGE, "interp.py")]:
        st = os.stat(f)
        parts.append(f"{os.path.basename(f)} {st.st_size} {st.st_ino} {st.st_mtime_ns} {st.st_ctime_ns}")
    return "; ".join(parts)


def _digests(gpu: str) -> tuple[str, str]:
    """``(tables_digest(gpu), _code_digest())``, from the memo in the cache folder when it was written for the
    files' present signature; otherwise computed and the memo (re)written."""
    assert _cache_dir is not None
    signature = _file_signature(gpu)
    memo = os.path.join(_cache_dir, f"digests-{gpu}-{zlib.crc32(signature.encode()):08x}.txt")
    try:
        with open(memo, encoding="utf-8") as fh:
            saved, digest, code = fh.read().split("\n")[:3]
        if saved == signature and len(digest) == len(code) == 12:
            return digest, code
    except (OSError, ValueError):  # missing, unreadable or cut short: compute
        pass
    digest, code = tables_digest(gpu), _code_digest()
    _write_atomic(memo, f"{signature}\n{digest}\n{code}\n".encode())
    return digest, code


class _LazyTables(Mapping[str, Any]):
    """A read-only ``{dtype: table}`` whose tables are unpickled from the cache file's bytes on first access.

    ``rebuilt()`` gives the GPU's freshly built tables: used, once, for a table whose bytes are damaged. Pickles
    (sweep workers) as a plain dict of every table."""

    def __init__(self, member: str, data: bytes, entries: dict[str, tuple[int, int, int]],
                 rebuilt: Callable[[], GpuTables]) -> None:
        self._member, self._data, self._entries, self._rebuilt = member, data, entries, rebuilt
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        got = self._loaded.get(key)
        if got is None:
            off, length, crc = self._entries[key]  # KeyError: not measured, as for a dict
            blob = self._data[off:off + length]
            got = None
            if len(blob) == length and zlib.crc32(blob) == crc:
                try:
                    got = _unpickle(blob)
                except Exception:  # noqa: BLE001 - any damage: take the table from a rebuild
                    got = None
            if got is None:
                got = getattr(self._rebuilt(), self._member)[key]
            self._loaded[key] = got
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self.items()),))

    def __repr__(self) -> str:
        return f"_LazyTables({self._member}: {sorted(self._entries)}, loaded {sorted(self._loaded)})"


def _read_cached(path: str | Path, digest: str) -> GpuTables | None:
    """The tables in ``path`` (tables unpickled lazily), or None when it is missing, short, of another format or
    digest, or its header is damaged."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        if data[:8] != _MAGIC:
            return None
        n = int.from_bytes(data[8:16], "little")
        head = _unpickle(data[16:16 + n])
        if head.get("format") != _CACHE_FORMAT or head.get("digest") != digest:
            return None
        base = 16 + n
        entries: dict[str, dict[str, tuple[int, int, int]]] = {}
        for member, tables in head["entries"].items():
            entries[member] = {k: (base + off, length, crc) for k, (off, length, crc) in tables.items()}
        if any(off + length > len(data) for tables in entries.values() for off, length, _ in tables.values()):
            return None  # cut short
        gpu = head["gpu"]
    except Exception:  # noqa: BLE001 - a damaged header: rebuild
        return None
    rebuilt: list[GpuTables] = []

    def rebuild() -> GpuTables:
        if not rebuilt:
            built = build_tables(gpu)
            assert built is not None and built.digest == digest
            _write_cached(path, built)
            rebuilt.append(built)
        return rebuilt[0]

    lazy = {m: _LazyTables(m, data, entries[m], rebuild) for m in entries}
    try:
        allreduce = lazy["allreduce"]["_"] if "_" in lazy["allreduce"] else None
        return _CachedGpuTables(lazy["moe"], gpu, lazy["gemm"], lazy["context_attention"],  # type: ignore[arg-type]
                                lazy["generation_attention"], allreduce, None, lazy["context_mla"],  # type: ignore[arg-type]
                                lazy["generation_mla"], digest)  # type: ignore[arg-type]
    except KeyError:
        return None


class _CachedGpuTables(GpuTables):
    """`GpuTables` read from the cache file, whose MoE table (≈ 1 MB of the H100's 2.2 MB file; a dense model
    never prices it) is unpickled on first access of ``moe``, like every per-dtype table (start-up: its CRC-32 and
    unpickling were ≈ 4 M instructions of every process, docs/architecture.md, Start-up, fifth pass). Pickles as
    a plain `GpuTables` with every table (sweep workers)."""

    def __init__(self, lazy_moe: _LazyTables, *args: Any) -> None:
        super().__init__(*args)  # sets ``moe`` to None (the setter below)
        self._lazy_moe: _LazyTables | None = lazy_moe

    @property  # type: ignore[override]
    def moe(self) -> MoeTable | None:
        lazy = self._lazy_moe
        if lazy is not None:
            self._moe = lazy["_"] if "_" in lazy else None
            self._lazy_moe = None
        return self._moe

    @moe.setter
    def moe(self, value: MoeTable | None) -> None:  # an assigned table replaces the cached one
        self._lazy_moe, self._moe = None, value

    def __reduce__(self) -> tuple[Any, ...]:
        return (GpuTables, (self.gpu, dict(self.gemm), dict(self.context_attention), dict(self.generation_attention),
                            self.allreduce, self.moe, dict(self.context_mla), dict(self.generation_mla),
                            self.digest))


def _cache_bytes(tables: GpuTables) -> bytes:
    import pickle

    blobs: list[bytes] = []
    offset = 0
    entries: dict[str, dict[str, tuple[int, int, int]]] = {}
    members: list[tuple[str, dict[str, Any]]] = [(m, getattr(tables, m)) for m in _TABLE_MEMBERS]
    members += [(m, {} if getattr(tables, m) is None else {"_": getattr(tables, m)}) for m in ("allreduce", "moe")]
    for member, tabs in members:
        entries[member] = {}
        for key in sorted(tabs):
            blob = pickle.dumps(tabs[key], protocol=pickle.HIGHEST_PROTOCOL)
            entries[member][key] = (offset, len(blob), zlib.crc32(blob))
            blobs.append(blob)
            offset += len(blob)
    head = pickle.dumps({"format": _CACHE_FORMAT, "gpu": tables.gpu, "digest": tables.digest, "entries": entries},
                        protocol=pickle.HIGHEST_PROTOCOL)
    return b"".join([_MAGIC, len(head).to_bytes(8, "little"), head, *blobs])


def _write_cached(path: str | Path, tables: GpuTables) -> None:
    _write_atomic(path, _cache_bytes(tables))


def _write_atomic(path: str | Path, data: bytes) -> None:
    """Atomically (write a uniquely named sibling, rename): concurrent writers never mix their bytes and readers
    never see half a file. Errors are ignored: a cache that cannot be written only costs the build next time."""
    import tempfile

    tmp: str | None = None
    try:
        parent = os.path.dirname(path) or "."
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


@lru_cache(maxsize=8)
def load_tables(gpu: str) -> GpuTables | None:
    """Cached `build_tables` for production use (tables are immutable once built; curves cache lazily), from
    the binary cache when `use_cache_dir` named one."""
    if _cache_dir is None or not os.path.isfile(os.path.join(_PACKAGE, "data", "tables", gpu, "gemm.npz")):
        return build_tables(gpu)
    digest, code = _digests(gpu)
    path = _cache_file(gpu, digest, code)
    assert path is not None
    cached = _read_cached(path, digest)
    if cached is not None:
        return cached
    built = build_tables(gpu)
    if built is not None:
        _write_cached(path, built)
    return built
