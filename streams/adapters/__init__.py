"""Adapters: pure functions from SGLang wire formats to shadowsim events (``simcore.events``).

Each module handles one family of formats and returns a ``LineResult`` (events, skip, or dead-letter reason, see
``streams.adapters.base``). ``streams.decode`` picks the adapter and is the entry point for callers.

* ``sglang_log``   — server log lines of every era (batch lines, retractions, startup/config lines);
* ``log_prefix``   — the timestamp/rank prefix of a log line, and what collectors put before it;
* ``request_log``  — ``--log-requests`` text/JSON, ``--export-metrics-to-file`` lines, ``ReqTimeStats``;
* ``prometheus``   — ``/metrics`` text;
* ``bench_serving``— bench_serving console summary and ``--output-file`` JSON (with ``--output-details``);
* ``otlp``         — OTLP spans (``otlp_proto`` / ``otlp_json``) as the Collector's Kafka exporter writes them;
* ``shipper``      — Vector / Fluent Bit / Filebeat JSON envelopes around a log line;
* ``traces``       — Mooncake, ShareGPT-derived streams, Azure 2023 CSV;
* ``server_info``  — ``GET /server_info`` JSON (also inside bench_serving results);
* ``jsonline``     — recognises the shape of a JSON object and dispatches;
* ``zmq``          — SGLang ZMQ feeds (KV events, forward-pass metrics), owned by the Kafka side.
"""
from streams.adapters.base import DeadLetter, LineResult, ParseContext

__all__ = ["DeadLetter", "LineResult", "ParseContext"]
