"""What the simulator is asked to serve: one request of a workload, independent of its wire format."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the server receives it.

    - ``arrival_s``: event time the request reaches the scheduler (seconds; simulation clock).
    - ``input_len``: prompt tokens.
    - ``output_len``: tokens the request will actually generate (known from a trace or benchmark; the live shadow
      learns it when the request finishes). The simulated request finishes after exactly this many tokens.
    - ``max_new_tokens``: the request's cap, used by the scheduler's reservation estimate; None means the API
      default was unlimited (clipped to the context length, then to 4096 for the estimate).
    - ``key``: prefix-cache key. Either token ids (``key_unit == 1``) or block hashes, each standing for
      ``key_unit`` consecutive tokens (Mooncake traces use 512-token blocks; the last block may be partial).
      None means content unknown/random: nothing can match it.
    - ``ignore_eos``: benchmark requests that always run to ``max_new_tokens``; 0.5.23 reserves them at ratio 1.0.
    - ``priority``: used only with priority scheduling (sglang-internals.md §2.4, §2.9). None = the request gave
      none: SGLang then gives it the least preferred priority (``-sys.maxsize - 1``, or ``sys.maxsize`` with
      ``schedule_low_priority_values_first``).
    """

    rid: str
    arrival_s: float
    input_len: int
    output_len: int
    max_new_tokens: int | None = None
    key: tuple[int, ...] | None = None
    key_unit: int = 1
    ignore_eos: bool = False
    priority: int | None = None

    def with_arrival(self, arrival_s: float) -> "RequestSpec":
        """This request arriving at ``arrival_s``: ``dataclasses.replace(self, arrival_s=...)`` without going
        through the field machinery and the checks again (a trace replay retimes every request: ~7 µs each by
        ``replace``, ~3 µs here)."""
        new = object.__new__(RequestSpec)
        for name in _FIELDS:
            object.__setattr__(new, name, getattr(self, name))
        object.__setattr__(new, "arrival_s", arrival_s)
        return new

    def __post_init__(self) -> None:
        if self.input_len < 1:
            raise ValueError(f"request {self.rid}: input_len must be >= 1, got {self.input_len}")
        if self.output_len < 1:
            raise ValueError(f"request {self.rid}: output_len must be >= 1, got {self.output_len}")
        if self.key_unit < 1:
            raise ValueError(f"request {self.rid}: key_unit must be >= 1")


_FIELDS = tuple(f.name for f in fields(RequestSpec))
