"""EMULATED SGLang instances for the demo: real arrival traces replayed through a reference twin with noise.

Nothing here talks to a real server. Each emulated instance is a ``simcore.server.Server`` (the same model the
shadow uses) whose step times get seeded log-normal noise and, optionally, a slowdown from a given time on (the
"performance drift" the shadow must notice). Its requests are real arrival traces bundled in
``shadowsim/demo/data`` (Mooncake conversation with 512-token prefix blocks, Azure code and conversation), with
their recorded lengths, compressed in time to a target request rate.

Output: the events SGLang would emit, in event-time order — ``server_config``, ``request_arrived``,
``request_first_token``, ``request_finished``, ``forward_pass``, ``metrics_snapshot`` (one /metrics scrape per
second; keeps event time moving while the server is idle) as canonical events, and ``Prefill batch`` /
``Decode batch`` scheduler log lines (as raw text, the way a log shipper sends them, so the log adapter is
exercised). Deterministic for a given seed.
"""
from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
from simcore._simpy import simpy

from simcore.events import (Event, ForwardPass, MetricsSnapshot, RequestArrived, RequestFinished,
                            RequestFirstToken, ServerConfig)
from simcore.perf.base import BatchShape, GpuTimeScaling, LatencyModel
from simcore.request import RequestSpec
from simcore.results import RequestRecord, StepRecord

DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default
MAX_NEW_TOKENS = 2048  # what the emulated clients ask for (the real length comes from the trace)
TRACES = ("mooncake", "azure_code", "azure_conv")
MAX_GAP_S = 10.0
SCRAPE_EVERY_S = 1.0
DRAIN_S = 30.0  # scrapes continue this long after the last arrival, while the server drains


@dataclass(frozen=True)
class TraceRequest:
    t_s: float  # arrival, seconds from the trace's first request
    input_len: int
    output_len: int
    block_hashes: tuple[int, ...] | None = None


def load_trace(name: str, limit: int | None = None) -> list[TraceRequest]:
    """A bundled trace excerpt (see shadowsim/demo/data/NOTICE.txt), times relative to its first request."""
    files = {"mooncake": "mooncake_conversation_head.csv", "azure_code": "azure_code_head.csv",
             "azure_conv": "azure_conv_head.csv"}
    if name not in files:
        raise ValueError(f"unknown trace {name!r}; known: {', '.join(files)}")
    text = resources.files("shadowsim.demo").joinpath("data", files[name]).read_text()
    rows = list(csv.DictReader(text.splitlines()))
    out: list[TraceRequest] = []
    if name == "mooncake":
        for r in rows:
            out.append(TraceRequest(int(r["timestamp_ms"]) / 1000.0, int(r["input_length"]),
                                    max(1, int(r["output_length"])), tuple(int(x) for x in r["hash_ids"].split())))
    else:
        from datetime import datetime, timezone  # noqa: PLC0415

        for r in rows:
            ts = datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
            out.append(TraceRequest(ts.timestamp(), int(r["ContextTokens"]), max(1, int(r["GeneratedTokens"]))))
    t0 = min(x.t_s for x in out)
    out = sorted((TraceRequest(x.t_s - t0, x.input_len, x.output_len, x.block_hashes) for x in out),
                 key=lambda x: x.t_s)
    return out[:limit] if limit else out


def compress(trace: list[TraceRequest], rate_rps: float, duration_s: float) -> list[TraceRequest]:
    """Rescale the trace's clock so it arrives at ``rate_rps`` on average; keep arrivals before ``duration_s``
    (cycling through the trace when it is too short). Burstiness and ordering are preserved, except that idle
    gaps longer than ``MAX_GAP_S`` (the Azure code trace has a 144 s one) are shortened to that."""
    shortened: list[TraceRequest] = []
    t_prev, t_new = trace[0].t_s, 0.0
    for x in trace:
        t_new += min(x.t_s - t_prev, MAX_GAP_S)
        t_prev = x.t_s
        shortened.append(TraceRequest(t_new, x.input_len, x.output_len, x.block_hashes))
    trace = shortened
    span = trace[-1].t_s or 1.0
    scale = (len(trace) / rate_rps) / span
    out: list[TraceRequest] = []
    offset = 0.0
    while True:
        for x in trace:
            t = offset + x.t_s * scale
            if t >= duration_s:
                return out
            out.append(TraceRequest(t, x.input_len, x.output_len, x.block_hashes))
        offset += span * scale + 1.0 / rate_rps


@dataclass
class NoisySlowLatency(GpuTimeScaling):
    """The emulated server's true step time: the reference model × log-normal noise × slowdown (after
    ``slow_from_s`` of simulated time). ``now`` reads the emulator's SimPy clock."""

    base: LatencyModel
    rng: np.random.Generator
    noise_sigma: float
    slow_from_s: float | None
    slow_factor: float
    now: Callable[[], float]

    def gpu_factor(self, shape: BatchShape) -> float:
        f = float(self.rng.lognormal(0.0, self.noise_sigma)) if self.noise_sigma > 0 else 1.0
        if self.slow_from_s is not None and self.now() >= self.slow_from_s:
            f *= self.slow_factor
        return f


@dataclass(frozen=True)
class EmulatedInstance:
    instance_id: str
    trace: str
    rate_rps: float
    model: str
    gpu: str
    kv_capacity_tokens: int
    settings: dict[str, Any]
    key_unit: int = 1
    slow_from_s: float | None = None
    slow_factor: float = 1.5
    noise_sigma: float = 0.05
    seed: int = 0


def _log_ts(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(round((ts % 1) * 1000)) % 1000:03d}"


def emulate(inst: EmulatedInstance, latency: LatencyModel, settings: Any, t0_ts: float, duration_s: float,
            ) -> list[tuple[float, Event | bytes]]:
    """Run the emulated instance and return ``(event time, event or raw log line)`` sorted by time."""
    from simcore.server import Server  # noqa: PLC0415

    trace = compress(load_trace(inst.trace), inst.rate_rps, duration_s)
    env = simpy.Environment()
    rng = np.random.default_rng(inst.seed)
    true_latency = NoisySlowLatency(latency, rng, inst.noise_sigma, inst.slow_from_s, inst.slow_factor,
                                    lambda: float(env.now))
    out: list[tuple[float, Event | bytes]] = []
    iid = inst.instance_id
    specs: dict[str, RequestSpec] = {}
    decode_steps = [0]
    last_decode_line = [0.0]

    def on_step(s: StepRecord) -> None:
        sh = s.shape
        ts = t0_ts + s.end_s
        mode = sh.mode
        out.append((ts, ForwardPass(
            instance_id=iid, ts=ts, forward_mode=mode, batch_size=len(sh.extend_lens) + sh.num_decode,
            num_extend_tokens=sh.num_extend_tokens, num_cached_tokens=sum(sh.prefix_lens),
            sum_kv_tokens=sh.decode_sum_kv, duration_s=s.end_s - s.start_s, num_decode_reqs=sh.num_decode,
            num_prefill_reqs=len(sh.extend_lens), queued_reqs=s.num_waiting)))
        usage = s.kv_used / s.kv_capacity if s.kv_capacity else 0.0
        if sh.extend_lens:
            line = (f"[{_log_ts(ts)}] Prefill batch, #new-seq: {len(sh.extend_lens)}, "
                    f"#new-token: {sh.num_extend_tokens}, #cached-token: {sum(sh.prefix_lens)}, "
                    f"token usage: {usage:.2f}, #running-req: {s.num_running}, #queue-req: {s.num_waiting}, "
                    f"input throughput (token/s): 0.00, cuda graph: False")
            out.append((ts, line.encode()))
        elif sh.num_decode:
            decode_steps[0] += 1
            if decode_steps[0] % DECODE_LOG_INTERVAL == 0:
                dt = max(s.end_s - last_decode_line[0], 1e-9)
                gen = DECODE_LOG_INTERVAL * sh.num_decode / dt
                last_decode_line[0] = s.end_s
                line = (f"[{_log_ts(ts)}] Decode batch, #running-req: {sh.num_decode}, #token: {s.kv_used}, "
                        f"token usage: {usage:.2f}, cuda graph: {sh.cuda_graph_bs is not None}, "
                        f"gen throughput (token/s): {gen:.2f}, #queue-req: {s.num_waiting}")
                out.append((ts, line.encode()))

    def on_finish(r: RequestRecord) -> None:
        sp = specs[r.rid]
        out.append((t0_ts + r.first_token_s, RequestFirstToken(instance_id=iid, ts=t0_ts + r.first_token_s,
                                                              request_id=r.rid, ttft_s=r.ttft_s)))
        out.append((t0_ts + r.finish_s, RequestFinished(
            instance_id=iid, ts=t0_ts + r.finish_s, request_id=r.rid, prompt_tokens=sp.input_len,
            output_tokens=r.output_len, cached_tokens=r.cached_tokens, ttft_s=r.ttft_s, e2e_s=r.e2e_s,
            queue_time_s=r.queue_time_s, num_retractions=r.num_retractions, arrival_ts=t0_ts + r.arrival_s,
            finish_reason="length")))

    server = Server(env, settings, inst.kv_capacity_tokens, true_latency, key_unit=inst.key_unit,
                    rng=np.random.default_rng(inst.seed + 1), observer=on_step, on_finish=on_finish)
    out.append((t0_ts, ServerConfig(instance_id=iid, ts=t0_ts, model=inst.model, gpu=inst.gpu,
                                    sglang_version=settings.sglang_version, tp_size=settings.tp_size,
                                    page_size=settings.page_size, max_total_num_tokens=inst.kv_capacity_tokens,
                                    chunked_prefill_size=settings.chunked_prefill_size,
                                    schedule_policy=settings.schedule_policy)))

    def arrivals() -> Any:
        for i, x in enumerate(trace):
            if x.t_s > env.now:
                yield env.timeout(x.t_s - env.now)
            rid = f"{iid}-r{i}"
            sp = RequestSpec(rid=rid, arrival_s=float(env.now), input_len=max(1, x.input_len),
                             output_len=x.output_len, max_new_tokens=max(MAX_NEW_TOKENS, x.output_len),
                             key=x.block_hashes, key_unit=inst.key_unit)
            specs[rid] = sp
            ts = t0_ts + float(env.now)
            out.append((ts, RequestArrived(
                instance_id=iid, ts=ts, request_id=rid, prompt_tokens=sp.input_len,
                block_hashes=list(x.block_hashes) if x.block_hashes else None,
                block_size_tokens=inst.key_unit if x.block_hashes else None, max_new_tokens=MAX_NEW_TOKENS)))
            server.submit(sp)

    last_step: list[StepRecord | None] = [None]
    _obs = on_step

    def on_step_scraped(s: StepRecord) -> None:
        last_step[0] = s
        _obs(s)

    server.observer = on_step_scraped

    def scrapes() -> Any:
        # A Prometheus scrape of the server's /metrics every SCRAPE_EVERY_S, as a deployment's shipper does. Besides
        # the gauges, these keep event time moving while the server is idle (no batch lines then).
        while env.now < duration_s + DRAIN_S:
            yield env.timeout(SCRAPE_EVERY_S)
            s = last_step[0]
            ts = t0_ts + float(env.now)
            out.append((ts, MetricsSnapshot(
                instance_id=iid, ts=ts, model=inst.model, running_reqs=float(server.num_running),
                queue_reqs=float(server.num_waiting), token_usage=(s.kv_used / s.kv_capacity) if s else 0.0)))

    env.process(arrivals())
    env.process(scrapes())
    env.run()
    # Stable sort: same-time events keep their emission order (arrival before its own first token, etc.).
    out.sort(key=lambda p: p[0])
    return out
