"""The demo scenario as data: three EMULATED instances, one of which slows down partway, and the shadow config
that watches them. Used by `shadowsim demo` (live, through Kafka) and by tests (in memory, fast)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simcore.events import Event, parse_event
from simcore.gpus import load_gpu
from simcore.settings import ServerSettings, resolve
from shadowsim.demo.traffic import EmulatedInstance, emulate
from shadowsim.shadow.config import (DriftConfig, InstanceConfig, KafkaConfig, ShadowConfig, SnapshotConfig,
                                     TimeConfig)

MODEL = "Qwen/Qwen2.5-7B-Instruct"
GPU = "h100"
SETTINGS: dict[str, Any] = {"sglang_version": "0.5.9", "chunked_prefill_size": 8192, "schedule_policy": "fcfs"}
KV_CAPACITY_TOKENS = 400_000
SLOW_INSTANCE = "emu-azure-code-1"
SLOW_FACTOR = 1.5
SLOW_AT_FRACTION = 0.4  # the slowdown starts at 40 % of the demo's duration


@dataclass(frozen=True)
class Scenario:
    duration_s: float
    instances: tuple[EmulatedInstance, ...]
    shadow: ShadowConfig

    @property
    def slow_from_s(self) -> float:
        return self.duration_s * SLOW_AT_FRACTION


def build_scenario(duration_s: float = 60.0, *, seed: int = 7, latency_backend: str = "perf",
                   snapshot_dir: str = "shadow-state", metrics_port: int = 9400) -> Scenario:
    slow_at = duration_s * SLOW_AT_FRACTION
    base = dict(model=MODEL, gpu=GPU, kv_capacity_tokens=KV_CAPACITY_TOKENS, settings=SETTINGS)
    insts = (
        EmulatedInstance("emu-mooncake-0", "mooncake", 1.0, key_unit=512, seed=seed, **base),
        EmulatedInstance(SLOW_INSTANCE, "azure_code", 6.0, slow_from_s=slow_at, slow_factor=SLOW_FACTOR,
                         seed=seed + 1, **base),
        EmulatedInstance("emu-azure-conv-2", "azure_conv", 5.0, seed=seed + 2, **base),
    )
    shadow_instances = {
        i.instance_id: InstanceConfig(model=MODEL, gpu=GPU, latency_backend=latency_backend,  # type: ignore[arg-type]
                                      kv_capacity_tokens=KV_CAPACITY_TOKENS, settings=SETTINGS, key_unit=i.key_unit)
        for i in insts}
    shadow = ShadowConfig(
        instances=shadow_instances,
        # Requests here live a few seconds; a late event is at most one publisher batch behind.
        time=TimeConfig(allowed_lateness_s=0.5, max_wait_s=30.0),
        drift=DriftConfig(window_s=max(10.0, duration_s / 6), min_samples=10, verdict_mode="free",
                          mape_threshold={"ttft": 0.25, "tpot": 0.2, "e2e": 0.25}, performance_band=0.15,
                          calibration_halflife_steps=100.0),
        snapshot=SnapshotConfig(dir=snapshot_dir, every_s=5.0, every_events=20_000),  # type: ignore[arg-type]
        kafka=KafkaConfig(group="shadowsim-demo"),
        metrics_port=metrics_port,
        emulated=True,
    )
    return Scenario(duration_s, insts, shadow)


def reference_latency(inst: EmulatedInstance, backend: str) -> Any:
    from shadowsim.shadow.engine import build_latency  # noqa: PLC0415

    cfg = InstanceConfig(model=inst.model, gpu=inst.gpu, latency_backend=backend)  # type: ignore[arg-type]
    return build_latency(cfg, {})


def scenario_events(sc: Scenario, t0_ts: float, *, latency_backend: str = "perf",
                    decode_logs: bool = True) -> list[tuple[float, str, Event | bytes]]:
    """Every emulated instance's output merged in event-time order: ``(ts, instance id, event or log line)``.
    Arrivals stop at ``duration_s``; the emulated servers then drain their queues."""
    merged: list[tuple[float, str, Event | bytes]] = []
    for inst in sc.instances:
        settings = resolve(ServerSettings.model_validate(inst.settings), load_gpu(inst.gpu).memory_bytes)
        for ts, ev in emulate(inst, reference_latency(inst, latency_backend), settings, t0_ts, sc.duration_s):
            if isinstance(ev, bytes) and not decode_logs:
                continue
            merged.append((ts, inst.instance_id, ev))
    merged.sort(key=lambda x: x[0])
    return merged


def as_events(items: list[tuple[float, str, Event | bytes]]) -> list[Event]:
    """Canonical events only, with log lines decoded through the log adapter (as the Kafka consumer would)."""
    from streams.decode import decode_record  # noqa: PLC0415

    out: list[Event] = []
    for _, iid, ev in items:
        if isinstance(ev, bytes):
            res = decode_record(ev, key=iid.encode(), source="demo")
            out.extend(res.events)
        else:
            out.append(ev)
    return out


def with_duration(sc: Scenario, duration_s: float) -> Scenario:
    return replace(sc, duration_s=duration_s)


__all__ = ["Scenario", "build_scenario", "scenario_events", "as_events", "parse_event", "SLOW_INSTANCE"]
