"""Shared pieces of every adapter: the parse context, the dead-letter record and small value converters.

An adapter turns one unit of a wire format (a log line, a JSON object, a metrics page...) into a ``LineResult``:

* a non-empty ``list`` of events — parsed;
* ``None`` or an empty list — not SGLang's (traceback, access log, other program): skipped quietly;
* a ``str`` — it looks like SGLang's output but could not be parsed: the reason, for the dead-letter path.

Adapters never raise on bad input; ``streams.decode`` still wraps them, so a bug shows up as a dead letter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Union

import pydantic

from simcore.events import KIND_TO_CLASS, Event

LineResult = Union[list[Event], str, None]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input that looked like SGLang's but could not become an event. ``raw`` is the input as received."""

    raw: bytes
    reason: str
    line_no: int | None = None


@dataclass(slots=True)
class ParseContext:
    """Mutable state carried along one input stream (a file or one Kafka partition's key).

    ``last_ts`` is the latest timestamp seen: lines without one (old eras, tracebacks) inherit it.
    ``day_epoch`` is the midnight (Unix s, UTC) of the last dated line, for time-only prefixes like ``[14:39:48]``.
    """

    source: str = ""
    instance_id: str = "default"
    line_no: int = 0
    last_ts: float | None = None
    day_epoch: float | None = None
    default_ts: float = 0.0
    # per-source scratch space for adapters that need to remember something between lines (e.g. trace t0)
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def ts(self) -> float:
        """Best known current time: the last timestamp seen, else ``default_ts``."""
        return self.last_ts if self.last_ts is not None else self.default_ts

    def line_event_id(self, k: int = 0) -> str:
        base = f"{self.source or '-'}:{self.line_no}"
        return base if k == 0 else f"{base}.{k}"


_VALIDATORS = {kind: cls.__pydantic_validator__.validate_python for kind, cls in KIND_TO_CLASS.items()}


def make_event(kind: str, data: dict[str, Any]) -> Event:
    """Validate ``data`` as the concrete class of ``kind`` (faster than the union, same checks).

    Raises ``pydantic.ValidationError``; callers turn that into a dead-letter reason with ``validation_reason``.
    """
    # the class's validator itself: what model_validate(data) calls, without its Python wrapper
    return _VALIDATORS[kind](data)  # type: ignore[no-any-return]


def validation_reason(kind: str, exc: pydantic.ValidationError) -> str:
    """One line naming the first bad field, e.g. ``prefill_batch.new_tokens: Input should be >= 0``."""
    errs = exc.errors()
    if not errs:
        return f"{kind}: invalid"
    first = errs[0]
    parts = [str(p) for p in first.get("loc", ())]
    if parts and parts[0] == kind:  # union validation puts the tag first
        parts = parts[1:]
    loc = ".".join(parts) or "?"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    got = first.get("input")
    shown = f", got {got.strip()[:40]!r}" if isinstance(got, str) else ""
    return f"{kind}.{loc}: {first.get('msg', 'invalid')}{shown}{more}"


def build(kind: str, data: dict[str, Any]) -> LineResult:
    """``make_event`` that returns a dead-letter reason instead of raising."""
    try:
        return [make_event(kind, data)]
    except pydantic.ValidationError as exc:
        return validation_reason(kind, exc)


def drop_idle_speculative(data: dict[str, Any]) -> None:
    """Drop a ``server_config``'s speculative sizes when it has no algorithm: SGLang reports them with their
    defaults while speculation is off (0.4.3 logs speculative_algorithm=None, speculative_num_steps=5, ...;
    ``/server_info`` the same), and then they describe nothing the server runs."""
    if data.get("speculative_algorithm") is None:
        for k in [k for k in data if k.startswith("speculative_")]:
            del data[k]


def to_int(text: str) -> int:
    """'1,234' / '1234' / '12.0' -> int. Raises ValueError on anything else."""
    t = text.strip().replace(",", "")
    try:
        return int(t)
    except ValueError:
        pass
    try:
        f = float(t)
    except ValueError:
        raise ValueError(f"not an integer: {text.strip()[:40]!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise ValueError(f"not an integer: {text.strip()[:40]!r}")
    return int(f)


def to_float(text: str) -> float:
    """'0.63' / '12.5%' (kept as 12.5) / 'nan' rejected. Raises ValueError."""
    t = text.strip().rstrip("%").strip()
    try:
        f = float(t)
    except ValueError:
        raise ValueError(f"not a number: {text.strip()[:40]!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"not a finite number: {text!r}")
    return f


def finite(x: Any) -> float | None:
    """A JSON number as a finite float, else None (also for bools and strings that are not numbers)."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, str):
        try:
            return to_float(x)
        except ValueError:
            return None
    return None


def as_int(x: Any) -> int | None:
    f = finite(x)
    if f is None or f != int(f):
        return None
    return int(f)
