"""Ship a log, metrics or trace file into Kafka: whole, followed like ``tail -F``, or replayed at N× its timing.

Two modes:

* **events** (default): the file is decoded here (``streams.decode``) and each event is sent as canonical JSON
  keyed by its instance id. Dead letters and skipped lines are counted, not sent.
* **raw** (``raw=True``): lines are sent as they are, keyed by the instance id, as a log shipper would; the
  consumer decodes them. Whole-document formats (Prometheus text, OTLP, bench console) go as one record.

Relative-time traces (Mooncake, ShareGPT: arrival times counted from 0) are anchored at ``start_ts`` (Unix seconds;
default: the wall time when publishing starts), so a replay describes *now* instead of 1970; files with their own
wall-clock times (SGLang logs, Azure traces) keep them. ``start_ts`` also times lines that precede a file's first
timestamp.

``speed`` paces sending by event time: an event ``t`` seconds after the first one is sent ``t / speed`` seconds
of wall time after it (never earlier; late events are not waited for). The clock and sleep are injected.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from simcore.errors import UserError
from simcore.events import Event

#: Formats whose unit is the whole file, not a line: they cannot be followed and go as one raw record.
WHOLE_FILE_FORMATS = ("otlp_proto", "otlp_json", "prometheus", "bench_console")


class _Producer(Protocol):
    def send(self, event: Event) -> Any: ...

    def send_raw(self, value: bytes, key: bytes | None = None) -> Any: ...

    def flush(self, timeout_s: float | None = None) -> None: ...


@dataclass
class PublishStats:
    """What a publish run did. ``records`` = Kafka records sent; ``events`` = events they carry (events mode)."""

    records: int = 0
    events: int = 0
    dead_letters: int = 0
    skipped: int = 0
    rotations: int = 0
    wall_s: float = 0.0
    dead_letter_samples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["wall_s"] = round(self.wall_s, 3)
        return d


class Pacer:
    """Waits so that event time advances at ``speed`` × wall time (``speed=None``: no waiting)."""

    def __init__(self, speed: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if speed is not None and speed <= 0:
            raise UserError("--speed", f"must be > 0, got {speed}", "2 replays twice as fast as recorded")
        self.speed, self._clock, self._sleep = speed, clock, sleep
        self._t0: float | None = None
        self._w0 = 0.0
        self._max_ts = -float("inf")

    def wait_for(self, ts: float | None) -> None:
        if self.speed is None or ts is None:
            return
        if self._t0 is None:
            self._t0, self._w0, self._max_ts = ts, self._clock(), ts
            return
        if ts <= self._max_ts:
            return  # out of order or same time: send now, never go back in time
        self._max_ts = ts
        delay = self._w0 + (ts - self._t0) / self.speed - self._clock()
        if delay > 0:
            self._sleep(delay)


class Progress:
    """A one-line progress report on a terminal, redrawn at most every ``every_s`` seconds."""

    def __init__(self, stream: TextIO | None, clock: Callable[[], float] = time.monotonic, every_s: float = 0.5):
        self.stream, self._clock, self.every_s = stream, clock, every_s
        self._start = clock()
        self._last = -float("inf")

    def update(self, stats: PublishStats, force: bool = False) -> None:
        if self.stream is None:
            return
        now = self._clock()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        rate = stats.records / max(now - self._start, 1e-9)
        self.stream.write(f"\rpublished {stats.records:,} records ({stats.events:,} events, {rate:,.0f}/s), "
                          f"{stats.dead_letters:,} dead letters, {stats.skipped:,} skipped ")
        self.stream.flush()

    def done(self, stats: PublishStats) -> None:
        if self.stream is not None:
            self.update(stats, force=True)
            self.stream.write("\n")
            self.stream.flush()


def terminal_progress(stream: TextIO = sys.stderr) -> Progress:
    """Progress on ``stream`` when it is a terminal, silent otherwise (pipes, CI logs)."""
    return Progress(stream if stream.isatty() else None)


class FilePublisher:
    """Publishes one file through ``producer`` (an ``EventProducer``)."""

    def __init__(self, producer: _Producer, *, fmt: str = "auto", instance_id: str | None = None,
                 raw: bool = False, speed: float | None = None, progress: Progress | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 start_ts: float | None = None, wall_clock: Callable[[], float] = time.time) -> None:
        from streams.decode import FORMATS  # noqa: PLC0415

        if fmt not in FORMATS:
            raise UserError("--format", f"unknown format {fmt!r}", f"choose one of {', '.join(FORMATS)}")
        self.producer, self.fmt, self.instance_id, self.raw = producer, fmt, instance_id, raw
        self.pacer = Pacer(speed, clock, sleep)
        self.progress = progress or Progress(None)
        self._clock = clock
        self.stats = PublishStats()
        self._key = (instance_id or "default").encode()
        self._start_ts, self._wall_clock = start_ts, wall_clock

    def anchor_ts(self) -> float:
        """Where relative times start: ``start_ts``, else the wall time now (Unix seconds)."""
        return self._start_ts if self._start_ts is not None else self._wall_clock()

    # -- sending -------------------------------------------------------------------------------------------------
    def _event(self, ev: Event) -> None:
        self.pacer.wait_for(ev.ts)
        self.producer.send(ev)
        self.stats.records += 1
        self.stats.events += 1

    def _raw(self, value: bytes, ts: float | None) -> None:
        self.pacer.wait_for(ts)
        self.producer.send_raw(value, self._key)
        self.stats.records += 1

    def _dead(self, reason: str, where: str) -> None:
        self.stats.dead_letters += 1
        if len(self.stats.dead_letter_samples) < 5:
            self.stats.dead_letter_samples.append(f"{where}: {reason}")

    # -- whole files ---------------------------------------------------------------------------------------------
    def publish_file(self, path: str | Path) -> PublishStats:
        """Publish the file as it is now; flushes the producer (every record acknowledged) before returning."""
        from streams.decode import detect_format, iter_file_events  # noqa: PLC0415

        p = Path(path)
        start = self._clock()
        try:
            if not self.raw:
                for item in iter_file_events(p, self.fmt, self.instance_id, start_ts=self.anchor_ts()):
                    if item.event is not None:
                        self._event(item.event)
                    elif item.dead_letter is not None:
                        self._dead(item.dead_letter.reason, f"{p.name}:{item.line_no}")
                    else:
                        self.stats.skipped += 1
                    self.progress.update(self.stats)
            else:
                with open(p, "rb") as fh:
                    fmt = self.fmt if self.fmt != "auto" else detect_format(fh.read(65536))
                if fmt in WHOLE_FILE_FORMATS:
                    self._raw(p.read_bytes(), None)
                else:
                    with open(p, "rb") as fh:
                        self._raw_lines((ln.rstrip(b"\r\n") for ln in fh), p.name, fmt)
        except OSError as exc:
            raise UserError("FILE", f"cannot read {p}: {exc.strerror or exc}", "check the path") from exc
        self.producer.flush()
        self.stats.wall_s = self._clock() - start
        self.progress.done(self.stats)
        return self.stats

    def _raw_lines(self, lines: Iterator[bytes], source: str, fmt: str) -> None:
        """Send lines as they are; decode them only to learn their time when pacing."""
        ctx = self._context(source)
        for line in lines:
            if not line.strip():
                continue
            ts = None
            if self.pacer.speed is not None:
                from streams.decode import decode_record  # noqa: PLC0415

                res = decode_record(line, source=source, fmt=fmt, ctx=ctx)
                ts = res.events[0].ts if res.events else None
            self._raw(line, ts)
            self.progress.update(self.stats)

    def _context(self, source: str) -> Any:
        from streams.adapters.base import ParseContext  # noqa: PLC0415

        ctx = ParseContext(source=source, instance_id=self.instance_id or "default", default_ts=self.anchor_ts())
        if self.instance_id:
            ctx.scratch["instance_fixed"] = True  # the command line names the instance: lines may not rename it
        return ctx

    # -- following -----------------------------------------------------------------------------------------------
    def follow(self, path: str | Path, *, stop: Callable[[], bool] | None = None, from_end: bool = False,
               idle_timeout_s: float | None = None, poll_interval_s: float = 0.25,
               sleep: Callable[[float], None] = time.sleep, flush_every: int = 500) -> PublishStats:
        """Publish lines as they are appended to ``path``, across rotation, until ``stop()`` or idle timeout.
        The file is read from its start (``from_end=True``: only what is appended from now on)."""
        from streams.decode import decode_record  # noqa: PLC0415
        from streams.follow import FileFollower  # noqa: PLC0415

        if self.fmt in WHOLE_FILE_FORMATS:
            raise UserError("--follow", f"format {self.fmt} is a whole document, not lines",
                            "publish it without --follow (each scrape as its own file)")
        p = Path(path)
        follower = FileFollower(p, from_end=from_end)
        ctx = self._context(p.name)
        start = self._clock()
        pending = 0
        try:
            for line in follower.lines(poll_interval_s=poll_interval_s, stop=stop, idle_timeout_s=idle_timeout_s,
                                       sleep=self._flushing_sleep(sleep)):
                if self.raw:
                    if line.strip():
                        self._raw(line, None)
                else:
                    res = decode_record(line, source=p.name, fmt=self.fmt, ctx=ctx)
                    for ev in res.events:
                        self._event(ev)
                    for dl in res.dead_letters:
                        self._dead(dl.reason, f"{p.name}:{ctx.line_no}")
                    if not res.events and not res.dead_letters:
                        self.stats.skipped += 1
                pending += 1
                if pending >= flush_every:
                    self.producer.flush()
                    pending = 0
                self.progress.update(self.stats)
        finally:
            self.stats.rotations = follower.rotations
            follower.close()
            self.producer.flush()
            self.stats.wall_s = self._clock() - start
            self.progress.done(self.stats)
        return self.stats

    def _flushing_sleep(self, sleep: Callable[[float], None]) -> Callable[[float], None]:
        """Flush before idling, so a followed line reaches Kafka within one poll interval."""

        def nap(seconds: float) -> None:
            self.producer.flush()
            sleep(seconds)

        return nap
