"""The latency-model interface between the scheduler model and the GPU performance model.

The scheduler decides *what* runs in a step (a `BatchShape`); a `LatencyModel` says *how long* the step
takes. Everything is in seconds. Implementations must be pure and deterministic, and cheap: the
simulator calls them once per step, so they memoize by shape (the contract is microseconds per call).
"""
from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from simcore.written_dataclass import DataclassFields, frozen_error

_object_setattr = object.__setattr__

ForwardMode = Literal["prefill", "decode", "mixed", "idle"]


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

    __slots__ = ("extend_lens", "prefix_lens", "num_decode", "decode_sum_kv", "decode_kv_lens", "cuda_graph_bs")
    __match_args__ = ("extend_lens", "prefix_lens", "num_decode", "decode_sum_kv", "decode_kv_lens", "cuda_graph_bs")
    __dataclass_fields__ = DataclassFields(frozen=True)

    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    num_decode: int
    decode_sum_kv: int
    decode_kv_lens: tuple[int, ...]
    cuda_graph_bs: int | None

    def __init__(self, extend_lens: tuple[int, ...] = (), prefix_lens: tuple[int, ...] = (), num_decode: int = 0,
                 decode_sum_kv: int = 0, decode_kv_lens: tuple[int, ...] = (),
                 cuda_graph_bs: int | None = None) -> None:
        _object_setattr(self, "extend_lens", extend_lens)
        _object_setattr(self, "prefix_lens", prefix_lens)
        _object_setattr(self, "num_decode", num_decode)
        _object_setattr(self, "decode_sum_kv", decode_sum_kv)
        _object_setattr(self, "decode_kv_lens", decode_kv_lens)
        _object_setattr(self, "cuda_graph_bs", cuda_graph_bs)

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(extend_lens={self.extend_lens!r}, prefix_lens={self.prefix_lens!r}, "
                  f"num_decode={self.num_decode!r}, decode_sum_kv={self.decode_sum_kv!r}, "
                  f"decode_kv_lens={self.decode_kv_lens!r}, cuda_graph_bs={self.cuda_graph_bs!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.extend_lens, self.prefix_lens, self.num_decode, self.decode_sum_kv, self.decode_kv_lens,
                     self.cuda_graph_bs)
                    == (other.extend_lens, other.prefix_lens, other.num_decode, other.decode_sum_kv,
                        other.decode_kv_lens, other.cuda_graph_bs))  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.extend_lens, self.prefix_lens, self.num_decode, self.decode_sum_kv, self.decode_kv_lens,
                     self.cuda_graph_bs))

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is BatchShape or name in _BATCHSHAPE_FIELDS:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(BatchShape, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is BatchShape or name in _BATCHSHAPE_FIELDS:
            raise frozen_error(f"cannot delete field {name!r}")
        super(BatchShape, self).__delattr__(name)

    def __getstate__(self) -> list[Any]:
        return [self.extend_lens, self.prefix_lens, self.num_decode, self.decode_sum_kv, self.decode_kv_lens,
                self.cuda_graph_bs]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_BATCHSHAPE_FIELDS, state):
            _object_setattr(self, name, value)

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


_BATCHSHAPE_FIELDS = BatchShape.__match_args__


class StepTime:
    """Duration of one scheduler iteration, split into the GPU forward and the host-side (CPU) work."""

    __slots__ = ("gpu_s", "cpu_s")
    __match_args__ = ("gpu_s", "cpu_s")
    __dataclass_fields__ = DataclassFields(frozen=True)

    gpu_s: float
    cpu_s: float

    def __init__(self, gpu_s: float, cpu_s: float) -> None:
        _object_setattr(self, "gpu_s", gpu_s)
        _object_setattr(self, "cpu_s", cpu_s)

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(gpu_s={self.gpu_s!r}, cpu_s={self.cpu_s!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.gpu_s, self.cpu_s)
                    == (other.gpu_s, other.cpu_s))  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.gpu_s, self.cpu_s))

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is StepTime or name in _STEPTIME_FIELDS:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(StepTime, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is StepTime or name in _STEPTIME_FIELDS:
            raise frozen_error(f"cannot delete field {name!r}")
        super(StepTime, self).__delattr__(name)

    def __getstate__(self) -> list[Any]:
        return [self.gpu_s, self.cpu_s]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_STEPTIME_FIELDS, state):
            _object_setattr(self, name, value)


_STEPTIME_FIELDS = StepTime.__match_args__


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


class LinearLatencyModel:
    """A transparent analytic model: a + b·tokens + c·Σkv. Used by tests and as a last resort.

    Real predictions use simcore.perf's roofline or measured-table models; this one exists so that scheduler
    tests can state exact expected times.
    """

    pure_step_time = True  # see LatencyModel: the step time is a function of the shape alone
    __match_args__ = ("base_s", "per_extend_token_s", "per_prefix_token_s", "per_decode_req_s", "per_kv_token_s",
                      "cpu_s", "name", "profile_hash")
    __dataclass_fields__ = DataclassFields(frozen=False)

    base_s: float = 0.005
    per_extend_token_s: float = 1.0e-4
    per_prefix_token_s: float = 0.0
    per_decode_req_s: float = 1.0e-5
    per_kv_token_s: float = 1.0e-8
    cpu_s: float = 0.0
    name: str = "linear"
    profile_hash: str = "none"

    def __init__(self, base_s: float = 0.005, per_extend_token_s: float = 1.0e-4, per_prefix_token_s: float = 0.0,
                 per_decode_req_s: float = 1.0e-5, per_kv_token_s: float = 1.0e-8, cpu_s: float = 0.0,
                 name: str = "linear", profile_hash: str = "none") -> None:
        self.base_s = base_s
        self.per_extend_token_s = per_extend_token_s
        self.per_prefix_token_s = per_prefix_token_s
        self.per_decode_req_s = per_decode_req_s
        self.per_kv_token_s = per_kv_token_s
        self.cpu_s = cpu_s
        self.name = name
        self.profile_hash = profile_hash

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(base_s={self.base_s!r}, per_extend_token_s={self.per_extend_token_s!r}, "
                  f"per_prefix_token_s={self.per_prefix_token_s!r}, "
                  f"per_decode_req_s={self.per_decode_req_s!r}, "
                  f"per_kv_token_s={self.per_kv_token_s!r}, cpu_s={self.cpu_s!r}, "
                  f"name={self.name!r}, profile_hash={self.profile_hash!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.base_s, self.per_extend_token_s, self.per_prefix_token_s, self.per_decode_req_s,
                     self.per_kv_token_s, self.cpu_s, self.name, self.profile_hash)
                    == (other.base_s, other.per_extend_token_s, other.per_prefix_token_s, other.per_decode_req_s,
                        other.per_kv_token_s, other.cpu_s, other.name,
                        other.profile_hash))  # type: ignore[attr-defined]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # eq without frozen: unhashable, as a dataclass's

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
