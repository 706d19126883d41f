"""Log lines as log shippers put them into Kafka: a JSON envelope carrying the raw line.

* Vector: ``{"message": "...", "timestamp": "...", "host": "...", "container_name": "...", "source_type": ...}``;
* Fluent Bit / Docker json-file: ``{"log": "...\\n", "time": "...", "stream": "stdout",
  "kubernetes": {"pod_name": ..., "container_name": ...}}``;
* Filebeat: ``{"@timestamp": ..., "message": "...", "host": {"name": ...}, "container": {"name": ...},
  "kubernetes": {"pod": {"name": ...}}, "log": {"file": {"path": ...}}}`` (here ``log`` is an object).

The instance id is taken, in order, from the Kubernetes pod name, the container name, then the host name, unless
the caller fixed it (a Kafka key names the instance). The envelope's timestamp stands in for lines that carry none.
"""
from __future__ import annotations

from typing import Any

from streams.adapters import sglang_log
from streams.adapters.base import LineResult, ParseContext, finite
from streams.adapters.timestamps import parse_iso


def envelope_line(obj: dict[str, Any]) -> str | None:
    """The log line inside an envelope, or None when ``obj`` is not one."""
    msg = obj.get("message")
    if isinstance(msg, str):
        return msg
    log = obj.get("log")
    if isinstance(log, str):
        return log
    return None


def _name(v: object) -> str | None:
    return v.lstrip("/") if isinstance(v, str) and v else None  # Docker names start with '/'


def envelope_instance(obj: dict[str, Any]) -> str | None:
    """Pod name > container name > host name, as the shippers spell them (flat lookups: this runs per record)."""
    k8s = obj.get("kubernetes") or obj.get("k8s")
    if isinstance(k8s, dict):
        pod = k8s.get("pod_name") or k8s.get("pod")
        if isinstance(pod, dict):
            pod = pod.get("name")
        if _name(pod):
            return _name(pod)
    c = obj.get("container_name")
    if _name(c):
        return _name(c)
    c = obj.get("container")
    if isinstance(c, dict) and _name(c.get("name")):
        return _name(c.get("name"))
    if isinstance(k8s, dict) and _name(k8s.get("container_name")):
        return _name(k8s.get("container_name"))
    h = obj.get("host")
    if isinstance(h, dict):
        h = h.get("name") or h.get("hostname")
    if _name(h):
        return _name(h)
    return _name(obj.get("hostname"))


def envelope_ts(obj: dict[str, Any]) -> float | None:
    for key in ("timestamp", "@timestamp", "time", "date"):
        v = obj.get(key)
        if isinstance(v, str):
            ts = parse_iso(v)
            if ts is not None:
                return ts
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            f = finite(v)
            if f is not None:
                # epoch seconds, or milliseconds / nanoseconds from some shippers
                return f / 1e9 if f > 1e17 else f / 1e3 if f > 1e11 else f
    return None


def parse_envelope(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    """Parse the line inside an envelope with the log-line adapters, under the envelope's instance id."""
    line = envelope_line(obj)
    if line is None:
        return None
    ts = envelope_ts(obj)
    if ts is not None:
        ctx.last_ts = ts
    saved = ctx.instance_id
    if not ctx.scratch.get("instance_fixed"):
        inst = envelope_instance(obj)
        if inst:
            ctx.instance_id = inst
    try:
        return sglang_log.parse_line(line, ctx)
    finally:
        ctx.instance_id = saved
