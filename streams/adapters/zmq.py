"""SGLang's ZMQ feeds → events: KV-cache events and forward-pass metrics (spec §5.5, §5.6).

Both feeds are ZMQ PUB sockets sending msgpack. This module only translates frames; ``streams.zmq_bridge`` owns
the socket.

**KV-cache events** (``--kv-events-config '{"publisher":"zmq","endpoint":...}'``). Multipart
``[topic, seq (8-byte big-endian), payload]``; ``payload`` is an ``EventBatch`` encoded as the positional array
``[ts, events, attn_dp_rank]`` (older builds: ``[ts, events]``). Each event is a msgspec tagged struct: the
array form ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...]``,
``["BlockRemoved", block_hashes, medium]``, ``["AllBlocksCleared"]`` — or the map form with a ``type`` tag, which
we accept too. Trailing fields may be missing (msgspec ``omit_defaults``).

* ``BlockStored`` → ``kv_stored``; ``BlockRemoved`` → ``kv_removed``; ``AllBlocksCleared`` → ``kv_removed`` with
  ``all_cleared``. Event time = the batch's ``ts``.
* Block hashes are ints (SGLang) or bytes (vLLM-style ``ExternalBlockHash``); bytes become big-endian ints.

**Forward-pass metrics** (``--enable-forward-pass-metrics``). One msgpack map per forward: ``version``,
``worker_id``, ``dp_rank``, ``counter_id``, ``wall_time`` (GPU seconds), ``scheduled_requests`` and
``queued_requests`` maps. It carries no timestamp, so the bridge passes the receive time (``received_ts``).
Mapping to ``forward_pass``: ``batch_size`` = scheduled prefill + decode requests; ``num_extend_tokens`` =
``sum_prefill_tokens``; ``num_cached_tokens`` = ``sum_prefill_kv_tokens`` (KV already there: cache hits and
earlier chunks); ``sum_kv_tokens`` = prefill KV + prefill new + decode KV (what attention reads);
``duration_s`` = ``wall_time``; ``forward_mode`` = prefill / decode / mixed / idle from the request counts.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from simcore.events import Event, ForwardPass, KvRemoved, KvStored

KINDS = ("kv-events", "forward-pass")


class ZmqDecodeError(ValueError):
    """A frame that is not a KV-event batch / forward-pass message."""


def split_frames(frames: Sequence[bytes]) -> tuple[bytes, int | None, bytes]:
    """``(topic, seq, payload)`` from a multipart message: ``[payload]``, ``[topic, payload]`` or
    ``[topic, seq, payload]`` (``seq`` an 8-byte big-endian counter)."""
    if not frames:
        raise ZmqDecodeError("empty message")
    payload = frames[-1]
    topic = frames[0] if len(frames) >= 2 else b""
    seq = None
    if len(frames) >= 3 and len(frames[-2]) == 8:
        seq = int.from_bytes(frames[-2], "big")
    return topic, seq, payload


def _unpack(payload: bytes) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types
        raise ZmqDecodeError(f"not msgpack: {type(exc).__name__}: {exc}") from exc


def _hash(h: Any) -> int:
    if isinstance(h, bool):
        raise ZmqDecodeError("block hash is a bool")
    if isinstance(h, int):
        return h
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(h, "big")
    raise ZmqDecodeError(f"block hash of type {type(h).__name__}")


def _hashes(v: Any) -> list[int]:
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise ZmqDecodeError("block_hashes is not a list")
    return [_hash(h) for h in v]


_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
_REMOVED_FIELDS = ("block_hashes", "medium")


def _as_map(ev: Any) -> tuple[str, dict[str, Any]]:
    """A tagged event (array or map form) as ``(tag, fields)``."""
    if isinstance(ev, dict):
        tag = ev.get("type") or ev.get("tag") or ev.get("kind")
        return str(tag), ev
    if isinstance(ev, (list, tuple)) and ev and isinstance(ev[0], str):
        tag = ev[0]
        names = _STORED_FIELDS if tag == "BlockStored" else _REMOVED_FIELDS if tag == "BlockRemoved" else ()
        return tag, dict(zip(names, ev[1:], strict=False))  # trailing defaults may be omitted
    raise ZmqDecodeError(f"event is neither a tagged array nor a map: {str(ev)[:80]}")


def decode_kv_batch(frames: Sequence[bytes], *, instance_id: str = "default", source: str = "zmq:kv-events"
                    ) -> list[Event]:
    """One KV-event message → ``kv_stored`` / ``kv_removed`` events. Raises ``ZmqDecodeError``."""
    _, seq, payload = split_frames(frames)
    batch = _unpack(payload)
    if isinstance(batch, dict):
        ts, events, dp_rank = batch.get("ts"), batch.get("events"), batch.get("attn_dp_rank")
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        ts, events = batch[0], batch[1]
        dp_rank = batch[2] if len(batch) >= 3 else None
    else:
        raise ZmqDecodeError("not an EventBatch [ts, events, attn_dp_rank]")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not isinstance(events, (list, tuple)):
        raise ZmqDecodeError("EventBatch needs a numeric ts and a list of events")
    dp = dp_rank if isinstance(dp_rank, int) and dp_rank >= 0 else None
    out: list[Event] = []
    for i, ev in enumerate(events):
        tag, f = _as_map(ev)
        eid = f"kv:{instance_id}:{dp if dp is not None else 0}:{seq if seq is not None else 'x'}:{i}"
        common: dict[str, Any] = {"instance_id": instance_id, "ts": float(ts), "source": source, "event_id": eid,
                                  "medium": f.get("medium"), "dp_rank": dp}
        try:
            if tag == "BlockStored":
                parent = f.get("parent_block_hash")
                out.append(KvStored(block_hashes=_hashes(f.get("block_hashes")),
                                    parent_block_hash=_hash(parent) if parent is not None else None,
                                    token_ids=list(f["token_ids"]) if f.get("token_ids") is not None else None,
                                    block_size_tokens=f.get("block_size"), **common))
            elif tag == "BlockRemoved":
                out.append(KvRemoved(block_hashes=_hashes(f.get("block_hashes")), **common))
            elif tag == "AllBlocksCleared":
                out.append(KvRemoved(block_hashes=[], all_cleared=True, **common))
            else:
                raise ZmqDecodeError(f"unknown KV event {tag!r}")
        except ZmqDecodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - pydantic validation and friends
            raise ZmqDecodeError(f"{tag}: {' '.join(str(exc).split())[:300]}") from exc
    return out


def _num(m: dict[str, Any], key: str) -> float:
    v = m.get(key, 0) or 0
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise ZmqDecodeError(f"{key} is not a number")
    return v


def decode_forward_pass(frames: Sequence[bytes], *, received_ts: float, instance_id: str | None = None,
                        source: str = "zmq:forward-pass") -> ForwardPass:
    """One forward-pass-metrics message → a ``forward_pass`` event (``ts`` = ``received_ts``, Unix s).

    The instance is ``instance_id`` when given, else the message's ``worker_id``, else ``"default"``."""
    _, _, payload = split_frames(frames)
    m = _unpack(payload)
    if not isinstance(m, dict) or "wall_time" not in m:
        raise ZmqDecodeError("not a ForwardPassMetrics map (no wall_time)")
    sched = m.get("scheduled_requests") or {}
    queued = m.get("queued_requests") or {}
    if not isinstance(sched, dict) or not isinstance(queued, dict):
        raise ZmqDecodeError("scheduled_requests / queued_requests are not maps")
    n_pre, n_dec = int(_num(sched, "num_prefill_requests")), int(_num(sched, "num_decode_requests"))
    pre_tok, pre_kv = int(_num(sched, "sum_prefill_tokens")), int(_num(sched, "sum_prefill_kv_tokens"))
    dec_kv = int(_num(sched, "sum_decode_kv_tokens"))
    mode = "mixed" if n_pre and n_dec else "prefill" if n_pre else "decode" if n_dec else "idle"
    worker = instance_id or str(m.get("worker_id") or "") or "default"
    dp = int(_num(m, "dp_rank"))
    counter = int(_num(m, "counter_id"))
    try:
        return ForwardPass(
            instance_id=worker, ts=received_ts, source=source, event_id=f"fpm:{worker}:{dp}:{counter}",
            forward_mode=mode, batch_size=n_pre + n_dec, num_extend_tokens=pre_tok, num_cached_tokens=pre_kv,
            sum_kv_tokens=pre_kv + pre_tok + dec_kv, duration_s=float(_num(m, "wall_time")),
            num_decode_reqs=n_dec, num_prefill_reqs=n_pre,
            queued_reqs=int(_num(queued, "num_prefill_requests")) + int(_num(queued, "num_decode_requests")),
            dp_rank=dp, forward_iter=counter,
        )
    except Exception as exc:  # noqa: BLE001
        raise ZmqDecodeError(f"forward pass: {' '.join(str(exc).split())[:300]}") from exc
