"""The twin's boundary types: what the simulator engine must offer, what it returns, a waiting request."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from simcore.perf.base import LatencyModel
from shadowsim.shadow.config import InstanceConfig


@dataclass(frozen=True)
class Completion:
    """A request the simulator finished: predicted values (seconds, tokens)."""

    rid: str
    ttft_s: float
    tpot_s: float
    e2e_s: float
    cached_tokens: int
    input_len: int
    output_len: int


class Engine(Protocol):
    """The free-running simulator of one instance (see shadowsim.shadow.engine)."""

    latency: LatencyModel  # what the simulator runs (with online factors when recalibrating)
    base_latency: LatencyModel  # the profiled model
    graph_sizes: tuple[int, ...]
    overlap: bool  # overlap scheduling on (CPU work hidden under the GPU)

    @property
    def now_ts(self) -> float: ...

    def submit(self, rid: str, arrival_ts: float, input_len: int, output_len: int, *, key: tuple[int, ...] | None,
               key_unit: int, max_new_tokens: int | None, ignore_eos: bool, priority: int | None, order: int) -> None: ...

    def holds(self, rid: str) -> bool: ...

    def advance_to(self, ts: float) -> list[Completion]: ...

    def hold(self, ts: float) -> None: ...

    def state(self) -> dict[str, float]: ...

    def set_factors(self, factors: dict[str, float]) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...


EngineFactory = Callable[[InstanceConfig, dict[str, Any], float, dict[str, Any] | None], Engine]
"""(instance config, merged server_config fields, epoch_ts, engine snapshot or None) -> Engine."""


@dataclass
class Pending:
    arrival_ts: float
    prompt_tokens: int
    key: tuple[int, ...] | None = None
    key_unit: int = 1
    max_new_tokens: int | None = None
    ignore_eos: bool = False
    priority: int | None = None  # None: the request gave none
    first_token_ts: float | None = None
    submitted: bool = False
    estimated: bool = False
    seq: int = 0  # order in which the twin learned of the request: breaks ties between equal arrival times
