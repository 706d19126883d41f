"""SGLang server settings as a typed, frozen model, with SGLang's own flag names and per-version defaults.

Field names are the server flags with dashes replaced by underscores (``--chunked-prefill-size`` →
``chunked_prefill_size``). Fields left as None are resolved by :func:`resolve` from the GPU memory and the
version family, following sglang-internals.md §2.12–2.13 and §6.1:

- ``0.4``  : 0.4.x (default policy ``lpm`` up to 0.4.3, 0.4.10 CUDA-graph list, mem_fraction table); 0.5.0 … 0.5.2
  keep its chunked-prefill and CUDA-graph defaults (:func:`gpu_defaults_family`)
- ``0.5``  : 0.5.0 … 0.5.9 (reservation of ignore_eos requests uses new_token_ratio; max_prefill_tokens applies
  with chunking on)
- ``0.5.23``: 0.5.23 (ignore_eos reserved at ratio 1.0, +page_size reservation per request, max_prefill_tokens
  only when chunking is off, prefill CUDA-graph memory term)
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from simcore.frozen_model import ConfigDict, Field, FrozenModel, field_validator, model_validator

from simcore.errors import UserError

VersionFamily = Literal["0.4", "0.5", "0.5.23"]
Policy = Literal["fcfs", "lpm", "dfs-weight", "lof", "random"]
POLICIES: tuple[str, ...] = ("fcfs", "lpm", "dfs-weight", "lof", "random")

GiB = 1024**3


@lru_cache(maxsize=64)  # a pure function of the string; scheduling passes ask for it every time
def version_family(version: str) -> VersionFamily:
    """Map an SGLang version string (``0.5.8.post1``, ``v0.4.6``) to the family whose rules we model."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not m:
        raise UserError("sglang_version", f"cannot read version {version!r}", "use a form like 0.5.9 or 0.4.10")
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if (major, minor) < (0, 5):
        return "0.4"
    if (major, minor) == (0, 5) and patch < 23:
        return "0.5"
    return "0.5.23"


@lru_cache(maxsize=64)
def _version_tuple(version: str) -> tuple[int, int, int]:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    assert m is not None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


class ServerSettings(FrozenModel):
    """The scheduler- and memory-relevant flags of one SGLang server (one TP group)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sglang_version: str = "0.5.9"
    schedule_policy: Policy | None = None
    schedule_conservativeness: float = Field(1.0, gt=0)
    max_prefill_tokens: int = Field(16384, ge=1)
    chunked_prefill_size: int | None = None  # None → by GPU memory; -1 (or 0) disables chunking
    max_running_requests: int | None = Field(None, ge=1)
    max_total_tokens: int | None = Field(None, ge=1)  # cap on (or explicit) KV pool size in tokens
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    page_size: int = Field(1, ge=1)
    tp_size: int = Field(1, ge=1)
    dp_size: int = Field(1, ge=1)
    pp_size: int = Field(1, ge=1)
    # Expert parallelism and DP attention (SGLang's --ep-size, --moe-a2a-backend, --enable-dp-attention; ep_size
    # divides tp_size, the MoE layers run moe_tp = tp / ep; simcore/perf/moe_parallel.py prices them).
    ep_size: int = Field(1, ge=1)
    moe_a2a_backend: Literal["none", "deepep"] = "none"
    enable_dp_attention: bool = False
    # --load-balance-method: the data-parallel controller's dispatch over the DP ranks (sglang 0.5.9
    # managers/data_parallel_controller.py; "auto" resolves to round_robin outside PD prefill, server_args.py
    # _handle_load_balance_method)
    load_balance_method: Literal["round_robin", "total_requests", "total_tokens"] = "round_robin"
    # Speculative decoding (--speculative-algorithm EAGLE/EAGLE3/NEXTN (MTP), --speculative-num-steps,
    # --speculative-eagle-topk, --speculative-num-draft-tokens; simcore/speculative.py). None = off.
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "MTP"] | None = None
    speculative_num_steps: int | None = Field(None, ge=1)
    speculative_eagle_topk: int | None = Field(None, ge=1)
    speculative_num_draft_tokens: int | None = Field(None, ge=1)
    speculative_draft_model_path: str | None = None  # the draft's weights; its shape is one decoder layer either way
    # Not an SGLang flag: the mean accepted length per verify pass, bonus token included (what SGLang logs as
    # ``accept len``); the per-draft-token acceptance of the chain that has this mean is drawn per request and
    # step (simcore/speculative.py AcceptanceModel). None: DEFAULT_DRAFT_ACCEPT_PROB per draft token.
    speculative_accept_length: float | None = Field(None, ge=1)
    kv_cache_dtype: str = "auto"
    # Hybrid sliding-window KV memory (SGLang --swa-full-tokens-ratio, --disable-hybrid-swa-memory): for the
    # architectures SGLang gives a separate SWA pool (gpt-oss), the ratio of SWA-layer to full-layer KV tokens
    # (simcore/memory.py:hybrid_swa_pool_tokens).
    swa_full_tokens_ratio: float = Field(0.8, gt=0, le=1)
    disable_hybrid_swa_memory: bool = False
    context_length: int | None = Field(None, ge=2)
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    disable_radix_cache: bool = False
    enable_priority_scheduling: bool = False
    # §2.9: sign of the priority order, preemption of running requests by much more urgent ones
    schedule_low_priority_values_first: bool = False
    disable_priority_preemption: bool = False
    priority_scheduling_preemption_threshold: int = 10
    prefill_max_requests: int | None = Field(None, ge=1)  # §2.11: cap on requests per prefill batch
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    cuda_graph_bs: tuple[int, ...] | None = None
    stream_interval: int = Field(1, ge=1)
    # --scheduler-recv-interval (sglang 0.5.9 managers/scheduler_recv_skipper.py): the scheduler polls for new
    # requests only when a counter, raised by 1 after a decode step (or an idle pass) and by 1000 after any other
    # step, reaches this value; 1 (the default) polls every iteration.
    scheduler_recv_interval: int = Field(1, ge=1)
    # Environment knobs of the scheduler (SGLANG_* variables), with SGLang's defaults.
    init_new_token_ratio: float = Field(0.7, gt=0, le=1)
    # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR may exceed 1: the floor is then clamped to 1.0 and the "decay" turns into a
    # growth (0.5.23 new_token_ratio_tracker.py::NewTokenRatioTracker.from_config, lines 21-32)
    min_new_token_ratio_factor: float = Field(0.14, gt=0)
    new_token_ratio_decay_steps: int = Field(600, ge=1)
    clip_max_new_tokens_estimation: int = Field(4096, ge=1)
    retract_decode_steps: int = Field(20, ge=1)
    lpm_fallback_queue_len: int = Field(128, ge=0)  # LPM → FCFS above this many waiting requests
    # SGLANG_ENABLE_WAITING_PREFIX_REFRESH (§2.4): None → the version's behaviour (present in 0.5.23, absent in
    # 0.5.9 and 0.4.x, whose schedule_policy.py has no _touch_waiting_prefixes); True/False forces it.
    enable_waiting_prefix_refresh: bool | None = None
    # Host-side stages outside the scheduler process (not SGLang flags; docs/accuracy.md §3.5), in seconds.
    # Each is a serial server: 0 (the default) leaves the stage out. Output path = detokenizer → tokenizer
    # manager → HTTP stream: every step that emits tokens costs per_step + per_token × emitting requests, and
    # its tokens reach the client when the stage has processed them. Tokenizer = chat template + tokenization
    # in the HTTP process: per_request + per_token × prompt tokens, one request after another.
    output_path_s_per_step: float = Field(0.0, ge=0)
    output_path_s_per_token: float = Field(0.0, ge=0)
    tokenizer_s_per_request: float = Field(0.0, ge=0)
    tokenizer_s_per_token: float = Field(0.0, ge=0)

    @field_validator("sglang_version")
    @classmethod
    def _check_version(cls, v: str) -> str:
        version_family(v)
        return v

    @model_validator(mode="before")
    @classmethod
    def _dp_attention_needs_dp(cls, data: object) -> object:
        """SGLang turns DP attention off at ``--dp-size 1`` (server_args.py ``_handle_data_parallelism``: "if
        self.dp_size == 1: self.enable_dp_attention = False", 0.5.3 to 0.5.9): ``--enable-dp-attention`` alone
        serves plain TP."""
        if isinstance(data, dict) and data.get("enable_dp_attention") and int(data.get("dp_size") or 1) == 1:
            data = {**data, "enable_dp_attention": False}
        return data

    @model_validator(mode="after")
    def _check_consistency(self) -> "ServerSettings":
        cps = self.chunked_prefill_size
        if cps is not None and cps > 0 and cps < self.page_size:
            raise UserError("chunked_prefill_size", f"{cps} is smaller than page_size {self.page_size}",
                            "use a multiple of the page size")
        if self.enable_priority_scheduling and self.policy not in ("fcfs", "lof"):
            raise UserError("enable_priority_scheduling",
                            f"priority scheduling needs policy fcfs or lof, not {self.policy}",
                            "add --schedule-policy fcfs (or lof), or drop --enable-priority-scheduling")
        if self.tp_size % self.ep_size:
            raise UserError("ep_size", f"--ep-size {self.ep_size} does not divide --tp-size {self.tp_size}",
                            "use an --ep-size that divides --tp-size (the MoE layers run tp/ep-way tensor parallel)")
        if self.enable_dp_attention and self.tp_size % self.dp_size:
            raise UserError("dp_size", f"--enable-dp-attention needs a --dp-size dividing --tp-size "
                            f"{self.tp_size}, got {self.dp_size}", "set --dp-size to a divisor of --tp-size")
        if self.enable_dp_attention and self.scheduler_recv_interval > 1:
            # 0.5.9 scheduler_recv_skipper.py SchedulerRecvSkipper.__init__: "assert not server_args.enable_dp_attention"
            raise UserError("scheduler_recv_interval", "SGLang does not run --scheduler-recv-interval > 1 with "
                            "--enable-dp-attention", "drop one of them")
        if self.enable_mixed_chunk and cps is not None and cps <= 0:
            raise UserError("enable_mixed_chunk", "mixed chunk requires chunked prefill",
                            "set --chunked-prefill-size or drop --enable-mixed-chunk")
        return self

    # ---- derived values -------------------------------------------------------------------------------
    @property
    def family(self) -> VersionFamily:
        return version_family(self.sglang_version)

    @property
    def dp_attention_ranks(self) -> int:
        """Attention-DP ranks (schedulers with their own pool) of one server: ``dp_size`` with DP attention, else 1
        (sglang 0.5.9 ``model_runner.py``: ``self.dp_size = server_args.dp_size if server_args.enable_dp_attention
        else 1``); a plain DP server's replicas are whole servers of their own."""
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def chunking_enabled(self) -> bool:
        return self.chunked_prefill_size is not None and self.chunked_prefill_size > 0

    @property
    def initial_new_token_ratio(self) -> float:
        """``new_token_ratio`` at start and after idle (§2.6): ``min(init × schedule_conservativeness, 1)``."""
        return min(self.init_new_token_ratio * self.schedule_conservativeness, 1.0)

    @property
    def min_new_token_ratio(self) -> float:
        """The floor of the decay (§2.6): ``min(initial × min_new_token_ratio_factor, 1)``."""
        return min(self.initial_new_token_ratio * self.min_new_token_ratio_factor, 1.0)

    @property
    def new_token_ratio_decay(self) -> float:
        """Decrease per decode step that did not retract (§2.6)."""
        return (self.initial_new_token_ratio - self.min_new_token_ratio) / self.new_token_ratio_decay_steps

    @property
    def waiting_prefix_refresh(self) -> bool:
        """Whether cache-agnostic passes refresh the LRU stamps of waiting prefixes (§2.4)."""
        if self.enable_waiting_prefix_refresh is not None:
            return self.enable_waiting_prefix_refresh
        return self.family == "0.5.23"

    @property
    def priority_preemption(self) -> bool:
        """``enable_priority_preemption`` (§2.9): on with priority scheduling unless disabled."""
        return self.enable_priority_scheduling and not self.disable_priority_preemption

    @property
    def priority_sign(self) -> int:
        """Sort sign of priorities (§2.4): −1 by default (higher value first), +1 with low values first."""
        return 1 if self.schedule_low_priority_values_first else -1

    @property
    def policy(self) -> str:
        """The effective policy (version default when not given)."""
        if self.schedule_policy is not None:
            return self.schedule_policy
        return "lpm" if _version_tuple(self.sglang_version) <= (0, 4, 3) else "fcfs"


def default_chunked_prefill_size(gpu_memory_bytes: int | None, family: VersionFamily) -> int:
    """§6.1 table: chunked_prefill_size by GPU memory and version."""
    if gpu_memory_bytes is None:
        return 4096
    gb = gpu_memory_bytes / GiB
    if gb < 20:
        return 2048
    if gb < 35:
        return 4096 if family == "0.5.23" else 2048
    if gb < 60:
        return 8192 if family == "0.4" else 4096
    if gb < 160:
        return 8192
    return 16384


def default_cuda_graph_max_bs(gpu_memory_bytes: int | None, family: VersionFamily, tp_size: int) -> int:
    """§6.1 table: the largest captured decode batch size."""
    if gpu_memory_bytes is None:
        return 160
    gb = gpu_memory_bytes / GiB
    small_tp = tp_size < 4
    if gb < 20:
        return 8 if (family != "0.4" or small_tp) else 80
    if gb < 35:
        if family == "0.5.23":
            return 48 if small_tp else 160
        if family == "0.5":
            return 24 if small_tp else 80
        return 8 if small_tp else 80
    if gb < 60:
        if family == "0.4":  # 0.4.6 … 0.5.2 set no max above 35 GB: the capture list tops out at 160
            return 160
        return 32 if small_tp else 160
    if gb < 160:
        if family == "0.4":
            return 160 if gb < 90 else 256
        return 256 if small_tp else 512
    return 512


def cuda_graph_batch_sizes(max_bs: int, family: VersionFamily, gpu_memory_bytes: int | None = None) -> tuple[int, ...]:
    """The decode batch sizes SGLang captures (§6.1), ascending, all ≤ max_bs, always including max_bs."""
    if family == "0.4":
        sizes = [1, 2, 4, 8] + list(range(16, 161, 8))
        gb = (gpu_memory_bytes or 0) / GiB
        if gb > 90:
            sizes += list(range(168, 257, 8))
        if gb > 160:
            sizes += list(range(272, 513, 16))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    out = sorted({s for s in sizes if s <= max_bs} | {max_bs})
    return tuple(out)


SPECULATIVE_DEFAULT_MAX_RUNNING_REQUESTS = 48  # 0.5.9 server_args.py _handle_speculative_decoding


def speculative_cuda_graph_batch_sizes(max_bs: int) -> tuple[int, ...]:
    """The decode batch sizes SGLang captures for a speculative server (0.5.9 server_args.py
    ``_generate_cuda_graph_batch_sizes``, spec branch: "less padding for smaller batch sizes"), ≤ max_bs."""
    sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
             + list(range(272, max_bs + 1, 16)))
    return tuple(s for s in sizes if s <= max_bs)


def _speculative_overrides(settings: ServerSettings, gpu_memory_bytes: int | None) -> dict[str, object]:
    """What 0.5.9 ``server_args.py::_handle_speculative_decoding`` forces for EAGLE/EAGLE3/NEXTN: max running
    requests 48 unless given, the overlap scheduler off (spec v1; SGLANG_ENABLE_SPEC_V2 is off by default,
    environ.py), mixed chunked prefill off; and the spec CUDA-graph list, cut at the request pool
    (cuda_graph_runner.py ``get_batch_sizes_to_capture``: sizes above req_to_token_pool.size dropped, that size
    added). ``cuda_graph_max_bs`` stays the GPU default: SGLang sizes the graph memory before the 48 is set."""
    upd: dict[str, object] = {"disable_overlap_schedule": True, "enable_mixed_chunk": False}
    running = settings.max_running_requests or SPECULATIVE_DEFAULT_MAX_RUNNING_REQUESTS
    upd["max_running_requests"] = running
    max_bs = settings.cuda_graph_max_bs
    if max_bs is None:
        max_bs = default_cuda_graph_max_bs(gpu_memory_bytes, settings.family, settings.tp_size)
        upd["cuda_graph_max_bs"] = max_bs
    if settings.cuda_graph_bs is None:
        cap = min(max_bs, running)
        sizes = (tuple(range(1, cap + 1)) if settings.disable_cuda_graph_padding
                 else speculative_cuda_graph_batch_sizes(cap))
        upd["cuda_graph_bs"] = tuple(sorted(set(sizes) | {cap}))
    return upd


# SGLang ≤ 0.4.0.post1 (read: sglang-0.4.0.post1 wheel): ``cuda_graph_max_bs`` is 160 unless the GPU has under
# 25,000 MB (then 8 below TP4, else 80; srt/server_args.py ServerArgs.__post_init__), and the captured sizes are
# ``[1, 2, 4] + [8, 16, …, 160]`` (srt/model_executor/cuda_graph_runner.py CudaGraphRunner.__init__). Decode
# batches above 160 run eagerly on every GPU. (0.4.6.post5 already captures [1, 2, 4, 8] + 16…160.) Chunked prefill
# is 2048 under 25,000 MB, else 8192.
LAST_EARLY_04_GRAPH_VERSION = (0, 4, 0)

# SGLang 0.5.0 … 0.5.2 keep 0.4.x's GPU-dependent defaults (read: sglang-0.5.1.post1 and 0.5.2 wheels,
# srt/server_args.py ServerArgs.__post_init__ and srt/model_executor/cuda_graph_runner.py
# get_batch_sizes_to_capture): chunked_prefill_size 2048 under 35 GiB, 8192 under 160 GiB, else 16384;
# cuda_graph_max_bs set only under 35 GiB (8 below TP4, else 80), otherwise the capture list
# [1, 2, 4, 8] + [16, 24, …, 160] (+ 168…256 above 90 GiB, + 272…512 above 160 GiB) is used whole. 0.5.3 brings
# the per-GPU table (256 below TP4 / 512 on H100-class GPUs) and the longer list (_generate_cuda_graph_batch_sizes).
LAST_04_DEFAULTS_VERSION = (0, 5, 2)


def gpu_defaults_family(sglang_version: str) -> VersionFamily:
    """The family whose chunked-prefill and CUDA-graph defaults a version uses: ``0.4`` up to 0.5.2."""
    fam = version_family(sglang_version)
    if fam == "0.5" and _version_tuple(sglang_version) <= LAST_04_DEFAULTS_VERSION:
        return "0.4"
    return fam


def early_04_cuda_graph_max_bs(gpu_memory_bytes: int | None, tp_size: int) -> int:
    if gpu_memory_bytes is not None and gpu_memory_bytes / 1024**2 < 25_000:
        return 8 if tp_size < 4 else 80
    return 160


def early_04_cuda_graph_batch_sizes(max_bs: int) -> tuple[int, ...]:
    sizes = [1, 2, 4] + [i * 8 for i in range(1, 21)]
    return tuple(sorted({s for s in sizes if s <= max_bs} | {max_bs}))


def resolve(settings: ServerSettings, gpu_memory_bytes: int | None) -> ServerSettings:
    """Fill the GPU-dependent defaults (chunked prefill size, CUDA-graph sizes, policy). Idempotent."""
    fam = gpu_defaults_family(settings.sglang_version)
    upd: dict[str, object] = {}
    if settings.speculative_algorithm is not None:  # idempotent: a second pass changes nothing
        settings = settings.model_copy(update=_speculative_overrides(settings, gpu_memory_bytes))
    if settings.schedule_policy is None:
        upd["schedule_policy"] = settings.policy
    early = _version_tuple(settings.sglang_version) <= LAST_EARLY_04_GRAPH_VERSION
    if settings.chunked_prefill_size is None:
        # ≤ 0.4.0.post1: 2048 under 25,000 MB, else 8192 on every GPU (server_args.py __post_init__)
        upd["chunked_prefill_size"] = ((2048 if gpu_memory_bytes is not None and gpu_memory_bytes / 1024**2 < 25_000
                                        else 8192) if early
                                       else default_chunked_prefill_size(gpu_memory_bytes, fam))
    max_bs = settings.cuda_graph_max_bs
    if max_bs is None:
        max_bs = (early_04_cuda_graph_max_bs(gpu_memory_bytes, settings.tp_size) if early
                  else default_cuda_graph_max_bs(gpu_memory_bytes, fam, settings.tp_size))
        if settings.max_running_requests is not None:
            max_bs = min(max_bs, settings.max_running_requests)
        upd["cuda_graph_max_bs"] = max_bs
    if settings.cuda_graph_bs is None:
        if settings.disable_cuda_graph_padding:
            upd["cuda_graph_bs"] = tuple(range(1, max_bs + 1))
        elif early:
            upd["cuda_graph_bs"] = early_04_cuda_graph_batch_sizes(max_bs)
        else:
            upd["cuda_graph_bs"] = cuda_graph_batch_sizes(max_bs, fam, gpu_memory_bytes)
    return settings.model_copy(update=upd) if upd else settings
