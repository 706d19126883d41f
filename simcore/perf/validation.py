"""Validation against real benchmark measurements: rows → simulated benchmarks → error statistics.

The measurement-file format (``../shared/data/validation/*.csv``): ``id, model, gpu, precision, tp, ep,
dp_attention, isl, osl, concurrency, request_rate, num_requests, sglang_version, measured_ttft_ms,
measured_tpot_ms, measured_throughput_rps``; blanks allowed. Optional columns: ``max_total_tokens`` (the KV pool
the real server reported), ``warmup_requests`` (total warm-up requests; blank = the protocol's per-client count for aiperf, none for
bench_serving, where a number is a barrier of that many copies of the first request, InferenceX's ``--num-warmups``),
``length_dist`` (``fixed``, the default: every request has exactly ``isl``/``osl`` tokens; ``sharegpt``: lengths
drawn from `SHAREGPT_SHAPE_*` scaled to means ``isl``/``osl``; ``exponential``: the same with
`EXPONENTIAL_SHAPE`), ``unsupported`` (a reason the row cannot be simulated,
e.g. speculative decoding, written by whoever built the file; the row is then skipped with it), ``server_args``
(the real server's SGLang launch flags exactly as typed, parsed by `simcore.server_flags` — the flag table of
``shadowsim predict``; blank: the server ran SGLang's defaults, and the row is labelled so), ``client``
(``aiperf``: closed loop with aiperf's warm-up barrier, the default with ``concurrency``; ``bench_serving``:
SGLang's bench_serving random dataset, Poisson at ``request_rate`` or ``inf`` with ``concurrency`` as
``--max-concurrency``; ``poisson``: Poisson arrivals with ``length_dist`` lengths, the default with a rate),
``random_range_ratio`` and ``seed`` (bench_serving's ``--random-range-ratio``, default 0.0, and ``--seed``,
default 1), ``server_tokens_per_prompt_token`` (bench_serving only, > 0, blank = 1: tokens the server's tokenizer
makes of each prompt token the client counted, for a client whose tokenizer differs from the server's; ``isl``
stays the client's length, docs/accuracy.md §3.12), ``server_tokenize_us_per_token`` (>= 0, blank = not modelled: CPU
µs the server's tokenizer manager spends per prompt token it encodes; prompts are encoded one at a time, so a burst
reaches the scheduler spread out, docs/accuracy.md §3.14, ``validation/tokenizer_cost.py``), and the measurements a bench_serving printout gives beyond the means (``measured_ttft_p50_ms``: median
TTFT; ``measured_itl_p50_ms``: median inter-token latency over all token gaps of all requests;
``measured_output_tokens_per_s``: output tokens / benchmark duration; ``measured_e2e_ms``: mean end-to-end
latency, used instead of the TTFT + TPOT derivation when given). These are compared only where a row has them.

``published_deployment`` and ``deployment_assumption`` (written by ``shadowsim validate --deployment as-deployed``,
`shadowsim.known_deployments.as_deployed`, for a row simulated as its published deployment: which one, and the
sentence listed first among the row's ``assumptions``).

A measured row whose recorded flags leave no KV cache at SGLang's default ``--mem-fraction-static`` (the server could
not have started so) runs at `NO_KV_MEM_FRACTION` and lists that in its ``assumptions`` (docs/accuracy.md §3.10).

Benchmark protocol (docs/accuracy.md §3.1 gives the sources): the one aiconfigurator generates for its SGLang
deployments (``bench_run.sh``: aiperf, chat endpoint, streaming, ``ignore_eos``, zero length spread):

- closed loop when ``concurrency`` is set and ``request_rate`` is blank or ``inf``: ``concurrency`` clients send
  back-to-back requests of ``isl`` prompt and ``osl`` output tokens (random content, nothing hits the prefix
  cache); open loop otherwise: Poisson arrivals at ``request_rate``;
- the server sees ``isl + prompt_overhead_tokens`` prompt tokens: the chat endpoint wraps the prompt in the
  model's chat template (ChatML: ``<|im_start|>user\n`` … ``<|im_end|>\n<|im_start|>assistant\n``, 8 tokens);
- closed loop: ``WARMUP_PER_CLIENT`` × concurrency warm-up requests first (aiperf ``--warmup-request-count``),
  simulated but left out of the statistics; aiperf waits for every warm-up response before its profiling phase
  (`simcore.benchmark_clients.AiperfClosedLoop`), then ``num_requests`` when given, else
  ``REQUESTS_PER_CLIENT`` × concurrency (aiperf ``--num-requests``); open loop: ``num_requests`` or 200, no
  warm-up;
- statistics over the profiled requests, as the client timed them (`simcore.variability` client delays when
  on): mean TTFT and its p10/p50/p90; mean TPOT = mean over requests of (e2e − TTFT)/(osl − 1); mean e2e;
  throughput = completed / (last finish − first arrival), in requests and output tokens per second; the
  lockstep index of the closed loop's arrivals (`simcore.benchmark_clients.lockstep_index`, window half the
  mean TPOT; loops of two rounds or more) with a warning at ``LOCKSTEP_WARNING`` or more.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from simcore.errors import UserError
from simcore.perf.profile import CalibrationProfile
from simcore.server_flags import parse_server_args
from simcore.variability import Variability

if TYPE_CHECKING:
    from simcore.results import StepRecord

# aiconfigurator's generated benchmark (bench_run.sh.j2): --num-requests C × 20, --warmup-request-count C × 2
REQUESTS_PER_CLIENT = 20
WARMUP_PER_CLIENT = 2
# The chat template around a one-turn prompt (ChatML, Qwen family): <|im_start|> user \n … <|im_end|> \n
# <|im_start|> assistant \n. Exact powers of two (1024 × 16 = 2 × 8192) would otherwise fill prefill chunks exactly,
# which a real server never sees.
PROMPT_OVERHEAD_TOKENS = 8
OPEN_LOOP_REQUESTS = 200
# Relative length shape of ShareGPT-style prompts and outputs: 20 quantile midpoints (2.5%, 7.5%, … 97.5%) of each
# length divided by its mean, from the ShareGPT-derived stream ../shared/data/llmservingsim/workloads/
# sharegpt-qwen3-32b-300-sps10.jsonl (MIT) filtered as vLLM's `bench serve` ShareGPT loader filters (prompt 4–1024,
# output >= 4, total <= 2048 tokens; 208 of 300 requests). Regenerate: `python validation/build_gpustack.py --shape`.
# Input CV 0.35; the stream's outputs were regenerated by vLLM (not ShareGPT's own answers), so their spread
# (CV 0.17) is narrower than real ShareGPT answers': a sensitivity case, not a claim about ShareGPT
# (docs/accuracy.md §3.5).
SHAREGPT_SHAPE_INPUT = (0.46, 0.51, 0.6, 0.641, 0.671, 0.699, 0.769, 0.832, 0.884, 0.932, 1.007, 1.061, 1.106, 1.145,
                        1.266, 1.305, 1.415, 1.479, 1.537, 1.68)
SHAREGPT_SHAPE_OUTPUT = (0.791, 0.808, 0.818, 0.831, 0.844, 0.863, 0.885, 0.903, 0.914, 0.929, 0.97, 1.012, 1.075,
                         1.125, 1.167, 1.179, 1.183, 1.193, 1.206, 1.304)
# Maximum-entropy shape for a positive length of which only the mean is known (a benchmark printout's totals):
# the exponential, as 50 quantile midpoints (1%, 3%, … 99%) of Exp(1), renormalized to mean 1. CV 0.97; the
# largest value is 4.6 × the mean, inside bench serve's ShareGPT filter (prompt <= 1024, prompt + output <= 2048)
# for the ~220-token means of its ShareGPT runs.
_EXP_QUANTILES = tuple(-math.log(1.0 - (i + 0.5) / 50) for i in range(50))
EXPONENTIAL_SHAPE = tuple(x / (sum(_EXP_QUANTILES) / 50) for x in _EXP_QUANTILES)
LENGTH_DISTS = ("fixed", "sharegpt", "exponential")
CLIENTS = ("aiperf", "bench_serving", "poisson")
LOCKSTEP_WARNING = 0.5  # lockstep index at or above which a row is flagged (half the clients arrive as one wave)
COLUMNS = ("id", "model", "gpu", "precision", "tp", "ep", "dp_attention", "isl", "osl", "concurrency",
           "request_rate", "num_requests", "sglang_version", "measured_ttft_ms", "measured_tpot_ms",
           "measured_throughput_rps")
METRICS = ("ttft", "tpot", "throughput", "e2e", "ttft_p50", "itl_p50", "output_tps")
# the last three: only where a row measures them (bench_serving printouts); summarized only when some row does
OPTIONAL_METRICS = ("ttft_p50", "itl_p50", "output_tps")
# measured column of each metric (``measured_<name>``)
_MEASURED_COLUMN = {"ttft": "ttft_ms", "tpot": "tpot_ms", "throughput": "throughput_rps", "e2e": "e2e_ms",
                    "ttft_p50": "ttft_p50_ms", "itl_p50": "itl_p50_ms", "output_tps": "output_tokens_per_s"}
_RID = "req-"
# Rows whose recorded flags leave no KV cache although the row's measurements prove the server ran (SGLang refuses to
# start without one: 0.5.9 ``model_executor/model_runner_kv_cache_mixin.py`` ``init_memory_pool`` raises "Not enough
# memory. Please try to increase --mem-fraction-static"): the record is incomplete, the operator raised the fraction.
# Such a row is simulated at this ``--mem-fraction-static`` and says so in its ``assumptions``: the value of the
# public launch script of the only such rows in the project's files (InferenceX
# ``benchmarks/single_node/dsr1_fp8_b200.sh`` @12ba0ae07, TP4: ``--mem-fraction-static 0.95``; docs/accuracy.md
# §3.10). Applied only where the fraction was SGLang's default (not a recorded flag) and the rule's fraction is
# larger; `Protocol.no_kv_mem_fraction` = None skips such rows.
NO_KV_MEM_FRACTION = 0.95


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
    warmup_requests: int | None = None  # optional column: total warm-up requests (None: protocol default)
    length_dist: str = "fixed"  # optional column: "fixed" or "sharegpt" (see LENGTH_DISTS)
    unsupported: str | None = None  # optional column: why the file's author says the row cannot be simulated
    server_args: str | None = None  # optional column: the SGLang launch flags as typed (None: SGLang defaults)
    server_settings: dict[str, Any] = field(default_factory=dict)  # ServerSettings fields from server_args
    client: str | None = None  # optional column: aiperf / bench_serving / poisson (None: by the row's load)
    random_range_ratio: float | None = None  # optional column: bench_serving --random-range-ratio (None: 0.0)
    seed: int | None = None  # optional column: the benchmark client's seed (bench_serving --seed; None: 1)
    # optional column: server tokens per client-counted prompt token (None: 1, client and server tokenize alike)
    server_tokens_per_prompt_token: float | None = None
    # optional column: CPU µs the server's tokenizer manager spends per prompt token it encodes, one prompt at a time
    # (None: not modelled; docs/accuracy.md §3.14, validation/tokenizer_cost.py)
    server_tokenize_us_per_token: float | None = None
    # optional columns written by ``shadowsim validate --deployment as-deployed`` (shadowsim.known_deployments) for a
    # row simulated as its published deployment: which one (config, repo@commit script), and the sentence listed
    # among the row's assumptions (also the label of a recognisable record with no known deployment)
    published_deployment: str | None = None
    deployment_assumption: str | None = None

    @property
    def deployment(self) -> str:
        """How the server is simulated: as deployed (the row's flags) or at SGLang's defaults."""
        return f"as deployed: {self.server_args}" if self.server_args else "SGLang defaults (no server_args)"

    def client_name(self) -> str:
        """The benchmark client: the column, else aiperf for a closed loop and poisson for a rate."""
        if self.client:
            return self.client
        return "aiperf" if self.concurrency is not None and self.request_rate is None else "poisson"


def _num(v: str | None, kind: type, field_name: str, rid: str) -> Any:
    if v is None or v.strip() == "":
        return None
    try:
        return kind(float(v)) if kind is int else kind(v)
    except ValueError:
        raise UserError(field_name, f"row {rid}: {v!r} is not a number") from None


def _length_dist(v: str | None, rid: str) -> str:
    name = (v or "").strip().lower() or "fixed"
    if name not in LENGTH_DISTS:
        raise UserError("length_dist", f"row {rid}: unknown length distribution {name!r}",
                        f"use one of: {', '.join(LENGTH_DISTS)}")
    return name


def _choice(v: str | None, allowed: tuple[str, ...], column: str, rid: str) -> str | None:
    name = (v or "").strip().lower() or None
    if name is not None and name not in allowed:
        raise UserError(column, f"row {rid}: unknown {column} {name!r}", f"use one of: {', '.join(allowed)}")
    return name


def lengths(dist: str, isl: int, osl: int, prompt_overhead_tokens: int = 0) -> tuple[Any, Any]:
    """Prompt and output length specs (`simcore.workload.Lengths`) for a row's distribution name.

    ``fixed``: exactly ``isl + prompt_overhead_tokens`` and ``osl`` tokens. ``sharegpt`` / ``exponential``:
    `Empirical` draws from `SHAREGPT_SHAPE_*` / `EXPONENTIAL_SHAPE` scaled to means ``isl`` and ``osl`` (drawn
    independently: the ShareGPT stream's input/output correlation is 0.07), at least 4 tokens each, each prompt
    plus ``prompt_overhead_tokens``.
    """
    from simcore.workload import Empirical

    if dist == "fixed":
        return isl + prompt_overhead_tokens, osl
    if dist in ("sharegpt", "exponential"):
        shape_in, shape_out = ((SHAREGPT_SHAPE_INPUT, SHAREGPT_SHAPE_OUTPUT) if dist == "sharegpt"
                               else (EXPONENTIAL_SHAPE, EXPONENTIAL_SHAPE))
        # at least 4 tokens each, as bench serve's ShareGPT filter keeps (every request then has a TPOT)
        ins = tuple(max(4, round(q * isl)) + prompt_overhead_tokens for q in shape_in)
        outs = tuple(max(4, round(q * osl)) for q in shape_out)
        return Empirical(ins), Empirical(outs)
    raise UserError("length_dist", f"unknown length distribution {dist!r}", f"use one of: {', '.join(LENGTH_DISTS)}")


def _measured(r: dict[str, str], rid: str) -> dict[str, float | None]:
    """The row's measurements: TTFT, TPOT and throughput always (None when blank), the optional ones (measured
    e2e, median TTFT, median ITL, output tokens/s) only when given."""
    out = {}
    for m, c in _MEASURED_COLUMN.items():
        v = _num(r.get(f"measured_{c}"), float, f"measured_{c}", rid)
        if v is not None or m in ("ttft", "tpot", "throughput"):
            out[m] = v
    return out


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
            measured=_measured(r, rid),
            max_total_tokens=_num(r.get("max_total_tokens"), int, "max_total_tokens", rid),
            warmup_requests=_num(r.get("warmup_requests"), int, "warmup_requests", rid),
            length_dist=_length_dist(r.get("length_dist"), rid),
            unsupported=(r.get("unsupported") or "").strip() or None,
            server_args=" ".join((r.get("server_args") or "").split()) or None,
            server_settings=parse_server_args(r.get("server_args"), f"row {rid}",
                                              tp=_num(r.get("tp"), int, "tp", rid) or 1),
            client=_choice(r.get("client"), CLIENTS, "client", rid),
            random_range_ratio=_num(r.get("random_range_ratio"), float, "random_range_ratio", rid),
            seed=_num(r.get("seed"), int, "seed", rid),
            server_tokens_per_prompt_token=_token_factor(r, rid),
            server_tokenize_us_per_token=_tokenize_cost(r, rid),
            published_deployment=(r.get("published_deployment") or "").strip() or None,
            deployment_assumption=(r.get("deployment_assumption") or "").strip() or None,
        ))
    return rows


def _token_factor(r: dict[str, str], rid: str) -> float | None:
    """The ``server_tokens_per_prompt_token`` column: blank, or a number > 0 on a bench_serving row."""
    f = _num(r.get("server_tokens_per_prompt_token"), float, "server_tokens_per_prompt_token", rid)
    if f is None:
        return None
    if not (f > 0 and math.isfinite(f)):
        raise UserError("server_tokens_per_prompt_token", f"row {rid}: {f!r} is not a number > 0")
    if (r.get("client") or "").strip().lower() != "bench_serving":
        raise UserError("server_tokens_per_prompt_token", f"row {rid}: only read with client bench_serving",
                        "set the row's client column to bench_serving or leave the column blank")
    return f


def _tokenize_cost(r: dict[str, str], rid: str) -> float | None:
    """The ``server_tokenize_us_per_token`` column: blank, or a number >= 0 (µs per prompt token)."""
    f = _num(r.get("server_tokenize_us_per_token"), float, "server_tokenize_us_per_token", rid)
    if f is not None and not (f >= 0 and math.isfinite(f)):
        raise UserError("server_tokenize_us_per_token", f"row {rid}: {f!r} is not a number >= 0")
    return f


def tokenizer_s_per_token(row: Row, p: Protocol) -> float:
    """Seconds of the server's serial tokenizer per prompt token: the protocol's value when given (every row),
    else the row's ``server_tokenize_us_per_token`` column, else 0 (not modelled)."""
    if p.tokenizer_s_per_token is not None:
        return p.tokenizer_s_per_token
    return (row.server_tokenize_us_per_token or 0.0) * 1e-6


@dataclass
class RowResult:
    """Predicted vs measured for one row; errors are absolute percentage errors (None when not measured).

    ``extra``: the other per-row figures (TTFT p10/p50/p90, output tokens/s, lockstep index, warnings);
    ``intervals``: with replicas, p5/p50/p95 over the replicas of every predicted figure.
    """

    row: Row
    predicted: dict[str, float]
    ape: dict[str, float | None] = field(default_factory=dict)
    wall_s: float = 0.0
    requests: int = 0  # measured (non-warm-up, completed) requests behind the statistics
    extra: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        r = self.row
        out: dict[str, Any] = {"id": r.id, "model": r.model, "gpu": r.gpu, "tp": r.tp, "isl": r.isl, "osl": r.osl,
                               "concurrency": r.concurrency, "request_rate": r.request_rate,
                               "deployment": r.deployment, "client": r.client_name()}
        for m in METRICS:
            col = _MEASURED_COLUMN[m]
            out[f"predicted_{col}"] = self.predicted.get(m)
            out[f"measured_{col}"] = measured_value(r, m)
            out[f"{m}_ape_pct"] = self.ape.get(m)
        out.update(self.extra)
        if self.intervals:
            out["intervals"] = self.intervals
        return out


def measured_value(row: Row, metric: str) -> float | None:
    """The row's measurement of ``metric``; e2e, unless measured, is derived as TTFT + TPOT × (osl − 1) for fixed
    lengths."""
    if metric != "e2e" or row.measured.get("e2e") is not None:
        return row.measured.get(metric)
    ttft, tpot = row.measured.get("ttft"), row.measured.get("tpot")
    if ttft is None or tpot is None or row.length_dist != "fixed" or row.osl is None:
        return None
    return ttft + tpot * (row.osl - 1)


def weighted_median(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Median of weighted samples (inverted-CDF rule, as `simcore.results` percentiles); NaN when empty."""
    if len(values) == 0:
        return float("nan")
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if not weights else np.asarray(weights, dtype=float)
    order = np.argsort(v, kind="stable")
    cw = np.cumsum(w[order])
    return float(v[order][min(int(np.searchsorted(cw, 0.5 * cw[-1], side="left")), len(v) - 1)])


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
        elif m not in OPTIONAL_METRICS:
            out[m] = {"mape": None, "median_ape": None, "p90_ape": None, "n": 0}
    return out


def unsupported_reason(row: Row) -> str | None:
    """Why a row cannot be simulated faithfully, or None."""
    if row.unsupported:
        return row.unsupported
    if row.isl is None or row.osl is None or row.isl < 1 or row.osl < 1:
        return "isl and osl must be positive"
    if row.concurrency is None and row.request_rate is None and row.client_name() != "bench_serving":
        # (bench_serving at request rate inf sends every prompt at once: an offline run)
        return "neither concurrency nor request_rate given"
    return None


@dataclass(frozen=True)
class Protocol:
    """How the benchmark client ran (see the module docstring); the defaults are aiconfigurator's."""

    requests_per_client: int = REQUESTS_PER_CLIENT
    warmup_per_client: int = WARMUP_PER_CLIENT
    prompt_overhead_tokens: int = PROMPT_OVERHEAD_TOKENS
    length_dist: str | None = None  # overrides every row's length_dist (sensitivity runs); None: the row's
    # host-side serial stages of the server (ServerSettings fields of the same names, seconds; 0 = off);
    # docs/accuracy.md §3.5 tests them and leaves them off by default
    output_path_s_per_step: float = 0.0
    output_path_s_per_token: float = 0.0
    tokenizer_s_per_request: float = 0.0
    # per prompt token the server's tokenizer encodes, for every row (None: the row's server_tokenize_us_per_token
    # column, else 0; docs/accuracy.md §3.14)
    tokenizer_s_per_token: float | None = None
    client: str | None = None  # overrides every row's client (None: the row's column, else by its load)
    warmup_barrier: bool = True  # aiperf: profiling starts when every warm-up response is back
    # flags for rows without a server_args column (None: SGLang defaults); may say {isl}, {isl+1500}, {osl}, or be
    # GENERATOR ("aiconfigurator": the generator's flags by the row's version)
    server_args: str | None = None
    # as-deployed / recorded: the row's column, else server_args (the two differ before simcore: as-deployed rows
    # recognised as a published deployment carry its columns, shadowsim.known_deployments.as_deployed); defaults:
    # SGLang's defaults for every row (column ignored); flags: server_args for every row (column ignored)
    deployment: str = "as-deployed"
    variability: Variability | None = None  # None / off: the deterministic simulator (docs/accuracy.md §3.7)
    # the fraction a row whose recorded flags leave no KV cache is simulated at (`NO_KV_MEM_FRACTION`); None: skip it
    no_kv_mem_fraction: float | None = NO_KV_MEM_FRACTION

    def __post_init__(self) -> None:
        if self.requests_per_client < 1:
            raise UserError("--requests-per-client", f"must be >= 1, got {self.requests_per_client}")
        if self.warmup_per_client < 0:
            raise UserError("--warmup-per-client", f"must be >= 0, got {self.warmup_per_client}")
        if self.prompt_overhead_tokens < 0:
            raise UserError("--prompt-overhead-tokens", f"must be >= 0, got {self.prompt_overhead_tokens}")
        for name in ("output_path_s_per_step", "output_path_s_per_token", "tokenizer_s_per_request",
                     "tokenizer_s_per_token"):
            value = getattr(self, name) or 0.0
            if not (0.0 <= value < math.inf):  # NaN fails too
                raise UserError("--" + name.replace("_s_", "_us_").replace("_", "-"),
                                f"must be a finite number >= 0, got {value * 1e6:g} µs")
        if self.length_dist is not None and self.length_dist not in LENGTH_DISTS:
            raise UserError("--length-dist", f"unknown length distribution {self.length_dist!r}",
                            f"use one of: {', '.join(LENGTH_DISTS)}")
        if self.client is not None and self.client not in CLIENTS:
            raise UserError("--client", f"unknown client {self.client!r}", f"use one of: {', '.join(CLIENTS)}")
        if self.no_kv_mem_fraction is not None and not (0.0 < self.no_kv_mem_fraction < 1.0):
            raise UserError("--no-kv-mem-fraction",
                            f"must be a fraction in (0, 1) or off, got {self.no_kv_mem_fraction:g}")
        if self.deployment not in DEPLOYMENTS:
            raise UserError("--deployment", f"unknown deployment {self.deployment!r}",
                            f"use one of: {', '.join(DEPLOYMENTS)}")
        if self.server_args is not None and self.server_args != GENERATOR:
            parse_server_args(expand_row_flags(self.server_args, 1024, 1024), "--server-args")  # fail early


# aiconfigurator's deployment generator (ai-dynamo/aiconfigurator src/aiconfigurator/generator/rule_plugin/
# sglang.rule and benchmark/sglang.rule, git history): SGLang rules since 2025-12-04 (#144: agg max_prefill_tokens
# = isl + 1500), --enable-mixed-chunk since 2026-01-19 (#257/#258). A version gives the earliest date a run could
# have had: wheels of 0.5.6 were built 2025-12-03, of 0.5.8 2026-01-23 (docs/accuracy.md §3.1).
GENERATOR = "aiconfigurator"


def generator_server_args(isl: int, sglang_version: str) -> str | None:
    """The flags aiconfigurator's generator writes for an aggregated SGLang deployment benchmarked at ``isl``,
    by the earliest date the row's version allows: None before 0.5.6 (released before the generator's SGLang
    rules; SGLang defaults), ``--max-prefill-tokens isl+1500`` for 0.5.6–0.5.7, and ``--enable-mixed-chunk`` as
    well from 0.5.8 (released after 2026-01-19)."""
    from simcore.settings import _version_tuple

    v = _version_tuple(sglang_version)
    if v < (0, 5, 6):
        return None
    flags = f"--max-prefill-tokens {isl + 1500}"
    return ("--enable-mixed-chunk " + flags) if v >= (0, 5, 8) else flags


DEPLOYMENTS = ("as-deployed", "recorded", "defaults", "flags")
_ROW_FLAGS = ("as-deployed", "recorded")  # the modes that simulate a row's server_args column


def expand_row_flags(text: str, isl: int, osl: int) -> str:
    """``{isl}``, ``{osl}``, ``{isl+N}`` / ``{osl+N}`` in flags → the row's numbers (one flag string for a file
    whose rows differ in lengths, e.g. the generator's ``--max-prefill-tokens {isl+1500}``)."""
    def sub(m: "re.Match[str]") -> str:
        base = isl if m.group(1) == "isl" else osl
        return str(base + int(m.group(2) or 0))

    out = re.sub(r"\{(isl|osl)(?:\+(\d+))?\}", sub, text)
    if "{" in out or "}" in out:
        raise UserError("--server-args", f"cannot expand {text!r}", "use {isl}, {osl}, {isl+N} or {osl+N}")
    return out


def _row_settings(row: Row, p: Protocol) -> tuple[dict[str, Any], str | None]:
    """ServerSettings fields of the row as deployed, and the flags they came from (None: SGLang defaults)."""
    if p.deployment == "defaults":
        return {}, None
    if row.server_args and p.deployment in _ROW_FLAGS:
        return dict(row.server_settings), row.server_args
    if not p.server_args:
        return {}, None
    if p.server_args == GENERATOR:
        text = generator_server_args(row.isl, row.sglang_version)
        return (parse_server_args(text, f"row {row.id}"), text) if text else ({}, None)
    text = expand_row_flags(p.server_args, row.isl, row.osl)
    return parse_server_args(text, f"row {row.id} (--server-args)", tp=row.tp), text


def _workload(row: Row, p: Protocol, seed: int) -> tuple[Any, int, str]:
    """(workload, number of warm-up requests to leave out, client name)."""
    from simcore.benchmark_clients import AiperfClosedLoop, BenchServingOpenLoop
    from simcore.workload import ClosedLoop, OpenLoop

    client = p.client or row.client_name()
    if client != "bench_serving" and row.server_tokens_per_prompt_token not in (None, 1.0):
        raise UserError("server_tokens_per_prompt_token", f"row {row.id}: only read with client bench_serving, "
                        f"and this run's client is {client}", "drop --client or the column")
    if client == "bench_serving":
        rate = float("inf") if row.request_rate is None else float(row.request_rate)
        n = row.num_requests or OPEN_LOOP_REQUESTS
        ratio = 0.0 if row.random_range_ratio is None else row.random_range_ratio
        # the row's seed is bench_serving's --seed (1 by default); replicas add their offset to it
        wl = BenchServingOpenLoop(rate, n, row.isl, row.osl, range_ratio=ratio, seed=(1 if row.seed is None else row.seed) + seed,
                                  sglang_version=row.sglang_version, max_concurrency=row.concurrency,
                                  prompt_overhead_tokens=0, rid_prefix=_RID,
                                  warmup_requests=row.warmup_requests or 0,
                                  server_tokens_per_prompt_token=row.server_tokens_per_prompt_token or 1.0)
        return wl, row.warmup_requests or 0, client
    prompt, output = lengths(p.length_dist or row.length_dist, row.isl, row.osl, p.prompt_overhead_tokens)
    if client == "aiperf" and row.concurrency is not None:
        n = row.num_requests or p.requests_per_client * row.concurrency
        warmup = p.warmup_per_client * row.concurrency if row.warmup_requests is None else row.warmup_requests
        if p.warmup_barrier:
            return AiperfClosedLoop(row.concurrency, warmup, n, prompt, output, seed, rid_prefix=_RID), warmup, client
        return ClosedLoop(row.concurrency, warmup + n, prompt, output, seed, rid_prefix=_RID), warmup, client
    n = row.num_requests or OPEN_LOOP_REQUESTS
    return OpenLoop(float(row.request_rate or 1.0), n, prompt, output, seed, rid_prefix=_RID), 0, "poisson"


def _no_kv_fallback(exc: UserError, row: Row, p: Protocol, flags: dict[str, Any],
                    settings_of: Callable[[dict[str, Any]], Any], model: Any, gpu: Any,
                    precision: str) -> tuple[Any, Any, str]:
    """The `NO_KV_MEM_FRACTION` policy: (settings, KV pool, the assumption as one line) for a row whose recorded
    flags leave no KV cache; re-raises ``exc`` where the policy does not apply (off, a recorded fraction, no
    measurement, or the rule's fraction is no larger or leaves no KV cache either)."""
    from simcore.memory import size_kv_pool

    frac = p.no_kv_mem_fraction
    measured = any(row.measured.get(m) is not None for m in METRICS)
    if exc.field != "mem_fraction_static" or frac is None or "mem_fraction_static" in flags or not measured:
        raise exc
    from simcore.memory import mem_fraction_static_of

    was = mem_fraction_static_of(model, gpu, settings_of(flags))
    if frac <= was:
        raise exc
    why = str(exc).removeprefix(f"{exc.field}: ").removesuffix(f" ({exc.hint})" if exc.hint else "")
    settings = settings_of(dict(flags, mem_fraction_static=frac))
    try:
        pool = size_kv_pool(model, gpu, settings, precision)
    except UserError as again:
        raise UserError("mem_fraction_static", f"{why} at the default {was:.3f}, and at the no-KV rule's "
                        f"--mem-fraction-static {frac:g} too") from again
    return settings, pool, (
        f"--mem-fraction-static {frac:g} assumed (NO_KV_MEM_FRACTION, docs/accuracy.md §3.10): the recorded flags "
        f"leave no KV cache at SGLang's default {was:.3f} ({why}) but the row is measured, so the server ran; "
        f"{pool.max_total_num_tokens} KV tokens at {frac:g}")


def simulate_row(row: Row, *, profile: CalibrationProfile | None = None, backend: str = "auto",
                 seed: int = 0, protocol: Protocol | None = None,
                 observer: Callable[[StepRecord], None] | None = None,
                 moe_routing: str = "power_law") -> RowResult:
    """Run the row's benchmark in the simulator. Raises UserError when the model/GPU/precision is unknown.

    ``observer`` receives every forward pass's `StepRecord` (simcore.engine.simulate), e.g. for
    `simcore.perf.decode_split`. ``moe_routing``: the MoE tables' routing distribution for rows with expert
    parallelism or multi-node TP (`simcore.perf.moe_parallel.ParallelLayout.routing`; ``power_law``, the
    default, or ``balanced``: a sensitivity case, validation/moe_routing_test.py)."""
    from simcore.benchmark_clients import lockstep_index
    from simcore.engine import simulate
    from simcore.frozen_model import FieldError
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.perf import ParallelLayout, build_latency_model
    from simcore.settings import ServerSettings, resolve
    from simcore.speculative import build_speculative
    from simcore.variability import ClientDelays, DelayedWorkload, client_records, with_variability

    model = load_model(row.model)
    gpu = load_gpu(row.gpu)
    precision = row.precision or model.default_precision
    p = protocol or Protocol()
    flags, flags_text = _row_settings(row, p)
    if row.max_total_tokens is not None and "max_total_tokens" not in flags:
        flags["max_total_tokens"] = row.max_total_tokens
    if row.ep > 1 and "ep_size" not in flags:  # the row's ep column is SGLang's --ep-size
        flags["ep_size"] = row.ep
    if row.dp_attention > 1 and "dp_size" not in flags:  # the column: --enable-dp-attention --dp-size N
        flags.update(dp_size=row.dp_attention, enable_dp_attention=True)
    def settings_of(fields: dict[str, Any]) -> ServerSettings:
        try:
            return resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp,
                                          output_path_s_per_step=p.output_path_s_per_step,
                                          output_path_s_per_token=p.output_path_s_per_token,
                                          tokenizer_s_per_request=p.tokenizer_s_per_request,
                                          tokenizer_s_per_token=tokenizer_s_per_token(row, p), **fields),
                           gpu.memory_bytes)
        except FieldError as exc:
            err = exc.errors()[0]
            raise UserError("server_args", f"row {row.id}: {flags_text}: {err['msg']}") from None

    settings = settings_of(flags)
    assumptions: list[str] = [row.deployment_assumption] if row.deployment_assumption else []
    try:
        pool = size_kv_pool(model, gpu, settings, precision)
    except UserError as exc:
        settings, pool, assumption = _no_kv_fallback(exc, row, p, flags, settings_of, model, gpu, precision)
        assumptions.append(assumption)
    from simcore.perf.profile import default_profile

    profile = (profile if profile is not None else default_profile()).for_version(settings.sglang_version)
    latency = build_latency_model(model, gpu, row.tp, precision, backend=backend, profile=profile,
                                  kv_cache_dtype=settings.kv_cache_dtype,
                                  parallel=ParallelLayout.from_settings(settings, gpu, routing=moe_routing))
    if settings.enable_dp_attention:  # simcore.dp_attention: attention per rank, MLP/MoE on the gathered tokens
        from simcore.dp_attention import build_dp_attention_latency

        if p.variability is not None and p.variability.jitters_steps:
            raise UserError("--variability", f"row {row.id}: step jitter with DP attention is not modelled",
                            "use --variability off for DP-attention rows")
        latency = build_dp_attention_latency(model, gpu, settings, precision, backend=backend, profile=profile)
    latency = with_variability(latency, p.variability, seed)
    # speculative decoding (--speculative-* in server_args): the draft priced on the same GPUs, TP, precision
    speculative = build_speculative(settings, model, latency, lambda m: build_latency_model(
        m, gpu, row.tp, precision, backend=backend, profile=profile, kv_cache_dtype=settings.kv_cache_dtype,
        parallel=ParallelLayout.from_settings(settings, gpu, routing=moe_routing)), seed)
    if speculative is not None:  # it prices the steps: target + draft
        latency = speculative
        if settings.enable_dp_attention:  # every rank's draft + verify in lockstep (simcore.dp_attention)
            from simcore.dp_attention import build_dp_speculative_latency

            latency = build_dp_speculative_latency(speculative, model, gpu, settings, precision, backend=backend,
                                                   profile=profile)
    workload, warmup, client = _workload(row, p, seed)
    delays = ClientDelays.from_variability(p.variability, seed)
    if delays is not None:
        workload = DelayedWorkload(workload, delays)
    res = simulate(settings, latency, workload, kv_capacity_tokens=pool.max_total_num_tokens, seed=seed,
                   max_running_requests=pool.max_running_requests, context_len=pool.context_len,
                   speculative=speculative, observer=observer)
    recs = res.records if delays is None else client_records(res.records, workload.offsets)
    # requests are numbered in sending order, so the warm-up ones are the first `warmup`
    recs = [r for r in recs if not r.aborted and int(r.rid[len(_RID):]) >= warmup]
    if not recs:
        raise UserError("MEASUREMENTS", f"row {row.id}: no request completed in the simulation",
                        "the model may not fit on this GPU/TP")
    span = max(r.finish_s for r in recs) - min(r.arrival_s for r in recs)
    tpots = [r.tpot_s for r in recs if r.tpot_s is not None]
    ttfts_ms = np.asarray([r.ttft_s for r in recs]) * 1e3
    p10, p50, p90 = (float(x) for x in np.percentile(ttfts_ms, [10, 50, 90]))
    out_tps = sum(r.output_len for r in recs) / span if span > 0 else float("nan")
    pred = {
        "ttft": float(ttfts_ms.mean()),
        "tpot": float(np.mean(tpots)) * 1e3 if tpots else float("nan"),
        "throughput": len(recs) / span if span > 0 else float("nan"),
        "e2e": float(np.mean([r.e2e_s for r in recs])) * 1e3,
        "ttft_p50": p50,
        # every token gap of every request (warm-up included: only open-loop rows measure it, and they have none)
        "itl_p50": weighted_median(res.itl_values_s, res.itl_weights) * 1e3,
        "output_tps": out_tps,
    }
    extra: dict[str, Any] = {
        "predicted_ttft_p10_ms": p10, "predicted_ttft_p50_ms": p50, "predicted_ttft_p90_ms": p90,
        "predicted_output_tokens_per_s": out_tps,
        "lockstep_index": None, "warnings": [], "assumptions": assumptions, "client": client,
        "published_deployment": row.published_deployment,
        "deployment": (f"as published ({row.published_deployment}): {flags_text}" if flags_text and
                       row.published_deployment else f"as deployed: {flags_text}") if flags_text else (
            "SGLang defaults (server_args ignored)" if row.server_args else "SGLang defaults (no server_args)"),
        "server_args_source": None if flags_text is None else (
            ("published deployment" if row.published_deployment else "column")
            if row.server_args and p.deployment in _ROW_FLAGS else "--server-args"),
    }
    # a loop of at least two rounds (a burst of one request per client is one wave by construction)
    if client == "aiperf" and row.concurrency and tpots and len(recs) >= 2 * row.concurrency:
        idx = lockstep_index([r.arrival_s for r in recs], row.concurrency, window_s=float(np.mean(tpots)) / 2)
        extra["lockstep_index"] = idx
        if idx >= LOCKSTEP_WARNING and row.concurrency > 1:
            extra["warnings"].append(
                f"simulated clients move in lockstep waves (index {idx:.2f}: on average {idx:.0%} of the "
                f"{row.concurrency} clients send together); TTFT/TPOT split depends on it")
    return RowResult(row, pred, {m: ape(pred[m], measured_value(row, m)) for m in METRICS},
                     requests=len(recs), extra=extra)


def _interval_of(results: list[RowResult]) -> dict[str, Any]:
    from simcore.variability import replica_intervals

    figures = [dict({f"predicted_{_MEASURED_COLUMN[m]}": r.predicted.get(m) for m in METRICS},
                    **{k: v for k, v in r.extra.items() if isinstance(v, (int, float))}) for r in results]
    return replica_intervals(figures)


def validate(rows: list[Row], *, profile: CalibrationProfile | None = None, backend: str = "auto",
             seed: int = 0, protocol: Protocol | None = None,
             simulate_fn: Callable[..., RowResult] | None = None,
             progress: Callable[[int, int, Row], None] | None = None, replicas: int = 1) -> dict[str, Any]:
    """Simulate every row; a row that cannot be simulated is skipped with its reason, never raised.

    Returns ``{"rows": [...], "summary": {metric: {mape, median_ape, p90_ape, n}}, "skipped": [{id, reason}]}``,
    and with ``replicas`` > 1 also ``"intervals"``: p5/p50/p95 over the replicas (seeds ``seed … seed +
    replicas − 1``) of every summary figure; each row then carries the intervals of its predicted figures. The
    rows and summary are those of the first replica (``seed``), so ``replicas=1`` is the plain run.
    ``simulate_fn`` replaces `simulate_row` (tests).
    """
    from simcore.variability import replica_intervals, replica_seeds

    fn = simulate_fn or simulate_row
    seeds = replica_seeds(seed, replicas)
    results: list[RowResult] = []
    per_row: list[list[RowResult]] = []
    summaries: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for i, row in enumerate(rows):
        if progress is not None:
            progress(i, len(rows), row)
        reason = unsupported_reason(row)
        if reason is None:
            try:
                runs = [fn(row, profile=profile, backend=backend, seed=s, protocol=protocol) for s in seeds]
                results.append(runs[0])
                per_row.append(runs)
                continue
            except UserError as exc:
                reason = str(exc)
        skipped.append({"id": row.id, "reason": reason})
    out: dict[str, Any] = {"rows": [], "summary": error_summary(results), "skipped": skipped}
    if replicas > 1:
        for runs in per_row:
            runs[0].intervals = _interval_of(runs)
        summaries = [error_summary([runs[k] for runs in per_row]) for k in range(replicas)]
        out["intervals"] = replica_intervals(summaries) if summaries and per_row else {}
        out["seeds"] = seeds
    out["rows"] = [r.to_dict() for r in results]
    out["_results"] = results
    return out
