"""A reorder buffer: merge events of many instances into event-time order, with a watermark for late ones.

Kafka keeps the events of one instance in order (one key, one partition) but not the events of different
instances, and a log shipper may deliver a few lines late. The buffer holds events back until the **watermark**
passes them, then releases them in event-time order.

Watermark (Bytewax's definition)::

    watermark = max event time seen − allowed_lateness_s + (clock() − clock() when that max was seen)

The last term lets an idle stream drain: with no new events the watermark keeps moving with the wall clock, so
buffered events come out at most ``allowed_lateness_s`` of wall time after the newest one arrived. ``clock`` is
injected (monotonic seconds; ``time.monotonic`` in production, a fake in tests); the buffer never reads the time
itself.

Guarantees:

1. **Per-instance order is arrival order.** Events of one instance are released in the order they were pushed,
   always (so what Kafka kept in order stays in order). An instance whose own event times go backwards holds its
   later-pushed event behind the earlier one.
2. **Across instances, event-time order**: an event is released once its time is ≤ the watermark and it heads its
   instance's queue; among those, smallest ``(ts, push order)`` first.
3. **Late events** (event time < the watermark when pushed) are counted in ``late``. Policy ``"deliver"``
   (default) releases them as soon as guarantee 1 allows (usually at once), so nothing is lost but they may be
   older than events of other instances already released; ``"drop"`` discards them (counted in ``dropped``).
4. **Bounded memory**: past ``max_buffered`` events the oldest heads are released early (counted in ``forced``).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, Protocol, TypeVar


class _Timed(Protocol):
    @property
    def ts(self) -> float: ...

    @property
    def instance_id(self) -> str: ...


E = TypeVar("E", bound=_Timed)
LatePolicy = Literal["deliver", "drop"]


class ReorderBuffer(Generic[E]):
    """Holds events until the watermark passes them (see the module docstring for the exact guarantees)."""

    def __init__(self, allowed_lateness_s: float, clock: Callable[[], float], *, late_policy: LatePolicy = "deliver",
                 max_buffered: int | None = 100_000) -> None:
        if allowed_lateness_s < 0:
            raise ValueError("allowed_lateness_s must be >= 0")
        if late_policy not in ("deliver", "drop"):
            raise ValueError(f"late_policy must be 'deliver' or 'drop', not {late_policy!r}")
        self.allowed_lateness_s = allowed_lateness_s
        self.late_policy = late_policy
        self.max_buffered = max_buffered
        self._clock = clock
        self._max_ts = -math.inf
        self._max_seen_at = 0.0
        self._seq = 0
        self._queues: dict[str, deque[tuple[int, E]]] = {}
        self._heads: list[tuple[float, int, str]] = []  # (ts, seq, instance) of each non-empty queue's head
        self._size = 0
        self.late = 0
        self.dropped = 0
        self.forced = 0
        self.released = 0

    # -- state ---------------------------------------------------------------------------------------------------
    @property
    def watermark(self) -> float:
        """Event time (Unix s) below which events count as late; ``-inf`` before the first event."""
        if self._max_ts == -math.inf:
            return -math.inf
        return self._max_ts - self.allowed_lateness_s + max(0.0, self._clock() - self._max_seen_at)

    def pending(self) -> list[E]:
        """The buffered events in push order, for a snapshot: an owner that checkpoints offsets past records whose
        events are still buffered must save these with its state (and ``push`` them again after a restore), or
        commit no further than the oldest buffered record."""
        items = [item for q in self._queues.values() for item in q]
        return [ev for _, ev in sorted(items, key=lambda it: it[0])]

    def __len__(self) -> int:
        """Events buffered, not yet released."""
        return self._size

    # -- operations ----------------------------------------------------------------------------------------------
    def push(self, event: E) -> list[E]:
        """Add one event; return the events this releases (possibly none), in release order."""
        if event.ts < self.watermark:
            self.late += 1
            if self.late_policy == "drop":
                self.dropped += 1
                return self._release(self.watermark)
        if event.ts > self._max_ts:
            self._max_ts = event.ts
            self._max_seen_at = self._clock()
        queue = self._queues.setdefault(event.instance_id, deque())
        self._seq += 1
        if not queue:
            heapq.heappush(self._heads, (event.ts, self._seq, event.instance_id))
        queue.append((self._seq, event))
        self._size += 1
        return self._release(self.watermark)

    def push_many(self, events: list[E]) -> list[E]:
        out: list[E] = []
        for ev in events:
            out.extend(self.push(ev))
        return out

    def poll(self) -> list[E]:
        """Release what the wall clock alone has made due (call this when no events arrive)."""
        return self._release(self.watermark)

    def flush(self) -> list[E]:
        """Release everything (end of input), in the same order rules."""
        return self._release(math.inf)

    def _release(self, watermark: float) -> list[E]:
        out: list[E] = []
        while self._heads and (self._heads[0][0] <= watermark or self._over_capacity()):
            if self._heads[0][0] > watermark:
                self.forced += 1
            _, _, inst = heapq.heappop(self._heads)
            queue = self._queues[inst]
            _, event = queue.popleft()
            out.append(event)
            self._size -= 1
            if queue:
                seq, nxt = queue[0]
                heapq.heappush(self._heads, (nxt.ts, seq, inst))
            else:
                del self._queues[inst]
        self.released += len(out)
        return out

    def _over_capacity(self) -> bool:
        return self.max_buffered is not None and self._size > self.max_buffered
