"""Configuration of the live shadow (`shadowsim run --config shadow.yaml`), frozen at the edge.

One ``ShadowConfig`` is built in the entry point (from YAML plus command-line overrides) and each component
receives only its sub-config. Units are in the field names (``_s`` seconds, ``_tokens`` tokens).

Example ``shadow.yaml``::

    instances:                     # `default` applies to every instance; an entry per id overrides it field by field
      default:
        model: Qwen/Qwen3-0.6B
        gpu: h100_sxm
        tp_size: 1
        settings: {sglang_version: 0.5.9, chunked_prefill_size: 8192}   # KV pool: sized from model/GPU/TP
    time:
      allowed_lateness_s: 2.0      # how far behind the newest event an event may still arrive
      max_wait_s: 60.0             # longest a request waits for its output length before being simulated
    drift:
      window_s: 60.0
      mape_threshold: {ttft: 0.25, tpot: 0.15, e2e: 0.2}
    snapshot: {dir: ./shadow-state, every_s: 10, every_events: 5000}
    kafka:                         # TLS/SASL: streams/kafka_security.py, docs/operations.md "Kafka security"
      bootstrap_servers: kafka:9093
      security: {protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, sasl_username: shadowsim,
                 sasl_password_file: /var/run/secrets/kafka/password, ssl_cafile: /etc/kafka-ca/ca.crt}

See deploy/shadow.yaml for the file the deployments mount.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simcore.errors import UserError
from streams.kafka_security import KafkaSecurity, security_from

MetricName = Literal["ttft", "tpot", "e2e"]
METRICS: tuple[str, ...] = ("ttft", "tpot", "e2e")
MODES: tuple[str, ...] = ("free", "anchored")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LinearLatencyConfig(_Frozen):
    """Coefficients of ``simcore.perf.base.LinearLatencyModel`` (seconds per unit), used when no perf model is
    named or the perf catalogue does not know the model/GPU."""

    base_s: float = 0.006
    per_extend_token_s: float = 6.0e-5
    per_decode_req_s: float = 1.0e-4
    per_kv_token_s: float = 2.0e-8
    cpu_s: float = 0.0


class InstanceConfig(_Frozen):
    """How to simulate one SGLang instance. ``server_config`` events override ``settings`` field by field."""

    model: str = "unknown"
    gpu: str | None = None
    tp_size: int | None = Field(None, ge=1, description="tensor parallelism; a server_config event's tp_size wins, "
                                "then settings.tp_size, else 1")
    precision: str = "bf16"
    latency_backend: Literal["auto", "perf", "linear"] = Field(
        "auto", description="'perf': simcore.perf.build_latency_model(model, gpu, tp, precision) (an unknown "
        "model/GPU is an error); 'linear': the `linear` coefficients; 'auto': perf when the catalogues know the "
        "model and GPU (from here or server_config events), else linear, said once in the log and exported as "
        "latency_model=\"linear-fallback\"")
    profile: Path | None = Field(None, description="calibration profile JSON (simcore.perf.profile) for the perf "
                                 "model; relative paths are relative to shadow.yaml; default: the shipped profile")
    linear: LinearLatencyConfig = LinearLatencyConfig()
    kv_capacity_tokens: int | None = Field(
        None, ge=1, description="KV pool size (tokens) when no server_config gives max_total_num_tokens; unset: "
        "sized like SGLang from model, GPU, TP and settings (simcore.memory), else 200,000")
    settings: dict[str, Any] = Field(default_factory=dict, description="simcore.settings.ServerSettings fields")
    key_unit: int = Field(1, ge=1, description="tokens per prefix-cache key element: 1 for token ids, 512 for "
                          "Mooncake block hashes")
    seed: int = 0


class TimeConfig(_Frozen):
    """Event-time rules (see docs/shadow.md, 'Event time and lag')."""

    allowed_lateness_s: float = Field(2.0, ge=0, description="watermark = newest event time − this")
    max_wait_s: float = Field(60.0, gt=0, description="a request still running after this long is simulated "
                              "with an estimated output length")
    default_output_tokens: int = Field(256, ge=1, description="estimate before any request of the instance finished")
    pending_expiry_margin_s: float = Field(600.0, ge=0, description="a request neither finished nor simulated "
                                           "max_wait_s + this after its arrival (event time) is forgotten, counted "
                                           "in requests_expired")
    max_future_s: float = Field(3600.0, gt=0, description="a record with an event more than this ahead of its "
                                "partition's newest accepted event time is dead-lettered (ts_window)")
    max_past_s: float = Field(86400.0, gt=0, description="a record with an event more than this behind its "
                              "partition's newest accepted event time is dead-lettered (ts_window)")

    def expiry_before(self, watermark: float) -> float:
        """The arrival time before which a request a twin (and the DP rank router) still holds unjoined is
        forgotten at ``watermark``: ``max_wait_s + pending_expiry_margin_s`` behind it."""
        return watermark - (self.max_wait_s + self.pending_expiry_margin_s)


class DriftConfig(_Frozen):
    """Rolling error windows and verdict thresholds."""

    window_s: float = Field(60.0, gt=0, description="event-time length of the rolling MAPE window")
    min_samples: int = Field(10, ge=1, description="no verdict on fewer finished requests in the window")
    mape_threshold: dict[str, float] = Field(default_factory=lambda: {"ttft": 0.5, "tpot": 0.2, "e2e": 0.3})
    verdict_mode: Literal["free", "anchored"] = "anchored"
    performance_band: float = Field(0.15, gt=0, description="|factor − baseline| above this = performance drift")
    calibration_halflife_steps: float = Field(50.0, gt=0, description="EWMA half-life of the online factors")
    min_factor_samples: int = Field(50, ge=1, description="steps observed before a performance verdict")
    recalibrate: bool = Field(False, description="apply the online factors to the free-running twin")
    factor_bounds: tuple[float, float] = (0.5, 2.0)


class SnapshotConfig(_Frozen):
    dir: Path = Path("shadow-state")
    every_s: float = Field(10.0, gt=0, description="wall seconds between checkpoints")
    every_events: int = Field(5000, ge=1, description="events between checkpoints")
    keep: int = Field(3, ge=1, description="checkpoints kept per partition (a corrupt newest one falls back to "
                      "the next)")


class LimitsConfig(_Frozen):
    """Bounds that keep one process's memory and work finite whatever the input (docs/shadow.md, "Limits")."""

    max_twins: int = Field(2000, ge=1, description="twins per process; records of further instance ids that "
                           "shadow.yaml does not name are dead-lettered (twin_cap)")
    max_dead_letter_bytes: int = Field(900_000, ge=1024, description="a dead letter's value is cut to this many "
                                       "bytes (header truncated_from_bytes); below the broker's message limit")
    max_series_per_instance: int = Field(3000, ge=50, description="series one SGLang instance (all its DP ranks' "
                                         "twins together) may export on /metrics; the rest are left out and "
                                         "counted (shadowsim_series_dropped); a twin exports about 270")
    max_simulated_queue: int = Field(10_000, ge=1, description="requests one twin's simulator may hold queued (not "
                                     "yet running); a request entering a full queue is refused, as SGLang's "
                                     "--max-queued-requests refuses it, forgotten and counted "
                                     "(shadowsim_requests_shed_total)")
    offset_reset: Literal["earliest", "latest", "fail"] = Field(
        "earliest", description="where to resume when a snapshot's offset is outside its partition")


class KafkaConfig(_Frozen):
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "sglang.events"
    dead_letter_topic: str = "sglang.events.dlq"
    group: str = "shadowsim"
    session_timeout_ms: int = Field(10_000, ge=500, description="a member silent this long leaves the group; its "
                                    "partitions move (a restarted process waits this long for them)")
    security: KafkaSecurity = Field(default_factory=KafkaSecurity, description="TLS and SASL "
                                    "(streams.kafka_security); SHADOWSIM_KAFKA_* environment variables win")


class ShadowConfig(_Frozen):
    instances: dict[str, InstanceConfig] = Field(default_factory=lambda: {"default": InstanceConfig()})
    time: TimeConfig = TimeConfig()
    drift: DriftConfig = DriftConfig()
    snapshot: SnapshotConfig = SnapshotConfig()
    limits: LimitsConfig = LimitsConfig()
    kafka: KafkaConfig = KafkaConfig()
    predictions_path: Path | None = Field(None, description="JSONL file of per-request predictions joined "
                                          "with actuals (appended; de-duplicate by instance, request_id)")
    metrics_port: int = Field(9400, ge=0, le=65535)
    emulated: bool = Field(False, description="the shadowed instances are emulated (demo); shown in build info")

    def instance(self, instance_id: str) -> InstanceConfig:
        """The settings of ``instance_id``: the ``default`` entry (else built-in defaults) with the fields the
        instance's own entry sets laid over it (``settings`` merged key by key)."""
        return merge_instance(self.instances.get("default") or InstanceConfig(), self.instances.get(instance_id))


def merge_instance(base: InstanceConfig, own: InstanceConfig | None) -> InstanceConfig:
    """``base`` overridden by the fields ``own`` sets explicitly (``settings`` merged key by key)."""
    if own is None or own is base:
        return base
    data = base.model_dump()
    for name in own.model_fields_set:
        data[name] = {**base.settings, **own.settings} if name == "settings" else own.model_dump()[name]
    return InstanceConfig.model_validate(data)


def load_config(path: Path | str | None, overrides: dict[str, Any] | None = None,
                env: Mapping[str, str] | None = None) -> ShadowConfig:
    """Read ``shadow.yaml`` (or nothing) and apply ``overrides`` (dotted keys, e.g. ``kafka.topic``), then the
    ``SHADOWSIM_KAFKA_*`` variables of ``env`` (default ``os.environ``) to ``kafka.security``."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError("--config", f"{p} does not exist", "write a shadow.yaml (see docs/shadow.md)")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            # the problem and where (1-based line/column), not the first of PyYAML's lines ("while parsing ...")
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UserError("--config", f"{p} is not valid YAML{where}: {what}") from exc
        except UnicodeDecodeError:
            raise UserError("--config", f"{p} is not a text file", "give a shadow.yaml (see docs/shadow.md)") from None
        if not isinstance(loaded, dict):
            raise UserError("--config", f"{p} must hold a mapping at the top level")
        data = loaded
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    # kafka.security: the file's section with the SHADOWSIM_KAFKA_* environment laid over it (secrets by env).
    kafka_section = data.get("kafka")
    security_section = kafka_section.pop("security", None) if isinstance(kafka_section, dict) else None
    if security_section is not None and not isinstance(security_section, dict):
        raise UserError("kafka.security", "must be a mapping", "see docs/operations.md, section Kafka security")
    security = security_from(security_section, env)
    try:
        cfg = ShadowConfig.model_validate(data)
        cfg = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"security": security})})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "config"
        raise UserError(field, err["msg"], "see the example in docs/shadow.md") from exc
    if path is not None:
        cfg = _resolve_profiles(cfg, Path(path).parent)
    _check_profiles(cfg)
    return cfg


def _resolve_profiles(cfg: ShadowConfig, base_dir: Path) -> ShadowConfig:
    """Relative ``profile`` paths name files next to shadow.yaml (a mounted ConfigMap directory, say)."""
    out = {}
    for iid, inst in cfg.instances.items():
        if inst.profile is not None and not inst.profile.is_absolute():
            # model_copy keeps model_fields_set, so the entry still overrides only what it set
            inst = inst.model_copy(update={"profile": base_dir / inst.profile})
        out[iid] = inst
    return cfg.model_copy(update={"instances": out})


def _check_profiles(cfg: ShadowConfig) -> None:
    """Load every named profile once at startup: a missing, broken or hand-edited (hash mismatch) file stops the
    service now, naming the entry, instead of when the first event of that instance arrives."""
    from simcore.perf.profile import CalibrationProfile  # noqa: PLC0415 - only when a profile is named

    for iid, inst in cfg.instances.items():
        if inst.profile is not None:
            try:
                CalibrationProfile.load(inst.profile)
            except UserError as exc:
                message = str(exc).removeprefix(f"{exc.field}: ")  # the hint stays in the text
                raise UserError(f"instances.{iid}.profile", message) from exc
