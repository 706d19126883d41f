"""Where the shadow's records come from: Kafka (``streams.kafka_io.EventConsumer``) or memory (tests, benchmarks,
the demo's fast scenario). Both yield ``ConsumedRecord``-shaped objects, per partition in offset order."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

TP = tuple[str, int]


@dataclass(frozen=True)
class Record:
    """Same fields as ``streams.kafka_io.ConsumedRecord`` (which the Kafka source returns)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    events: list[Any] = field(default_factory=list)
    error: str | None = None


class Source(Protocol):
    def poll_batch(self, timeout_s: float = 1.0, max_records: int | None = None) -> Sequence[Any]: ...

    def commit(self, offsets: dict[TP, int]) -> bool: ...

    def seek(self, partition: TP, offset: int) -> None: ...

    def assignment(self) -> set[TP]: ...

    def close(self) -> None: ...


SourceFactory = Callable[[Callable[[set[TP]], None], Callable[[set[TP]], None]], Source]
"""(on_assign, on_revoke) -> Source. The service passes its rebalance callbacks in."""


class MemorySource:
    """A fixed log of records per partition, all assigned to this one reader. ``committed`` records commits.

    The first ``poll_batch`` calls ``on_assign`` with every partition, like a consumer joining a group.
    """

    def __init__(self, records: Iterable[Record], on_assign: Callable[[set[TP]], None] | None = None,
                 on_revoke: Callable[[set[TP]], None] | None = None, batch: int = 500,
                 committed: dict[TP, int] | None = None) -> None:
        self.log: dict[TP, list[Record]] = {}
        for r in records:
            self.log.setdefault((r.topic, r.partition), []).append(r)
        self.committed: dict[TP, int] = dict(committed or {})
        self.pos = {tp: self.committed.get(tp, 0) for tp in self.log}
        self._on_assign, self._on_revoke, self._batch = on_assign, on_revoke, batch
        self._assigned = False
        self.dead_lettered: list[tuple[Any, str]] = []

    def poll_batch(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[Record]:
        if not self._assigned:
            self._assigned = True
            if self._on_assign is not None:
                self._on_assign(set(self.log))
        n = self._batch if max_records is None else max_records
        out: list[Record] = []
        for tp in sorted(self.log):
            recs = self.log[tp]
            start = self.pos[tp]
            # Offsets are dense from 0 in a memory log, so position == list index.
            chunk = recs[start:start + n - len(out)]
            out.extend(chunk)
            self.pos[tp] = start + len(chunk)
            if len(out) >= n:
                break
        return out

    def commit(self, offsets: dict[TP, int]) -> bool:
        self.committed.update(offsets)
        return True

    def seek(self, partition: TP, offset: int) -> None:
        # as a Kafka consumer with auto_offset_reset=earliest: a position past the end is reset to the start
        self.pos[partition] = offset if offset <= len(self.log.get(partition, ())) else 0

    def assignment(self) -> set[TP]:
        return set(self.log) if self._assigned else set()

    def flush_dead_letters(self) -> None:
        return None

    def offset_range(self, partition: TP) -> tuple[int, int]:
        """(earliest offset, end offset) of ``partition``, as Kafka's beginning/end offsets."""
        return 0, len(self.log.get(partition, ()))

    def dead_letter(self, record: Any, reason: str) -> None:
        """Park a record the service refused (kept in ``dead_lettered`` as (record, reason))."""
        self.dead_lettered.append((record, reason))

    def close(self) -> None:
        return None


def kafka_source_factory(bootstrap_servers: str, topic: str, group: str, dead_letter_topic: str | None,
                         **options: Any) -> SourceFactory:
    """A factory of ``EventConsumer`` group members (imported lazily: tests without Kafka never load it)."""

    def make(on_assign: Callable[[set[TP]], None], on_revoke: Callable[[set[TP]], None]) -> Source:
        from streams.kafka_io import EventConsumer  # noqa: PLC0415

        return EventConsumer(bootstrap_servers, topic, group, dead_letter_topic=dead_letter_topic,
                             on_assign=on_assign, on_revoke=on_revoke, **options)

    return make
