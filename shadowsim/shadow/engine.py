"""The free-running simulator of one instance: ``simcore.server.Server`` on a SimPy clock in event time.

Simulated time is event time minus ``epoch_ts`` (whole seconds), so floats keep sub-microsecond precision.
``submit`` may name an arrival in the future of the simulated clock (a request whose length is known before an
earlier one's): submissions wait in a heap and enter the server exactly at their arrival, in (arrival, order of
submission) order, which is a function of the event sequence only — so replays are identical.
"""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from simcore._simpy import simpy

from simcore.perf.base import BatchShape, GpuTimeScaling, LatencyModel, LinearLatencyModel
from simcore.errors import UserError
from simcore.request import RequestSpec
from simcore.settings import ServerSettings, resolve
from shadowsim.shadow.config import InstanceConfig
from shadowsim.shadow.protocols import Completion

# server_config event fields -> ServerSettings fields (SGLang flag names where they differ)
_CONFIG_TO_SETTINGS = {
    "sglang_version": "sglang_version", "tp_size": "tp_size", "page_size": "page_size",
    "chunked_prefill_size": "chunked_prefill_size", "max_prefill_tokens": "max_prefill_tokens",
    "max_running_requests": "max_running_requests", "schedule_policy": "schedule_policy",
    "context_len": "context_length", "disable_radix_cache": "disable_radix_cache",
    "enable_mixed_chunk": "enable_mixed_chunk", "disable_overlap_schedule": "disable_overlap_schedule",
    "cuda_graph_max_bs": "cuda_graph_max_bs", "enable_dp_attention": "enable_dp_attention",
    "speculative_num_steps": "speculative_num_steps", "speculative_eagle_topk": "speculative_eagle_topk",
    "speculative_num_draft_tokens": "speculative_num_draft_tokens",
    "speculative_draft_model_path": "speculative_draft_model_path",
}
# speculative_algorithm values the server loop simulates (simcore.settings.ServerSettings); the server logs the
# resolved name (0.5.9 _handle_speculative_decoding turns NEXTN into EAGLE)
SIMULATED_SPECULATIVE = ("EAGLE", "EAGLE3", "NEXTN", "MTP")


@dataclass
class ScaledLatencyModel(GpuTimeScaling):
    """A latency model with online calibration factors applied to its GPU time (prefill for steps with an
    extend, decode otherwise). Factors are set from the event stream, so replays see the same ones."""

    base: LatencyModel
    factors: dict[str, float] = field(default_factory=lambda: {"prefill": 1.0, "decode": 1.0})

    def gpu_factor(self, shape: BatchShape) -> float:
        return self.factors["prefill" if shape.extend_lens else "decode"]


FALLBACK_NAME = "linear-fallback"  # latency_model label of an `auto` instance the catalogues do not know
log = logging.getLogger("shadowsim.shadow")
_WARNED: set[tuple[str, str | None, int, str]] = set()  # (model, gpu, tp, reason) already logged: say it once


def instance_tp(cfg: InstanceConfig, server_config: dict[str, Any]) -> int:
    """Tensor parallelism: the server's word (server_config tp_size), else shadow.yaml, else 1."""
    return int(server_config.get("tp_size") or cfg.tp_size or cfg.settings.get("tp_size") or 1)


def build_latency(cfg: InstanceConfig, server_config: dict[str, Any]) -> LatencyModel:
    """The instance's latency model.

    ``perf``: simcore.perf for the model/GPU/TP/precision (errors if they are unknown); ``linear``: the configured
    coefficients; ``auto`` (the default): perf when the model and GPU are known (shadow.yaml or server_config
    events) and in the catalogues, else the linear model named ``linear-fallback``, with one log warning saying
    why. The choice is a function of (config, server_config) only, so a restored twin makes the same one."""
    if cfg.latency_backend == "linear":
        return _linear(cfg)
    model = str(server_config.get("model") or cfg.model)
    gpu = server_config.get("gpu") or cfg.gpu
    tp = instance_tp(cfg, server_config)
    if cfg.latency_backend == "perf":
        if not gpu:
            raise UserError("instances.<id>.gpu", "the perf latency backend needs a GPU name",
                            "set gpu: (e.g. h100_sxm) in shadow.yaml, or latency_backend: linear")
        return _cached_perf_model(model, str(gpu), tp, cfg.precision, cfg.profile)
    # auto
    reason = None
    if model == "unknown":
        reason = "no model named (shadow.yaml `model:` or a server_config event)"
    elif not gpu:
        reason = "no GPU named (shadow.yaml `gpu:` or a server_config event)"
    else:
        try:
            return _cached_perf_model(model, str(gpu), tp, cfg.precision, cfg.profile)
        except UserError as exc:  # not in the model/GPU catalogue, unknown precision, ...
            reason = str(exc)
    key = (model, gpu, tp, reason)
    if key not in _WARNED and len(_WARNED) < 1000:  # bounded: model names come from the event stream
        _WARNED.add(key)
        log.warning("latency model for model %r on GPU %r tp=%d: linear fallback (%s); predictions use the "
                    "placeholder `linear:` coefficients, exported as latency_model=%r. Set model/gpu in shadow.yaml "
                    "(docs/shadow.md).", model, gpu, tp, reason, FALLBACK_NAME)
    return _linear(cfg, name=FALLBACK_NAME)


def _linear(cfg: InstanceConfig, name: str = "linear") -> LinearLatencyModel:
    lin = cfg.linear
    return LinearLatencyModel(base_s=lin.base_s, per_extend_token_s=lin.per_extend_token_s,
                              per_decode_req_s=lin.per_decode_req_s, per_kv_token_s=lin.per_kv_token_s,
                              cpu_s=lin.cpu_s, name=name)


_PERF_CACHE: dict[tuple[str, str, int, str, str | None], LatencyModel] = {}


def _cached_perf_model(model: str, gpu: str, tp: int, precision: str, profile: Path | None) -> LatencyModel:
    # Loading tables takes about a second; twins of the same model/GPU/profile share one (pure, memoizing) model.
    from simcore.gpus import load_gpu  # noqa: PLC0415 - heavy imports only when asked for
    from simcore.models import load_model  # noqa: PLC0415
    from simcore.perf import build_latency_model  # noqa: PLC0415
    from simcore.perf.profile import CalibrationProfile  # noqa: PLC0415

    key = (model, gpu, tp, precision, str(profile) if profile is not None else None)
    if key not in _PERF_CACHE:
        # load() refuses a file whose stored hash does not match its content (checked at startup as well)
        prof = CalibrationProfile.load(profile) if profile is not None else None
        _PERF_CACHE[key] = build_latency_model(load_model(model), load_gpu(gpu), tp, precision, profile=prof)
    return _PERF_CACHE[key]


LINEAR_DRAFT_LAYERS = 32  # a linear twin of an unknown model prices its one-layer draft at 1/32 of the target


def build_twin_speculative(cfg: InstanceConfig, server_config: dict[str, Any], settings: ServerSettings,
                           target: LatencyModel) -> Any | None:
    """The twin's `simcore.speculative.SpeculativeDecoding` (None without ``speculative_algorithm`` in its
    settings): the draft is one decoder layer of the target (`draft_model_spec`) priced by simcore.perf when the
    target is, else the target's linear coefficients over its layer count (LINEAR_DRAFT_LAYERS when the model
    is unknown). The draws are seeded by the instance's ``seed``."""
    from simcore.speculative import (SpeculativeConfig, SpeculativeDecoding, acceptance_for,  # noqa: PLC0415
                                     build_speculative)

    if settings.speculative_algorithm is None:
        return None
    from simcore.models import load_model  # noqa: PLC0415

    name = str(server_config.get("model") or cfg.model)
    try:
        model = load_model(name)
    except UserError:
        model = None
    if isinstance(target, LinearLatencyModel) or model is None:
        layers = model.num_layers if model is not None else LINEAR_DRAFT_LAYERS
        lin = target if isinstance(target, LinearLatencyModel) else _linear(cfg)
        draft = LinearLatencyModel(base_s=lin.base_s / layers, per_extend_token_s=lin.per_extend_token_s / layers,
                                   per_decode_req_s=lin.per_decode_req_s / layers,
                                   per_kv_token_s=lin.per_kv_token_s / layers, cpu_s=0.0, name=f"{lin.name}-draft")
        config = SpeculativeConfig.from_settings(settings, model.architecture if model is not None else "")
        assert config is not None
        return SpeculativeDecoding(config, target, draft, acceptance_for(config, settings.speculative_accept_length),
                                   cfg.seed)
    from simcore.gpus import load_gpu  # noqa: PLC0415
    from simcore.perf import build_latency_model  # noqa: PLC0415
    from simcore.perf.profile import CalibrationProfile  # noqa: PLC0415

    gpu = load_gpu(str(server_config.get("gpu") or cfg.gpu))
    prof = CalibrationProfile.load(cfg.profile) if cfg.profile is not None else None
    tp = instance_tp(cfg, server_config)
    return build_speculative(settings, model, target,
                             lambda m: build_latency_model(m, gpu, tp, cfg.precision, profile=prof), cfg.seed)


#: the simulator's queue bound of a twin that sets none (``limits.max_simulated_queue``)
DEFAULT_MAX_QUEUED = 10_000

FALLBACK_KV_TOKENS = 200_000  # KV pool of a twin whose server, model and GPU are all unknown


def _gpu_spec(cfg: InstanceConfig, server_config: dict[str, Any]) -> Any | None:
    """The GPU from the catalogue (server_config wins over shadow.yaml), or None when unnamed or unknown."""
    from simcore.gpus import load_gpu  # noqa: PLC0415

    gpu = server_config.get("gpu") or cfg.gpu
    if not gpu:
        return None
    try:
        return load_gpu(str(gpu))
    except UserError:
        return None


def build_settings(cfg: InstanceConfig, server_config: dict[str, Any]) -> ServerSettings:
    """ServerSettings of the twin: shadow.yaml settings, overridden by server_config, with the GPU-dependent
    defaults (chunked prefill size, CUDA-graph batch sizes) resolved for the instance's GPU as SGLang does."""
    data = dict(cfg.settings)
    if cfg.tp_size is not None:  # the entry's tp_size beats settings.tp_size, as in instance_tp
        data["tp_size"] = cfg.tp_size
    for src, dst in _CONFIG_TO_SETTINGS.items():
        if server_config.get(src) is not None:
            data[dst] = server_config[src]
    if data.get("enable_dp_attention") and server_config.get("dp_size") is not None:
        # the DP-attention size sizes each rank's pool and step; a plain DP server's replicas are whole servers,
        # one twin each (ranks.py), so dp_size stays out of their settings
        data["dp_size"] = server_config["dp_size"]
        cps = server_config.get("chunked_prefill_size")
        if cps is not None and cps > 0:
            # SGLang logs server_args after _handle_data_parallelism divided the chunk by dp_size; the server's
            # own value (what its memory reserve was sized with) is dp times it (rank_settings divides it again)
            data["chunked_prefill_size"] = int(cps) * int(data["dp_size"])
    algorithm = server_config.get("speculative_algorithm")
    if algorithm is not None:
        name = str(algorithm).upper()
        if name in SIMULATED_SPECULATIVE:
            data["speculative_algorithm"] = name
        else:  # e.g. DFLASH, NGRAM: the twin decodes one token per step, and says so once
            for k in [k for k in data if k.startswith("speculative_")]:
                del data[k]
            key = (str(server_config.get("model") or cfg.model), None, 0, f"speculative {name}")
            if key not in _WARNED and len(_WARNED) < 1000:
                _WARNED.add(key)
                log.warning("speculative_algorithm %s is not simulated (simulated: %s); the twin of %s decodes "
                            "without speculation", name, ", ".join(SIMULATED_SPECULATIVE), key[0])
    gpu = _gpu_spec(cfg, server_config)
    return resolve(ServerSettings.model_validate(data), gpu.memory_bytes if gpu is not None else None)


def kv_capacity_tokens(cfg: InstanceConfig, server_config: dict[str, Any], settings: ServerSettings) -> int:
    """The twin's KV pool: what the server reported (max_total_num_tokens) wins; then shadow.yaml's
    kv_capacity_tokens; then SGLang's own sizing for the model/GPU/TP (simcore.memory); else a placeholder."""
    if server_config.get("max_total_num_tokens"):
        return int(server_config["max_total_num_tokens"])
    if cfg.kv_capacity_tokens is not None:
        return cfg.kv_capacity_tokens
    gpu = _gpu_spec(cfg, server_config)
    model = str(server_config.get("model") or cfg.model)
    if gpu is not None and model != "unknown":
        from simcore.memory import size_kv_pool  # noqa: PLC0415
        from simcore.models import load_model  # noqa: PLC0415

        try:
            return int(size_kv_pool(load_model(model), gpu, settings, cfg.precision).max_total_num_tokens)
        except (UserError, ValueError):  # unknown model, or it does not fit: keep the placeholder
            pass
    return FALLBACK_KV_TOKENS


def dp_rank_model(cfg: InstanceConfig, server_config: dict[str, Any], settings: ServerSettings,
                  latency: LatencyModel) -> tuple[ServerSettings, LatencyModel]:
    """The scheduler settings and step price of one attention-DP rank of a DP-attention server.

    Settings: `simcore.dp_attention.rank_settings` (chunked prefill ÷ dp, conservativeness × 0.3, CUDA graphs at
    multiples of the attention TP size; `build_settings` turned a reported per-rank chunk back into the server's).
    Price: with the perf
    backend, `simcore.dp_attention.DpAttentionLatency` for the model/GPU, each forward priced as if every rank ran
    a batch like this twin's (the other ranks are other twins: their batches are not visible here); with a linear
    model, that model for the rank's own batch."""
    from simcore.dp_attention import (BalancedRanks, build_dp_attention_latency,  # noqa: PLC0415
                                      rank_settings)

    rank = rank_settings(settings)
    if isinstance(latency, LinearLatencyModel):
        return rank, latency
    from simcore.perf.profile import CalibrationProfile  # noqa: PLC0415

    gpu = _gpu_spec(cfg, server_config)
    model = str(server_config.get("model") or cfg.model)
    from simcore.models import load_model  # noqa: PLC0415

    key = (model, gpu.name, settings, cfg.precision, str(cfg.profile))
    if key not in _DP_CACHE:  # the D twins of one server share one (pure, memoizing) model
        if len(_DP_CACHE) >= 64:  # keys come from the event stream: a cache, bounded
            _DP_CACHE.clear()
        prof = CalibrationProfile.load(cfg.profile) if cfg.profile is not None else None
        _DP_CACHE[key] = BalancedRanks(build_dp_attention_latency(load_model(model), gpu, settings, cfg.precision,
                                                                  profile=prof))
    return rank, _DP_CACHE[key]


_DP_CACHE: dict[tuple[str, str, ServerSettings, str, str], LatencyModel] = {}


def dp_rank_speculative(cfg: InstanceConfig, server_config: dict[str, Any], settings: ServerSettings,
                        speculative: Any) -> Any:
    """The speculative decoding of one attention-DP rank's twin (perf backend): each iteration's draft steps,
    verify and draft extend priced as DP-attention forwards (`simcore.dp_attention.DpSpeculativeLatency`) as if
    every rank ran a batch like this twin's (`simcore.dp_attention.balanced_speculative`); ``settings`` are the
    server's (DP attention on), ``speculative`` the twin's own (its config, acceptance and seeded draws)."""
    from simcore.dp_attention import balanced_speculative, build_dp_speculative_latency  # noqa: PLC0415
    from simcore.models import load_model  # noqa: PLC0415
    from simcore.perf.profile import CalibrationProfile  # noqa: PLC0415

    gpu = _gpu_spec(cfg, server_config)
    model = str(server_config.get("model") or cfg.model)
    key = (model, gpu.name, settings, cfg.precision, f"{cfg.profile}:speculative")
    if key not in _DP_CACHE:  # the D twins of one server share one (pure, memoizing) price
        if len(_DP_CACHE) >= 64:
            _DP_CACHE.clear()
        prof = CalibrationProfile.load(cfg.profile) if cfg.profile is not None else None
        _DP_CACHE[key] = build_dp_speculative_latency(speculative, load_model(model), gpu, settings, cfg.precision,
                                                      profile=prof)
    return balanced_speculative(speculative, _DP_CACHE[key])  # type: ignore[arg-type]


class SimEngine:
    """Wraps a ``simcore.server.Server`` for the twin (see ``shadowsim.shadow.twin.Engine``)."""

    def __init__(self, cfg: InstanceConfig, server_config: dict[str, Any], epoch_ts: float,
                 snapshot: dict[str, Any] | None = None) -> None:
        from simcore.server import Server  # noqa: PLC0415

        self.epoch_ts = epoch_ts
        self.settings = build_settings(cfg, server_config)
        self.key_unit = cfg.key_unit
        self.base_latency = build_latency(cfg, server_config)
        # DP attention: this twin is one attention-DP rank (shadowsim/shadow/ranks.py keeps one per rank), a rank
        # scheduler of simcore.dp_attention with the per-rank pool and its rank's own forward priced in lockstep
        self.server_settings = self.settings
        self.dp_ranks = self.settings.dp_attention_ranks
        if self.settings.enable_dp_attention:
            self.settings, self.base_latency = dp_rank_model(cfg, server_config, self.settings, self.base_latency)
        # speculative decoding (settings speculative_algorithm): the unscaled model prices its iterations, the
        # factors scale them (decode) and its prefills (prefill); the acceptance follows the log (set_acceptance)
        self.speculative = build_twin_speculative(cfg, server_config, self.settings, self.base_latency)
        if self.speculative is not None and self.dp_ranks > 1 and not isinstance(self.base_latency,
                                                                                 LinearLatencyModel):
            self.speculative = dp_rank_speculative(cfg, server_config, self.server_settings, self.speculative)
        if self.speculative is not None:
            self.base_latency = self.speculative
        self.latency = ScaledLatencyModel(self.base_latency)
        self.graph_sizes = tuple(self.settings.cuda_graph_bs or ())
        self.overlap = not self.settings.disable_overlap_schedule
        self.kv_capacity = kv_capacity_tokens(cfg, server_config, self.server_settings)
        self._seed = cfg.seed
        self._future: list[tuple[float, int, dict[str, Any]]] = []  # (arrival_rel, arrival order, spec fields)
        self._future_rids: set[str] = set()  # the request ids in _future
        self._done: list[Completion] = []
        self._last_step: dict[str, float] = {"queue": 0.0, "running": 0.0, "kv_usage": 0.0}
        self._held = 0.0  # simulated time (relative) asked for by `hold` and not yet run to
        #: requests the server may hold queued (submitted, not running); one entering a full queue is refused
        self.max_queued: int | None = DEFAULT_MAX_QUEUED
        self._shed: list[str] = []  # request ids refused that way since the last `take_shed`
        self.env = simpy.Environment()
        if snapshot is None:
            self.server = Server(self.env, self.settings, self.kv_capacity, self.latency, key_unit=self.key_unit,
                                 rng=np.random.default_rng(self._seed), observer=self._on_step,
                                 on_finish=self._on_record, speculative=self.speculative)
        else:
            self._restore(snapshot, Server)

    # ---- protocol used by InstanceTwin --------------------------------------------------------------------------
    @property
    def now_ts(self) -> float:
        """The simulated clock: where the simulation is, or has been asked to be (``hold``)."""
        now, held = float(self.env._now), self._held  # noqa: SLF001 - simpy's `now` property returns `_now`
        return self.epoch_ts + (held if held > now else now)  # max(now, held)

    def hold(self, ts: float) -> None:
        """Ask for the simulation to reach event time ``ts`` without running it yet: ``now_ts`` and submissions
        behave exactly as after ``advance_to(ts)``; the next ``advance_to`` does the work (once per poll batch)."""
        rel = ts - self.epoch_ts
        if rel > self._held:
            self._held = rel

    def submit(self, rid: str, arrival_ts: float, input_len: int, output_len: int, *,
               key: tuple[int, ...] | None, key_unit: int, max_new_tokens: int | None, ignore_eos: bool,
               priority: int | None, order: int) -> None:
        """Enter the request at ``arrival_ts``; requests arriving at the same time enter in ``order`` (the order
        their arrivals were seen), not in the order their lengths became known."""
        if key is not None and key_unit != self.key_unit:
            key = None  # a key in another unit than this server's tree cannot match anything
        spec = {"rid": rid, "input_len": input_len, "output_len": output_len,
                "max_new_tokens": max(max_new_tokens, output_len) if max_new_tokens else None,
                "key": list(key) if key is not None else None, "ignore_eos": ignore_eos, "priority": priority}
        now = max(float(self.env.now), self._held)
        heapq.heappush(self._future, (max(arrival_ts - self.epoch_ts, now), order, spec))
        self._future_rids.add(rid)

    def holds(self, rid: str) -> bool:
        """Whether a request of this id is in the simulation (submitted and not finished): the simulator refuses a
        second request of the same id until the first has left."""
        return rid in self._future_rids or rid in self.server.reqs

    def advance_to(self, ts: float) -> list[Completion]:
        """Run the simulation up to (not including) event time ``ts`` (or the held time, if later), entering due
        submissions on the way."""
        until = max(ts - self.epoch_ts, self._held)
        self._held = 0.0
        while self._future and self._future[0][0] < until:
            at, _, spec = heapq.heappop(self._future)
            self._future_rids.discard(spec["rid"])
            self._run(at)
            if self.max_queued is not None and self.queued() >= self.max_queued:
                # SGLang's Scheduler._abort_on_queued_limit (--max-queued-requests): the incoming request is
                # refused when len(waiting_queue) + 1 > the limit. Decided in simulated time, at the request's
                # entry, so the same requests are refused however the events were batched.
                self._shed.append(spec["rid"])
                continue
            self._enter(at, spec)
        self._run(until)
        # The server keeps every record and ITL sample for offline summaries; a live shadow must not grow
        # without bound, and these lists are not scheduling state.
        for name in ("records", "itl_vals", "itl_w"):
            acc = getattr(self.server, name, None)
            if isinstance(acc, list):
                acc.clear()
        done, self._done = self._done, []
        return done

    def queued(self) -> int:
        """Requests the server holds that have not started running (submitted and not yet ingested, or waiting)."""
        return len(self.server.pending) + len(self.server.waiting)

    def take_shed(self) -> list[str]:
        """Request ids refused at a full queue (``max_queued``) since the last call."""
        out, self._shed = self._shed, []
        return out

    def state(self) -> dict[str, float]:
        return dict(self._last_step)

    def set_factors(self, factors: dict[str, float]) -> None:
        self.latency.factors.update(factors)

    def set_acceptance(self, mean_accept_len: float) -> None:
        """A speculative twin draws accepted lengths from the chain with this mean from now on (the mean the
        twin learned from the log's ``accept len`` fields); nothing for a plain twin."""
        from simcore.speculative import AcceptanceModel  # noqa: PLC0415

        if self.speculative is not None:
            self.speculative.set_acceptance(AcceptanceModel.from_mean(mean_accept_len,
                                                                      self.speculative.config.max_accept_len))

    # ---- internals ----------------------------------------------------------------------------------------------
    def _run(self, until: float) -> None:
        env = self.env
        if until > env.now:
            if env.peek() > until:
                # nothing scheduled before `until`: env.run would only move the clock (simpy's run(until) with an
                # empty stretch sets `now` and returns); do that without building and scheduling an until-event
                env._now = until  # noqa: SLF001 - simpy.Environment keeps its clock here
            else:
                env.run(until=until)

    def _enter(self, at: float, spec: dict[str, Any]) -> None:
        req = RequestSpec(rid=spec["rid"], arrival_s=at, input_len=spec["input_len"],
                          output_len=spec["output_len"], max_new_tokens=spec["max_new_tokens"],
                          key=tuple(spec["key"]) if spec["key"] is not None else None, key_unit=self.key_unit,
                          ignore_eos=spec["ignore_eos"], priority=spec["priority"])
        self.server.submit(req)

    def _on_record(self, r: Any) -> None:
        self._done.append(Completion(rid=r.rid, ttft_s=r.ttft_s, tpot_s=r.tpot_s if r.tpot_s is not None else 0.0,
                                     e2e_s=r.e2e_s, cached_tokens=r.cached_tokens, input_len=r.input_len,
                                     output_len=r.output_len))

    def _on_step(self, step: Any) -> None:
        self._last_step = {"queue": float(step.num_waiting), "running": float(step.num_running),
                           "kv_usage": step.kv_used / step.kv_capacity if step.kv_capacity else 0.0}

    def snapshot(self) -> dict[str, Any]:
        if self._held > self.env.now:
            raise RuntimeError("snapshot of an engine with held time: advance_to first")
        return {"now": float(self.env.now), "future": [[a, s, spec] for a, s, spec in self._future],
                "last_step": self._last_step, "factors": dict(self.latency.factors),
                "server": self.server.snapshot()}

    def _restore(self, snap: dict[str, Any], server_cls: Any) -> None:
        self._future = [(float(a), int(s), spec) for a, s, spec in snap["future"]]
        heapq.heapify(self._future)
        self._future_rids = {spec["rid"] for _, _, spec in self._future}
        self._last_step = dict(snap["last_step"])
        self.latency.factors.update(snap["factors"])
        self.env = simpy.Environment(initial_time=float(snap["now"]))
        self.server = server_cls.restore(self.env, snap["server"], self.settings, self.latency,
                                         observer=self._on_step, on_finish=self._on_record,
                                         speculative=self.speculative)


class SimEngineFactory:
    """``EngineFactory`` of ``SimEngine``; ``check`` tells beforehand whether server settings can build one."""

    def __call__(self, cfg: InstanceConfig, server_config: dict[str, Any], epoch_ts: float,
                 snapshot: dict[str, Any] | None) -> SimEngine:
        return SimEngine(cfg, server_config, epoch_ts, snapshot)

    def check(self, cfg: InstanceConfig, server_config: dict[str, Any]) -> None:
        """Raise (pydantic ``ValidationError``, ``UserError``, ``ValueError``) when an engine could not be built
        from these settings, e.g. a ``server_config`` whose chunked prefill exceeds its context. The twin calls
        it before taking a ``server_config`` event, so such an event is rejected instead of breaking every later
        engine build and every restore."""
        settings = build_settings(cfg, server_config)
        latency = build_latency(cfg, server_config)
        if settings.enable_dp_attention:
            dp_rank_model(cfg, server_config, settings, latency)
        kv_capacity_tokens(cfg, server_config, settings)


engine_factory = SimEngineFactory()
