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

# Bounds (issue 11): every field has a range, so that no schema-valid record can stop or swamp a consumer (a count
# beyond float range, ``ts: 1e308``, ``#new-seq: 1000000000``, a TP size of 0). The limits are far beyond any real
# SGLang server and are documented with their units in docs/events.md ("Bounds").
MAX_TS = 1e10  #: Unix seconds (year 2286)
#: Unix seconds: inputs without a date start at 0 (1970-01-01), and an arrival computed back from such a finish
#: (finish − e2e) lies up to one request duration before it
MIN_TS = -7 * 86400.0
MAX_TOKENS = 10**8  #: token counts of one request or one batch
MAX_KV_TOKENS = 10**10  #: tokens of a KV pool
MAX_BATCH_REQS = 65536  #: requests in one batch (new, running, decoded in one step)
MAX_QUEUE_REQS = 10**7  #: requests waiting in a queue
MAX_PARALLEL = 1024  #: TP / DP / PP / EP sizes
MAX_RANK = MAX_PARALLEL - 1
MAX_DURATION_S = 7 * 86400.0  #: one request's or one benchmark's duration, seconds
MAX_STEP_S = 3600.0  #: one forward step, seconds
MAX_RATE = 1e9  #: tokens or requests per second
MAX_COUNTER = 1e15  #: cumulative Prometheus counters and sums
MAX_RATIO = 100.0  #: fractions (0..1; old logs print a percent)
MAX_ITER = 2**63 - 1  #: step counters
MAX_LIST = 2**20  #: elements of token_ids / block_hashes
MAX_ID_CHARS = 512  #: request and instance ids
MAX_TEXT_CHARS = 1024  #: other strings (model names, sources, event ids)
HASH_BOUND = 2**64  #: block hashes are 64-bit, signed or unsigned
MAX_PAGE_TOKENS = 65536  #: tokens per KV page
MAX_GB = 1e5  #: GPU memory quantities, GB
MAX_PRIORITY = 2**31  #: |priority|

Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
BatchReqs = Annotated[int, Field(ge=0, le=MAX_BATCH_REQS)]
QueueReqs = Annotated[int, Field(ge=0, le=MAX_QUEUE_REQS)]
Parallel = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
Rank = Annotated[int, Field(ge=0, le=MAX_RANK)]
Seconds = Annotated[float, Field(ge=0.0, le=MAX_DURATION_S)]
StepSeconds = Annotated[float, Field(ge=0.0, le=MAX_STEP_S)]
Rate = Annotated[float, Field(ge=0.0, le=MAX_RATE)]
Ratio = Annotated[float, Field(ge=0.0, le=MAX_RATIO)]
Gauge = Annotated[float, Field(ge=0.0, le=MAX_QUEUE_REQS)]
Counter = Annotated[float, Field(ge=0.0, le=MAX_COUNTER)]
IntCounter = Annotated[int, Field(ge=0, le=int(MAX_COUNTER))]
Iter = Annotated[int, Field(ge=0, le=MAX_ITER)]
PositiveTokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
PositiveReqs = Annotated[int, Field(ge=1, le=MAX_QUEUE_REQS)]
KvTokens = Annotated[int, Field(ge=0, le=MAX_KV_TOKENS)]
PageSize = Annotated[int, Field(ge=1, le=MAX_PAGE_TOKENS)]
ChunkSize = Annotated[int, Field(ge=-1, le=MAX_TOKENS)]  # -1 = chunked prefill off
Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]
Gigabytes = Annotated[float, Field(ge=0.0, le=MAX_GB)]
Priority = Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
Timestamp = Annotated[float, Field(ge=MIN_TS, le=MAX_TS)]
Id = Annotated[str, Field(max_length=MAX_ID_CHARS)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
TokenId = Annotated[int, Field(ge=0, lt=2**32)]
BlockHash = Annotated[int, Field(gt=-HASH_BOUND, lt=HASH_BOUND)]
TokenIdList = Annotated[list[TokenId], Field(max_length=MAX_LIST)]
HashList = Annotated[list[BlockHash], Field(max_length=MAX_LIST)]


class _EventBase(BaseModel):
    """Fields every event carries."""

    # allow_inf_nan=False: JSON cannot carry them and no SGLang quantity is infinite; reject at the edge.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    schema_version: Literal[1] = 1
    instance_id: Id = "default"
    ts: Timestamp = Field(description="event time, Unix seconds (UTC)")
    source: Text | None = Field(default=None, description="file or topic the event was read from")
    event_id: Text | None = Field(default=None, description="deterministic id for de-duplication")


class ServerConfig(_EventBase):
    """Resolved server settings, from startup log lines, ``/server_info``, or Prometheus constants. All optional:
    each source knows only some of them; consumers merge successive ``server_config`` events field by field."""

    kind: Literal["server_config"] = "server_config"
    model: Text | None = None
    sglang_version: Text | None = None
    tp_size: Parallel | None = None
    dp_size: Parallel | None = None
    pp_size: Parallel | None = None
    ep_size: Parallel | None = None
    page_size: PageSize | None = None
    max_total_num_tokens: KvTokens | None = Field(default=None, description="KV pool capacity, tokens")
    chunked_prefill_size: ChunkSize | None = Field(default=None, description="tokens; -1 or None = disabled")
    max_prefill_tokens: PositiveTokens | None = None
    max_running_requests: PositiveReqs | None = None
    context_len: PositiveTokens | None = Field(default=None, description="tokens")
    schedule_policy: Text | None = None
    mem_fraction_static: Fraction | None = None
    kv_cache_dtype: Text | None = None
    gpu: Text | None = None
    disable_radix_cache: bool | None = None
    enable_mixed_chunk: bool | None = None
    disable_overlap_schedule: bool | None = None
    enable_dp_attention: bool | None = None
    cuda_graph_max_bs: BatchReqs | None = None
    # speculative decoding as the server resolved it (server_args: ``speculative_algorithm`` 'EAGLE' / 'EAGLE3' /
    # 'NEXTN' / 'DFLASH' …, as logged; None = off)
    speculative_algorithm: Text | None = None
    speculative_num_steps: PositiveTokens | None = None
    speculative_eagle_topk: PositiveTokens | None = None
    speculative_num_draft_tokens: PositiveTokens | None = None
    speculative_draft_model_path: Text | None = None
    available_gpu_mem_gb: Gigabytes | None = Field(default=None, description="free GPU memory after KV allocation, GB")
    kv_cache_size_gb: Gigabytes | None = Field(default=None, description="K size + V size from 'KV Cache is allocated', GB")
    tp_rank: Rank | None = None
    dp_rank: Rank | None = None


class RequestArrived(_EventBase):
    """A request entered the server (``ts`` = arrival). From trace files, ``--log-requests`` Receive lines,
    OTLP root spans, metrics-file lines (``request_received_ts``)."""

    kind: Literal["request_arrived"] = "request_arrived"
    request_id: Id
    prompt_tokens: Tokens
    token_ids: TokenIdList | None = None
    block_hashes: HashList | None = Field(default=None, description="one hash per prefix block (Mooncake)")
    block_size_tokens: Tokens | None = Field(default=None, description="tokens per block_hashes entry")
    max_new_tokens: Tokens | None = None
    ignore_eos: bool = False
    priority: Priority | None = None
    output_tokens_hint: Tokens | None = Field(
        default=None, description="eventual output length in tokens, when a trace knows it"
    )


class RequestFirstToken(_EventBase):
    """The first output token of a request was produced (``ts`` = first-token time)."""

    kind: Literal["request_first_token"] = "request_first_token"
    request_id: Id
    ttft_s: Seconds = Field(description="time to first token, seconds")


class RequestFinished(_EventBase):
    """A request finished (``ts`` = finish time)."""

    kind: Literal["request_finished"] = "request_finished"
    request_id: Id
    prompt_tokens: Tokens
    output_tokens: Tokens
    cached_tokens: Tokens | None = None
    ttft_s: Seconds | None = None
    e2e_s: Seconds | None = None
    queue_time_s: Seconds | None = None
    num_retractions: Tokens | None = None
    arrival_ts: Timestamp | None = Field(default=None, description="arrival time, Unix seconds")
    finish_reason: Text | None = None
    forward_s: Seconds | None = Field(default=None, description="first forward entry -> finish, seconds")


class PrefillBatch(_EventBase):
    """One ``Prefill batch`` scheduler log line: a prefill (or mixed) batch was run."""

    kind: Literal["prefill_batch"] = "prefill_batch"
    new_seqs: BatchReqs
    new_tokens: Tokens
    cached_tokens: Tokens
    token_usage: Ratio | None = Field(default=None, description="KV pool fraction in use, 0..1")
    swa_token_usage: Ratio | None = None
    mamba_usage: Ratio | None = None
    running_reqs: BatchReqs | None = None
    queue_reqs: QueueReqs | None = None
    pending_tokens: Tokens | None = None
    cache_hit_rate: Ratio | None = Field(default=None, description="0..1 (old logs print a percent)")
    input_throughput_tok_s: Rate | None = None
    cuda_graph: bool | None = None
    forward_iter: Iter | None = None
    dp_rank: Rank | None = None
    tp_rank: Rank | None = None
    pp_rank: Rank | None = None
    ep_rank: Rank | None = None


class DecodeBatch(_EventBase):
    """One ``Decode batch`` scheduler log line (every ``--decode-log-interval`` decode steps)."""

    kind: Literal["decode_batch"] = "decode_batch"
    running_reqs: BatchReqs
    kv_tokens: KvTokens | None = Field(default=None, description="'#token' (or '#full token'): KV tokens used")
    token_usage: Ratio | None = None
    swa_tokens: KvTokens | None = None
    swa_token_usage: Ratio | None = None
    gen_throughput_tok_s: Rate | None = None
    queue_reqs: QueueReqs | None = None
    cuda_graph: bool | None = None
    accept_len: Ratio | None = Field(default=None, description="speculative decoding mean accept length")
    accept_rate: Ratio | None = None
    retracted_reqs: BatchReqs | None = Field(default=None, description="PD-decode '#retracted-req'")
    forward_iter: Iter | None = None
    dp_rank: Rank | None = None
    tp_rank: Rank | None = None
    pp_rank: Rank | None = None
    ep_rank: Rank | None = None


class Retraction(_EventBase):
    """Decode ran out of KV memory and requests were retracted (preempted back to the queue)."""

    kind: Literal["retraction"] = "retraction"
    num_retracted: BatchReqs | None = None
    new_tokens_gained: Tokens | None = None
    new_token_ratio: Ratio | None = Field(default=None, description="ratio after the retraction")
    old_new_token_ratio: Ratio | None = Field(default=None, description="ratio before the retraction")
    request_id: Id | None = None
    dp_rank: Rank | None = None
    tp_rank: Rank | None = None


class ForwardPass(_EventBase):
    """One GPU forward with its batch shape and measured time (forward-pass metrics, OTLP ``schedule`` events)."""

    kind: Literal["forward_pass"] = "forward_pass"
    forward_mode: Text = Field(description="'prefill', 'decode', 'mixed', 'extend', 'idle', ...")
    batch_size: BatchReqs
    num_extend_tokens: Tokens = Field(description="new (uncached) prompt tokens computed in this forward")
    num_cached_tokens: Tokens | None = None
    sum_kv_tokens: KvTokens | None = Field(default=None, description="sum of KV lengths attended by the batch")
    duration_s: StepSeconds = Field(description="GPU time of the forward, seconds")
    num_decode_reqs: BatchReqs | None = None
    num_prefill_reqs: BatchReqs | None = None
    queued_reqs: QueueReqs | None = None
    dp_rank: Rank | None = None
    forward_iter: Iter | None = None


class KvStored(_EventBase):
    """KV blocks were inserted in the radix tree (``BlockStored``)."""

    kind: Literal["kv_stored"] = "kv_stored"
    block_hashes: HashList
    parent_block_hash: BlockHash | None = None
    token_ids: TokenIdList | None = None
    block_size_tokens: Tokens | None = None
    medium: Text | None = None
    dp_rank: Rank | None = None


class KvRemoved(_EventBase):
    """KV blocks were evicted from the radix tree (``BlockRemoved``); ``block_hashes`` empty + ``all_cleared``
    for ``AllBlocksCleared``."""

    kind: Literal["kv_removed"] = "kv_removed"
    block_hashes: HashList
    all_cleared: bool = False
    medium: Text | None = None
    dp_rank: Rank | None = None


class MetricsSnapshot(_EventBase):
    """One scrape of SGLang's Prometheus ``/metrics`` (gauges and counters at ``ts``). Gauges are stale between
    scheduler reports (see sglang-internals 5.2); counters are cumulative since server start."""

    kind: Literal["metrics_snapshot"] = "metrics_snapshot"
    model: Text | None = None
    running_reqs: Gauge | None = None
    queue_reqs: Gauge | None = None
    token_usage: Ratio | None = None
    num_used_tokens: Counter | None = None
    gen_throughput_tok_s: Rate | None = None
    cache_hit_rate: Ratio | None = None
    prompt_tokens_total: Counter | None = None
    generation_tokens_total: Counter | None = None
    num_requests_total: Counter | None = None
    ttft_count: Counter | None = None
    ttft_sum_s: Counter | None = None
    e2e_count: Counter | None = None
    e2e_sum_s: Counter | None = None
    dp_rank: Rank | None = None
    tp_rank: Rank | None = None


class BenchmarkSummary(_EventBase):
    """The summary of one ``sglang.bench_serving`` run (console block or ``--output-file`` JSON line)."""

    kind: Literal["benchmark_summary"] = "benchmark_summary"
    backend: Text | None = None
    request_rate: Rate | None = Field(default=None, description="req/s; None = inf (all at t=0) or trace")
    max_concurrency: QueueReqs | None = None
    completed: QueueReqs | None = None
    duration_s: Seconds | None = None
    total_input_tokens: IntCounter | None = None
    total_output_tokens: IntCounter | None = None
    request_throughput_req_s: Rate | None = None
    input_throughput_tok_s: Rate | None = None
    output_throughput_tok_s: Rate | None = None
    mean_e2e_latency_s: Seconds | None = None
    median_e2e_latency_s: Seconds | None = None
    mean_ttft_s: Seconds | None = None
    median_ttft_s: Seconds | None = None
    p99_ttft_s: Seconds | None = None
    mean_tpot_s: Seconds | None = None
    median_tpot_s: Seconds | None = None
    p99_tpot_s: Seconds | None = None
    mean_itl_s: Seconds | None = None
    median_itl_s: Seconds | None = None
    p99_itl_s: Seconds | None = None
    concurrency: Gauge | None = None


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
