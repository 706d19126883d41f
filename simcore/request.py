"""What the simulator is asked to serve: one request of a workload, independent of its wire format."""
from __future__ import annotations

from typing import Any

from simcore.written_dataclass import DataclassFields, frozen_error

_object_setattr = object.__setattr__


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

    __slots__ = ("rid", "arrival_s", "input_len", "output_len", "max_new_tokens", "key", "key_unit", "ignore_eos",
                 "priority")
    __match_args__ = ("rid", "arrival_s", "input_len", "output_len", "max_new_tokens", "key", "key_unit",
                      "ignore_eos", "priority")
    __dataclass_fields__ = DataclassFields(frozen=True)

    rid: str
    arrival_s: float
    input_len: int
    output_len: int
    max_new_tokens: int | None
    key: tuple[int, ...] | None
    key_unit: int
    ignore_eos: bool
    priority: int | None

    def __init__(self, rid: str, arrival_s: float, input_len: int, output_len: int, max_new_tokens: int | None = None,
                 key: tuple[int, ...] | None = None, key_unit: int = 1, ignore_eos: bool = False,
                 priority: int | None = None) -> None:
        _object_setattr(self, "rid", rid)
        _object_setattr(self, "arrival_s", arrival_s)
        _object_setattr(self, "input_len", input_len)
        _object_setattr(self, "output_len", output_len)
        _object_setattr(self, "max_new_tokens", max_new_tokens)
        _object_setattr(self, "key", key)
        _object_setattr(self, "key_unit", key_unit)
        _object_setattr(self, "ignore_eos", ignore_eos)
        _object_setattr(self, "priority", priority)
        self.__post_init__()

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(rid={self.rid!r}, arrival_s={self.arrival_s!r}, input_len={self.input_len!r}, "
                  f"output_len={self.output_len!r}, max_new_tokens={self.max_new_tokens!r}, "
                  f"key={self.key!r}, key_unit={self.key_unit!r}, ignore_eos={self.ignore_eos!r}, "
                  f"priority={self.priority!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.rid, self.arrival_s, self.input_len, self.output_len, self.max_new_tokens, self.key,
                     self.key_unit, self.ignore_eos, self.priority)
                    == (other.rid, other.arrival_s, other.input_len, other.output_len, other.max_new_tokens,
                        other.key, other.key_unit, other.ignore_eos, other.priority))  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.rid, self.arrival_s, self.input_len, self.output_len, self.max_new_tokens, self.key,
                     self.key_unit, self.ignore_eos, self.priority))

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is RequestSpec or name in _REQUESTSPEC_FIELDS:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(RequestSpec, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is RequestSpec or name in _REQUESTSPEC_FIELDS:
            raise frozen_error(f"cannot delete field {name!r}")
        super(RequestSpec, self).__delattr__(name)

    def __getstate__(self) -> list[Any]:
        return [self.rid, self.arrival_s, self.input_len, self.output_len, self.max_new_tokens, self.key,
                self.key_unit, self.ignore_eos, self.priority]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_REQUESTSPEC_FIELDS, state):
            _object_setattr(self, name, value)

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


_FIELDS = _REQUESTSPEC_FIELDS = RequestSpec.__match_args__
