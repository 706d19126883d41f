"""Bridge an SGLang ZMQ feed (KV-cache events or forward-pass metrics) into Kafka.

SGLang *binds* a PUB socket (``tcp://*:5557`` for KV events, ``ipc://...`` for forward-pass metrics); the bridge
*connects* a SUB socket to it, subscribes to every topic, decodes each message with ``streams.adapters.zmq`` and
sends the events through an ``EventProducer`` (key = instance id). PUB/SUB drops messages while nobody listens
and when the subscriber falls behind its high-water mark: the bridge counts sequence gaps (``missed``) so a
shadow knows its radix tree may have drifted. Undecodable messages are counted (``errors``), logged, and skipped.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import zmq

from simcore.events import Event
from streams.adapters.zmq import KINDS, ZmqDecodeError, decode_forward_pass, decode_kv_batch, split_frames

log = logging.getLogger(__name__)


class _Sink(Protocol):
    def send(self, event: Event) -> Any: ...

    def flush(self, timeout_s: float | None = None) -> None: ...


@dataclass
class BridgeStats:
    messages: int = 0
    events: int = 0
    errors: int = 0
    missed: int = 0  # sequence numbers skipped (KV events only: forward-pass messages carry no publisher seq)


class ZmqBridge:
    """Subscribe to ``endpoint`` and forward decoded events to ``sink`` (an ``EventProducer`` or any object with
    ``send(event)`` and ``flush()``). ``clock`` gives Unix seconds for feeds without their own timestamps."""

    def __init__(self, endpoint: str, kind: str, sink: _Sink, *, instance_id: str | None = None,
                 clock: Callable[[], float] = time.time, context: zmq.Context | None = None,
                 rcvhwm: int = 100_000) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.endpoint, self.kind, self.sink = endpoint, kind, sink
        self.instance_id = instance_id
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
            self.stats.errors += 1
            log.warning("skipping undecodable %s message: %s", self.kind, exc)
            return []
        for ev in events:
            self.sink.send(ev)
        self.stats.events += len(events)
        return events

    def run(self, *, max_messages: int | None = None, idle_timeout_s: float | None = None,
            stop: Callable[[], bool] | None = None, poll_interval_s: float = 0.2) -> BridgeStats:
        """Forward messages until ``max_messages`` were handled, ``idle_timeout_s`` passed without one, or
        ``stop()`` is true. Flushes the sink before returning."""
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
        return self.stats

    def close(self) -> None:
        self._sock.close(0)
