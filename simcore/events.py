"""shadowsim's trace events: one frozen pydantic model per kind, in one discriminated union on ``kind``.

Every wire format SGLang emits (log lines, metrics files, OTLP spans, ZMQ feeds, trace files) is translated into
these events by ``streams.adapters``; the simulator core reads nothing else. Units are in the field names:
``_s`` seconds, ``_ts`` Unix seconds (UTC, float), ``_tokens`` token counts, ``_tok_s`` tokens per second.

Common fields on every event:

* ``schema_version`` — 1. A consumer rejects versions it does not know instead of guessing.
* ``kind`` — the discriminator.
* ``instance_id`` — the SGLang server instance the event belongs to ("default" when the source does not say).
* ``ts`` — event time in Unix seconds (UTC). For log lines the line's timestamp; for finished requests the finish.
* ``source`` — file name or Kafka topic the event was read from (informational).
* ``event_id`` — a deterministic id (e.g. ``"file.log:123"`` or ``"rid:finished"``) so a re-read of the same input
  yields the same ids and consumers can de-duplicate.

This module is pure: no I/O, no clock.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1

# Non-negative ints/floats: counts and durations can never be negative on the wire; rejecting them early keeps
# garbage out of the simulator.
NonNegInt = Annotated[int, Field(ge=0)]
NonNegFloat = Annotated[float, Field(ge=0.0)]


class _EventBase(BaseModel):
    """Fields every event carries."""

    # allow_inf_nan=False: JSON cannot carry them and no SGLang quantity is infinite; reject at the edge.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    schema_version: Literal[1] = 1
    instance_id: str = "default"
    ts: float = Field(description="event time, Unix seconds (UTC)")
    source: str | None = Field(default=None, description="file or topic the event was read from")
    event_id: str | None = Field(default=None, description="deterministic id for de-duplication")


class ServerConfig(_EventBase):
    """Resolved server settings, from startup log lines, ``/server_info``, or Prometheus constants. All optional:
    each source knows only some of them; consumers merge successive ``server_config`` events field by field."""

    kind: Literal["server_config"] = "server_config"
    model: str | None = None
    sglang_version: str | None = None
    tp_size: NonNegInt | None = None
    dp_size: NonNegInt | None = None
    pp_size: NonNegInt | None = None
    ep_size: NonNegInt | None = None
    page_size: NonNegInt | None = None
    max_total_num_tokens: NonNegInt | None = Field(default=None, description="KV pool capacity, tokens")
    chunked_prefill_size: int | None = Field(default=None, description="tokens; -1 or None = disabled")
    max_prefill_tokens: NonNegInt | None = None
    max_running_requests: NonNegInt | None = None
    context_len: NonNegInt | None = Field(default=None, description="tokens")
    schedule_policy: str | None = None
    mem_fraction_static: float | None = None
    kv_cache_dtype: str | None = None
    gpu: str | None = None
    disable_radix_cache: bool | None = None
    enable_mixed_chunk: bool | None = None
    disable_overlap_schedule: bool | None = None
    cuda_graph_max_bs: NonNegInt | None = None
    available_gpu_mem_gb: float | None = Field(default=None, description="free GPU memory after KV allocation, GB")
    kv_cache_size_gb: float | None = Field(default=None, description="K size + V size from 'KV Cache is allocated', GB")
    tp_rank: NonNegInt | None = None
    dp_rank: NonNegInt | None = None


class RequestArrived(_EventBase):
    """A request entered the server (``ts`` = arrival). From trace files, ``--log-requests`` Receive lines,
    OTLP root spans, metrics-file lines (``request_received_ts``)."""

    kind: Literal["request_arrived"] = "request_arrived"
    request_id: str
    prompt_tokens: NonNegInt
    token_ids: list[int] | None = None
    block_hashes: list[int] | None = Field(default=None, description="one hash per prefix block (Mooncake)")
    block_size_tokens: NonNegInt | None = Field(default=None, description="tokens per block_hashes entry")
    max_new_tokens: NonNegInt | None = None
    ignore_eos: bool = False
    priority: int | None = None
    output_tokens_hint: NonNegInt | None = Field(
        default=None, description="eventual output length in tokens, when a trace knows it"
    )


class RequestFirstToken(_EventBase):
    """The first output token of a request was produced (``ts`` = first-token time)."""

    kind: Literal["request_first_token"] = "request_first_token"
    request_id: str
    ttft_s: NonNegFloat = Field(description="time to first token, seconds")


class RequestFinished(_EventBase):
    """A request finished (``ts`` = finish time)."""

    kind: Literal["request_finished"] = "request_finished"
    request_id: str
    prompt_tokens: NonNegInt
    output_tokens: NonNegInt
    cached_tokens: NonNegInt | None = None
    ttft_s: NonNegFloat | None = None
    e2e_s: NonNegFloat | None = None
    queue_time_s: NonNegFloat | None = None
    num_retractions: NonNegInt | None = None
    arrival_ts: float | None = Field(default=None, description="arrival time, Unix seconds")
    finish_reason: str | None = None
    forward_s: NonNegFloat | None = Field(default=None, description="first forward entry -> finish, seconds")


class PrefillBatch(_EventBase):
    """One ``Prefill batch`` scheduler log line: a prefill (or mixed) batch was run."""

    kind: Literal["prefill_batch"] = "prefill_batch"
    new_seqs: NonNegInt
    new_tokens: NonNegInt
    cached_tokens: NonNegInt
    token_usage: NonNegFloat | None = Field(default=None, description="KV pool fraction in use, 0..1")
    swa_token_usage: NonNegFloat | None = None
    mamba_usage: NonNegFloat | None = None
    running_reqs: NonNegInt | None = None
    queue_reqs: NonNegInt | None = None
    pending_tokens: NonNegInt | None = None
    cache_hit_rate: NonNegFloat | None = Field(default=None, description="0..1 (old logs print a percent)")
    input_throughput_tok_s: NonNegFloat | None = None
    cuda_graph: bool | None = None
    forward_iter: NonNegInt | None = None
    dp_rank: NonNegInt | None = None
    tp_rank: NonNegInt | None = None
    pp_rank: NonNegInt | None = None
    ep_rank: NonNegInt | None = None


class DecodeBatch(_EventBase):
    """One ``Decode batch`` scheduler log line (every ``--decode-log-interval`` decode steps)."""

    kind: Literal["decode_batch"] = "decode_batch"
    running_reqs: NonNegInt
    kv_tokens: NonNegInt | None = Field(default=None, description="'#token' (or '#full token'): KV tokens used")
    token_usage: NonNegFloat | None = None
    swa_tokens: NonNegInt | None = None
    swa_token_usage: NonNegFloat | None = None
    gen_throughput_tok_s: NonNegFloat | None = None
    queue_reqs: NonNegInt | None = None
    cuda_graph: bool | None = None
    accept_len: NonNegFloat | None = Field(default=None, description="speculative decoding mean accept length")
    accept_rate: NonNegFloat | None = None
    retracted_reqs: NonNegInt | None = Field(default=None, description="PD-decode '#retracted-req'")
    forward_iter: NonNegInt | None = None
    dp_rank: NonNegInt | None = None
    tp_rank: NonNegInt | None = None
    pp_rank: NonNegInt | None = None
    ep_rank: NonNegInt | None = None


class Retraction(_EventBase):
    """Decode ran out of KV memory and requests were retracted (preempted back to the queue)."""

    kind: Literal["retraction"] = "retraction"
    num_retracted: NonNegInt | None = None
    new_tokens_gained: NonNegInt | None = None
    new_token_ratio: NonNegFloat | None = Field(default=None, description="ratio after the retraction")
    old_new_token_ratio: NonNegFloat | None = Field(default=None, description="ratio before the retraction")
    request_id: str | None = None
    dp_rank: NonNegInt | None = None
    tp_rank: NonNegInt | None = None


class ForwardPass(_EventBase):
    """One GPU forward with its batch shape and measured time (forward-pass metrics, OTLP ``schedule`` events)."""

    kind: Literal["forward_pass"] = "forward_pass"
    forward_mode: str = Field(description="'prefill', 'decode', 'mixed', 'extend', 'idle', ...")
    batch_size: NonNegInt
    num_extend_tokens: NonNegInt = Field(description="new (uncached) prompt tokens computed in this forward")
    num_cached_tokens: NonNegInt | None = None
    sum_kv_tokens: NonNegInt | None = Field(default=None, description="sum of KV lengths attended by the batch")
    duration_s: NonNegFloat = Field(description="GPU time of the forward, seconds")
    num_decode_reqs: NonNegInt | None = None
    num_prefill_reqs: NonNegInt | None = None
    queued_reqs: NonNegInt | None = None
    dp_rank: NonNegInt | None = None
    forward_iter: NonNegInt | None = None


class KvStored(_EventBase):
    """KV blocks were inserted in the radix tree (``BlockStored``)."""

    kind: Literal["kv_stored"] = "kv_stored"
    block_hashes: list[int]
    parent_block_hash: int | None = None
    token_ids: list[int] | None = None
    block_size_tokens: NonNegInt | None = None
    medium: str | None = None
    dp_rank: NonNegInt | None = None


class KvRemoved(_EventBase):
    """KV blocks were evicted from the radix tree (``BlockRemoved``); ``block_hashes`` empty + ``all_cleared``
    for ``AllBlocksCleared``."""

    kind: Literal["kv_removed"] = "kv_removed"
    block_hashes: list[int]
    all_cleared: bool = False
    medium: str | None = None
    dp_rank: NonNegInt | None = None


class MetricsSnapshot(_EventBase):
    """One scrape of SGLang's Prometheus ``/metrics`` (gauges and counters at ``ts``). Gauges are stale between
    scheduler reports (see sglang-internals 5.2); counters are cumulative since server start."""

    kind: Literal["metrics_snapshot"] = "metrics_snapshot"
    model: str | None = None
    running_reqs: NonNegFloat | None = None
    queue_reqs: NonNegFloat | None = None
    token_usage: NonNegFloat | None = None
    num_used_tokens: NonNegFloat | None = None
    gen_throughput_tok_s: NonNegFloat | None = None
    cache_hit_rate: NonNegFloat | None = None
    prompt_tokens_total: NonNegFloat | None = None
    generation_tokens_total: NonNegFloat | None = None
    num_requests_total: NonNegFloat | None = None
    ttft_count: NonNegFloat | None = None
    ttft_sum_s: NonNegFloat | None = None
    e2e_count: NonNegFloat | None = None
    e2e_sum_s: NonNegFloat | None = None
    dp_rank: NonNegInt | None = None
    tp_rank: NonNegInt | None = None


class BenchmarkSummary(_EventBase):
    """The summary of one ``sglang.bench_serving`` run (console block or ``--output-file`` JSON line)."""

    kind: Literal["benchmark_summary"] = "benchmark_summary"
    backend: str | None = None
    request_rate: float | None = Field(default=None, description="req/s; None = inf (all at t=0) or trace")
    max_concurrency: NonNegInt | None = None
    completed: NonNegInt | None = None
    duration_s: NonNegFloat | None = None
    total_input_tokens: NonNegInt | None = None
    total_output_tokens: NonNegInt | None = None
    request_throughput_req_s: NonNegFloat | None = None
    input_throughput_tok_s: NonNegFloat | None = None
    output_throughput_tok_s: NonNegFloat | None = None
    mean_e2e_latency_s: NonNegFloat | None = None
    median_e2e_latency_s: NonNegFloat | None = None
    mean_ttft_s: NonNegFloat | None = None
    median_ttft_s: NonNegFloat | None = None
    p99_ttft_s: NonNegFloat | None = None
    mean_tpot_s: NonNegFloat | None = None
    median_tpot_s: NonNegFloat | None = None
    p99_tpot_s: NonNegFloat | None = None
    mean_itl_s: NonNegFloat | None = None
    median_itl_s: NonNegFloat | None = None
    p99_itl_s: NonNegFloat | None = None
    concurrency: NonNegFloat | None = None


EVENT_CLASSES: tuple[type[_EventBase], ...] = (
    ServerConfig,
    RequestArrived,
    RequestFirstToken,
    RequestFinished,
    PrefillBatch,
    DecodeBatch,
    Retraction,
    ForwardPass,
    KvStored,
    KvRemoved,
    MetricsSnapshot,
    BenchmarkSummary,
)

Event = Annotated[
    Union[
        ServerConfig,
        RequestArrived,
        RequestFirstToken,
        RequestFinished,
        PrefillBatch,
        DecodeBatch,
        Retraction,
        ForwardPass,
        KvStored,
        KvRemoved,
        MetricsSnapshot,
        BenchmarkSummary,
    ],
    Field(discriminator="kind"),
]

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)

#: kind string -> concrete class, for adapters that know the kind and validate the class directly (faster).
KIND_TO_CLASS: dict[str, type[_EventBase]] = {
    cls.model_fields["kind"].default: cls for cls in EVENT_CLASSES  # type: ignore[misc]
}
EVENT_KINDS: tuple[str, ...] = tuple(KIND_TO_CLASS)


def parse_event(raw: bytes | str | dict[str, Any]) -> Event:
    """Validate one event from canonical JSON (bytes/str) or a dict. Raises ``pydantic.ValidationError``."""
    if isinstance(raw, dict):
        return EVENT_ADAPTER.validate_python(raw)
    return EVENT_ADAPTER.validate_json(raw)


def event_to_json(ev: Event) -> bytes:
    """Canonical JSON bytes of an event (``None`` fields left out to keep the wire small; defaults kept so the
    ``kind`` and ``schema_version`` are always present)."""
    return ev.model_dump_json(exclude_none=True).encode()


def event_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the ``Event`` union."""
    schema = EVENT_ADAPTER.json_schema()
    schema.setdefault("title", "shadowsim Event")
    schema.setdefault("$schema", "https://json-schema.org/draft/2020-12/schema")
    return schema
