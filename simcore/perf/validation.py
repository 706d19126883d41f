"""Validation against real benchmark measurements: rows → simulated benchmarks → error statistics.

The measurement-file format (``../shared/data/validation/*.csv``): ``id, model, gpu, precision, tp, ep,
dp_attention, isl, osl, concurrency, request_rate, num_requests, sglang_version, measured_ttft_ms,
measured_tpot_ms, measured_throughput_rps``; blanks allowed; optional ``max_total_tokens``.

Benchmark protocol (docs/accuracy.md §3.1 gives the sources): the one aiconfigurator generates for its SGLang
deployments (``bench_run.sh``: aiperf, chat endpoint, streaming, ``ignore_eos``, zero length spread):

- closed loop when ``concurrency`` is set and ``request_rate`` is blank or ``inf``: ``concurrency`` clients send
  back-to-back requests of ``isl`` prompt and ``osl`` output tokens (random content, nothing hits the prefix
  cache); open loop otherwise: Poisson arrivals at ``request_rate``;
- the server sees ``isl + prompt_overhead_tokens`` prompt tokens: the chat endpoint wraps the prompt in the
  model's chat template (ChatML: ``<|im_start|>user\n`` … ``<|im_end|>\n<|im_start|>assistant\n``, 8 tokens);
- closed loop: ``WARMUP_PER_CLIENT`` × concurrency warm-up requests first (aiperf ``--warmup-request-count``),
  simulated but left out of the statistics, then ``num_requests`` when given, else ``REQUESTS_PER_CLIENT`` ×
  concurrency (aiperf ``--num-requests``); open loop: ``num_requests`` or 200, no warm-up;
- statistics over the profiled requests: mean TTFT; mean TPOT = mean over requests of (e2e − TTFT)/(osl − 1);
  throughput = completed / (last finish − first arrival).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from simcore.errors import UserError
from simcore.perf.profile import CalibrationProfile

# aiconfigurator's generated benchmark (bench_run.sh.j2): --num-requests C × 20, --warmup-request-count C × 2
REQUESTS_PER_CLIENT = 20
WARMUP_PER_CLIENT = 2
# The chat template around a one-turn prompt (ChatML, Qwen family): <|im_start|> user \n … <|im_end|> \n
# <|im_start|> assistant \n. Exact powers of two (1024 × 16 = 2 × 8192) would otherwise fill prefill chunks exactly,
# which a real server never sees.
PROMPT_OVERHEAD_TOKENS = 8
OPEN_LOOP_REQUESTS = 200
COLUMNS = ("id", "model", "gpu", "precision", "tp", "ep", "dp_attention", "isl", "osl", "concurrency",
           "request_rate", "num_requests", "sglang_version", "measured_ttft_ms", "measured_tpot_ms",
           "measured_throughput_rps")
METRICS = ("ttft", "tpot", "throughput")
_RID = "req-"


@dataclass(frozen=True)
class Row:
    """One measurement row; optional numbers are None when blank."""

    id: str
    model: str
    gpu: str
    precision: str | None
    tp: int
    ep: int
    dp_attention: int
    isl: int
    osl: int
    concurrency: int | None
    request_rate: float | None
    num_requests: int | None
    sglang_version: str
    measured: dict[str, float | None]
    max_total_tokens: int | None = None  # optional column: the KV pool the real server reported


def _num(v: str | None, kind: type, field_name: str, rid: str) -> Any:
    if v is None or v.strip() == "":
        return None
    try:
        return kind(float(v)) if kind is int else kind(v)
    except ValueError:
        raise UserError(field_name, f"row {rid}: {v!r} is not a number") from None


def rows_from_records(records: Iterable[dict[str, str]], fieldnames: Sequence[str], source: str = "input") -> list[Row]:
    """Parse measurement records (``csv.DictReader`` rows). Missing required columns raise UserError."""
    missing = [c for c in ("id", "model", "gpu", "tp", "isl", "osl") if c not in fieldnames]
    if missing:
        raise UserError("MEASUREMENTS", f"{source} lacks column(s) {', '.join(missing)}",
                        f"expected columns: {', '.join(COLUMNS)}")
    rows = []
    for i, r in enumerate(records):
        rid = (r.get("id") or "").strip() or f"row{i + 1}"
        rate = (r.get("request_rate") or "").strip()
        rows.append(Row(
            id=rid, model=(r.get("model") or "").strip(), gpu=(r.get("gpu") or "").strip(),
            precision=(r.get("precision") or "").strip() or None,
            tp=_num(r.get("tp"), int, "tp", rid) or 1, ep=_num(r.get("ep"), int, "ep", rid) or 1,
            dp_attention=_num(r.get("dp_attention"), int, "dp_attention", rid) or 1,
            isl=_num(r.get("isl"), int, "isl", rid), osl=_num(r.get("osl"), int, "osl", rid),
            concurrency=_num(r.get("concurrency"), int, "concurrency", rid),
            request_rate=None if rate.lower() in ("", "inf") else _num(rate, float, "request_rate", rid),
            num_requests=_num(r.get("num_requests"), int, "num_requests", rid),
            sglang_version=(r.get("sglang_version") or "").strip() or "0.5.9",
            measured={m: _num(r.get(f"measured_{m}_{u}"), float, f"measured_{m}_{u}", rid)
                      for m, u in (("ttft", "ms"), ("tpot", "ms"), ("throughput", "rps"))},
            max_total_tokens=_num(r.get("max_total_tokens"), int, "max_total_tokens", rid),
        ))
    return rows


@dataclass
class RowResult:
    """Predicted vs measured for one row; errors are absolute percentage errors (None when not measured)."""

    row: Row
    predicted: dict[str, float]
    ape: dict[str, float | None] = field(default_factory=dict)
    wall_s: float = 0.0
    requests: int = 0  # measured (non-warm-up, completed) requests behind the statistics

    def to_dict(self) -> dict[str, Any]:
        r = self.row
        out: dict[str, Any] = {"id": r.id, "model": r.model, "gpu": r.gpu, "tp": r.tp, "isl": r.isl, "osl": r.osl,
                               "concurrency": r.concurrency, "request_rate": r.request_rate}
        for m in METRICS:
            unit = "rps" if m == "throughput" else "ms"
            out[f"predicted_{m}_{unit}"] = self.predicted.get(m)
            out[f"measured_{m}_{unit}"] = r.measured.get(m)
            out[f"{m}_ape_pct"] = self.ape.get(m)
        return out


def ape(predicted: float, measured: float | None) -> float | None:
    """Absolute percentage error in percent; None when there is no positive measurement."""
    if measured is None or not measured > 0 or not math.isfinite(predicted):
        return None
    return abs(predicted - measured) / measured * 100.0


def error_summary(results: list[RowResult]) -> dict[str, dict[str, float | int | None]]:
    """MAPE, median and P90 absolute percentage error (percent) and count, per metric."""
    out: dict[str, dict[str, float | int | None]] = {}
    for m in METRICS:
        errs = [r.ape[m] for r in results if r.ape.get(m) is not None]
        if errs:
            a = np.asarray(errs, dtype=float)
            out[m] = {"mape": float(a.mean()), "median_ape": float(np.median(a)),
                      "p90_ape": float(np.percentile(a, 90)), "n": len(errs)}
        else:
            out[m] = {"mape": None, "median_ape": None, "p90_ape": None, "n": 0}
    return out


def unsupported_reason(row: Row) -> str | None:
    """Why a row cannot be simulated faithfully, or None."""
    if row.ep > 1:
        return f"expert parallelism (ep={row.ep}) is not modelled"
    if row.dp_attention > 1:
        return f"DP attention (dp_attention={row.dp_attention}) is not modelled"
    if row.isl is None or row.osl is None or row.isl < 1 or row.osl < 1:
        return "isl and osl must be positive"
    if row.concurrency is None and row.request_rate is None:
        return "neither concurrency nor request_rate given"
    return None


@dataclass(frozen=True)
class Protocol:
    """How the benchmark client ran (see the module docstring); the defaults are aiconfigurator's."""

    requests_per_client: int = REQUESTS_PER_CLIENT
    warmup_per_client: int = WARMUP_PER_CLIENT
    prompt_overhead_tokens: int = PROMPT_OVERHEAD_TOKENS

    def __post_init__(self) -> None:
        if self.requests_per_client < 1:
            raise UserError("--requests-per-client", f"must be >= 1, got {self.requests_per_client}")
        if self.warmup_per_client < 0:
            raise UserError("--warmup-per-client", f"must be >= 0, got {self.warmup_per_client}")
        if self.prompt_overhead_tokens < 0:
            raise UserError("--prompt-overhead-tokens", f"must be >= 0, got {self.prompt_overhead_tokens}")


def simulate_row(row: Row, *, profile: CalibrationProfile | None = None, backend: str = "auto",
                 seed: int = 0, protocol: Protocol | None = None) -> RowResult:
    """Run the row's benchmark in the simulator. Raises UserError when the model/GPU/precision is unknown."""
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.perf import build_latency_model
    from simcore.settings import ServerSettings, resolve
    from simcore.workload import ClosedLoop, OpenLoop

    model = load_model(row.model)
    gpu = load_gpu(row.gpu)
    precision = row.precision or model.default_precision
    settings = resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp,
                                      max_total_tokens=row.max_total_tokens), gpu.memory_bytes)
    pool = size_kv_pool(model, gpu, settings, precision)
    latency = build_latency_model(model, gpu, row.tp, precision, backend=backend, profile=profile)
    p = protocol or Protocol()
    prompt = row.isl + p.prompt_overhead_tokens
    warmup = 0
    if row.concurrency is not None and row.request_rate is None:
        n = row.num_requests or p.requests_per_client * row.concurrency
        warmup = p.warmup_per_client * row.concurrency
        workload: Any = ClosedLoop(row.concurrency, warmup + n, prompt, row.osl, seed, rid_prefix=_RID)
    else:
        n = row.num_requests or OPEN_LOOP_REQUESTS
        workload = OpenLoop(float(row.request_rate or 1.0), n, prompt, row.osl, seed, rid_prefix=_RID)
    res = simulate(settings, latency, workload, kv_capacity_tokens=pool.max_total_num_tokens, seed=seed,
                   max_running_requests=pool.max_running_requests, context_len=pool.context_len)
    # requests are numbered in sending order, so the warm-up ones are the first `warmup`
    recs = [r for r in res.records if not r.aborted and int(r.rid[len(_RID):]) >= warmup]
    if not recs:
        raise UserError("MEASUREMENTS", f"row {row.id}: no request completed in the simulation",
                        "the model may not fit on this GPU/TP")
    span = max(r.finish_s for r in recs) - min(r.arrival_s for r in recs)
    tpots = [r.tpot_s for r in recs if r.tpot_s is not None]
    pred = {
        "ttft": float(np.mean([r.ttft_s for r in recs])) * 1e3,
        "tpot": float(np.mean(tpots)) * 1e3 if tpots else float("nan"),
        "throughput": len(recs) / span if span > 0 else float("nan"),
    }
    return RowResult(row, pred, {m: ape(pred[m], row.measured.get(m)) for m in METRICS}, requests=len(recs))


def validate(rows: list[Row], *, profile: CalibrationProfile | None = None, backend: str = "auto",
             seed: int = 0, protocol: Protocol | None = None,
             simulate_fn: Callable[..., RowResult] | None = None,
             progress: Callable[[int, int, Row], None] | None = None) -> dict[str, Any]:
    """Simulate every row; a row that cannot be simulated is skipped with its reason, never raised.

    Returns ``{"rows": [...], "summary": {metric: {mape, median_ape, p90_ape, n}}, "skipped": [{id, reason}]}``.
    ``simulate_fn`` replaces `simulate_row` (tests).
    """
    fn = simulate_fn or simulate_row
    results: list[RowResult] = []
    skipped: list[dict[str, str]] = []
    for i, row in enumerate(rows):
        if progress is not None:
            progress(i, len(rows), row)
        reason = unsupported_reason(row)
        if reason is None:
            try:
                results.append(fn(row, profile=profile, backend=backend, seed=seed, protocol=protocol))
                continue
            except UserError as exc:
                reason = str(exc)
        skipped.append({"id": row.id, "reason": reason})
    return {"rows": [r.to_dict() for r in results], "summary": error_summary(results), "skipped": skipped,
            "_results": results}
