"""The latency-model interface between the scheduler model and the GPU performance model.

The scheduler decides *what* runs in a step (a `BatchShape`); a `LatencyModel` says *how long* the step
takes. Everything is in seconds. Implementations must be pure and deterministic, and cheap: the
simulator calls them once per step, so they memoize by shape (the contract is microseconds per call).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

ForwardMode = Literal["prefill", "decode", "mixed", "idle"]


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One forward pass, as the scheduler built it.

    - ``extend_lens[i]``: new tokens computed for prefill request i in this step (a chunk, or the whole
      uncached prompt); ``prefix_lens[i]``: tokens of that request already in KV (radix hit and earlier chunks).
    - ``decode_kv_lens[j]``: KV length attended by decode request j (prompt + outputs so far).
    - ``decode_sum_kv``: sum of decode_kv_lens. Always filled by the scheduler; a decode-only shape may leave
      decode_kv_lens empty and give only ``num_decode`` and ``decode_sum_kv`` (the fast path).
    - ``cuda_graph_bs``: decode batch size after padding to the captured CUDA-graph sizes, or None when the
      step runs eagerly (batch above the largest captured size, prefill, or graphs disabled).
    """

    extend_lens: tuple[int, ...] = ()
    prefix_lens: tuple[int, ...] = ()
    num_decode: int = 0
    decode_sum_kv: int = 0
    decode_kv_lens: tuple[int, ...] = ()
    cuda_graph_bs: int | None = None

    @property
    def mode(self) -> ForwardMode:
        if self.extend_lens and self.num_decode:
            return "mixed"
        if self.extend_lens:
            return "prefill"
        if self.num_decode:
            return "decode"
        return "idle"

    @property
    def num_extend_tokens(self) -> int:
        return sum(self.extend_lens)


@dataclass(frozen=True, slots=True)
class StepTime:
    """Duration of one scheduler iteration, split into the GPU forward and the host-side (CPU) work."""

    gpu_s: float
    cpu_s: float


@runtime_checkable
class LatencyModel(Protocol):
    """Predicts the duration of one step. ``name`` and ``profile_hash`` appear in exported build info."""

    name: str
    profile_hash: str

    def step_time(self, shape: BatchShape) -> StepTime:
        ...


def has_pure_step_time(latency: LatencyModel) -> bool:
    """Whether ``latency`` declares (``pure_step_time = True``) that a step's time depends on its shape alone, so
    callers may price steps ahead, memoize or interpolate them (decode runs, simcore.decode_run). Models that draw
    random numbers per call or read a clock must not declare it; undeclared counts as not pure."""
    return bool(getattr(latency, "pure_step_time", False))


@dataclass
class LinearLatencyModel:
    """A transparent analytic model: a + b·tokens + c·Σkv. Used by tests and as a last resort.

    Real predictions use simcore.perf's roofline or measured-table models; this one exists so that scheduler
    tests can state exact expected times.
    """

    pure_step_time = True  # see LatencyModel: the step time is a function of the shape alone
    base_s: float = 0.005
    per_extend_token_s: float = 1.0e-4
    per_prefix_token_s: float = 0.0
    per_decode_req_s: float = 1.0e-5
    per_kv_token_s: float = 1.0e-8
    cpu_s: float = 0.0
    name: str = "linear"
    profile_hash: str = "none"

    def step_time(self, shape: BatchShape) -> StepTime:
        extend_lens = shape.extend_lens
        if not extend_lens and not shape.num_decode:  # shape.mode == "idle", without the property
            return StepTime(0.0, self.cpu_s)
        bs = shape.cuda_graph_bs if shape.cuda_graph_bs is not None else shape.num_decode
        gpu = (
            self.base_s
            + self.per_extend_token_s * sum(extend_lens)  # shape.num_extend_tokens
            + self.per_prefix_token_s * sum(shape.prefix_lens)
            + self.per_decode_req_s * bs
            + self.per_kv_token_s * shape.decode_sum_kv
        )
        return StepTime(gpu, self.cpu_s)


class GpuTimeScaling:
    """Mixin for wrappers that multiply another model's GPU time per step (calibration factors, emulated noise).

    The subclass holds the wrapped model in ``base`` and says the factor in ``gpu_factor``; ``name`` and
    ``profile_hash`` are the wrapped model's, so exported build info names what actually predicts.
    """

    base: LatencyModel
    pure_gpu_factor = False  # a subclass whose factor depends on the shape alone says True

    @property
    def pure_step_time(self) -> bool:
        return self.pure_gpu_factor and has_pure_step_time(self.base)

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def profile_hash(self) -> str:
        return self.base.profile_hash

    @property
    def frontend_s(self) -> float:
        """The wrapped model's per-request front-end latency (`CalibrationProfile.frontend_s`), 0 if it has none."""
        return float(getattr(self.base, "frontend_s", 0.0))

    def gpu_factor(self, shape: BatchShape) -> float:
        return 1.0

    def step_time(self, shape: BatchShape) -> StepTime:
        st = self.base.step_time(shape)
        f = self.gpu_factor(shape)
        return st if f == 1.0 else StepTime(st.gpu_s * f, st.cpu_s)
