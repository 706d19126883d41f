"""Bridge an SGLang ZMQ feed (KV-cache events or forward-pass metrics) into Kafka.

SGLang *binds* a PUB socket (``tcp://*:5557`` for KV events, ``ipc://...`` for forward-pass metrics); the bridge
*connects* a SUB socket to it, subscribes to every topic, decodes each message with ``streams.adapters.zmq`` and
sends the events through an ``EventProducer`` (key = instance id). PUB/SUB drops messages while nobody listens
and when the subscriber falls behind its high-water mark: the bridge counts sequence gaps (``missed``) so a
shadow knows its radix tree may have drifted.

Undecodable messages are counted (``errors``) and, when the bridge has a ``dead_letters`` sink (``shadowsim
publish --zmq`` gives it one on ``sglang.events.dlq``), parked there with the reason: the payload frame as the
value, the instance id as the key, headers from ``streams.deadletter.zmq_dead_letter_headers`` (``source_topic`` =
``zmq:<endpoint>``, ``error``, the topic frame, ...). Without a sink they are logged and skipped. Either way the
feed goes on: a bad message never stops the bridge.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import zmq

from simcore.events import Event
from streams.deadletter import error_text, zmq_dead_letter_headers
from streams.adapters.zmq import KINDS, ZmqDecodeError, decode_forward_pass, decode_kv_batch, split_frames

log = logging.getLogger(__name__)


class _Sink(Protocol):
    def send(self, event: Event) -> Any: ...

    def flush(self, timeout_s: float | None = None) -> None: ...


class _RawSink(Protocol):
    """Where dead letters go: ``EventProducer`` on the dead-letter topic fits."""

    def send_raw(self, value: bytes, key: bytes | None = None, *,
                 headers: list[tuple[str, bytes]] | None = None) -> Any: ...

    def flush(self, timeout_s: float | None = None) -> None: ...


#: how many dead-letter reasons the summary keeps (the rest are only counted)
MAX_SAMPLES = 5


@dataclass
class BridgeStats:
    messages: int = 0
    events: int = 0
    errors: int = 0  # undecodable messages
    dead_letters: int = 0  # of those, parked on the dead-letter topic
    missed: int = 0  # sequence numbers skipped (KV events only: forward-pass messages carry no publisher seq)
    dead_letter_samples: list[str] = field(default_factory=list)  # first MAX_SAMPLES reasons, "#<offset>: why"


class ZmqBridge:
    """Subscribe to ``endpoint`` and forward decoded events to ``sink`` (an ``EventProducer`` or any object with
    ``send(event)`` and ``flush()``). ``clock`` gives Unix seconds for feeds without their own timestamps.
    ``dead_letters`` (an ``EventProducer`` on the dead-letter topic, or anything with ``send_raw`` and ``flush``)
    receives the undecodable messages; ``None`` logs and skips them."""

    def __init__(self, endpoint: str, kind: str, sink: _Sink, *, instance_id: str | None = None,
                 clock: Callable[[], float] = time.time, context: zmq.Context | None = None,
                 rcvhwm: int = 100_000, dead_letters: _RawSink | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.endpoint, self.kind, self.sink = endpoint, kind, sink
        self.instance_id = instance_id
        self.dead_letters = dead_letters
        self._clock = clock
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.connect(endpoint)
        self._last_seq: int | None = None
        self.stats = BridgeStats()

    def handle(self, frames: list[bytes]) -> list[Event]:
        """Decode one multipart message and send its events. Returns them (empty on a decode error)."""
        self.stats.messages += 1
        seq: int | None = None
        try:
            if self.kind == "kv-events":
                _, seq, _ = split_frames(frames)
                if seq is not None:
                    if self._last_seq is not None and seq > self._last_seq + 1:
                        self.stats.missed += seq - self._last_seq - 1
                    self._last_seq = seq
                events = decode_kv_batch(frames, instance_id=self.instance_id or "default",
                                         source=f"zmq:{self.endpoint}")
            else:
                events = [decode_forward_pass(frames, received_ts=self._clock(), instance_id=self.instance_id,
                                              source=f"zmq:{self.endpoint}")]
        except ZmqDecodeError as exc:
            self._dead_letter(frames, seq, exc)
            return []
        for ev in events:
            self.sink.send(ev)
        self.stats.events += len(events)
        return events

    def _dead_letter(self, frames: list[bytes], seq: int | None, exc: ZmqDecodeError) -> None:
        """Count an undecodable message and park it on the dead-letter sink, if there is one."""
        self.stats.errors += 1
        offset = seq if seq is not None else self.stats.messages  # publisher seq, else our message number
        reason = error_text(str(exc))
        if len(self.stats.dead_letter_samples) < MAX_SAMPLES:
            self.stats.dead_letter_samples.append(f"#{offset}: {reason}")
        if self.dead_letters is None:
            log.warning("skipping undecodable %s message #%d: %s", self.kind, offset, reason)
            return
        topic = frames[0] if len(frames) >= 2 else b""
        self.dead_letters.send_raw(frames[-1] if frames else b"", (self.instance_id or "default").encode(),
                                   headers=zmq_dead_letter_headers(self.endpoint, topic, offset, reason,
                                                                   kind=self.kind, frames=len(frames), seq=seq))
        self.stats.dead_letters += 1

    def run(self, *, max_messages: int | None = None, idle_timeout_s: float | None = None,
            stop: Callable[[], bool] | None = None, poll_interval_s: float = 0.2) -> BridgeStats:
        """Forward messages until ``max_messages`` were handled, ``idle_timeout_s`` passed without one, or
        ``stop()`` is true. Flushes the sink (and the dead-letter sink) before returning."""
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        last = time.monotonic()
        try:
            while not (stop is not None and stop()):
                if max_messages is not None and self.stats.messages >= max_messages:
                    break
                if dict(poller.poll(int(poll_interval_s * 1000))).get(self._sock):
                    while True:  # drain what is there without waiting
                        try:
                            frames = self._sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self.handle(frames)
                        if max_messages is not None and self.stats.messages >= max_messages:
                            break
                    last = time.monotonic()
                elif idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                    break
        finally:
            self.sink.flush()
            if self.dead_letters is not None:
                self.dead_letters.flush()
        return self.stats

    def close(self) -> None:
        self._sock.close(0)
