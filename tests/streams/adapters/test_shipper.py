"""Log lines wrapped by log shippers (Vector, Fluent Bit, Filebeat, Docker json-file) parse like raw lines, and
the envelope names the instance unless the Kafka key already does."""
from __future__ import annotations

import json

from streams.decode import decode_record

LINE = ("[2025-01-08 20:17:32 TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
        "gen throughput (token/s): 33.38, #queue-req: 0")
T_LINE = 1736367452.0  # 2025-01-08 20:17:32 UTC


def test_vector_envelope_uses_host_then_container_name():
    env = {"message": LINE, "timestamp": "2025-01-08T20:17:33.120Z", "host": "node-7",
           "container_name": "sglang-a", "source_type": "docker_logs"}
    (e,) = decode_record(json.dumps(env).encode(), source="logs").events
    assert (e.kind, e.instance_id, e.ts, e.kv_tokens) == ("decode_batch", "sglang-a", T_LINE, 27373)


def test_fluent_bit_kubernetes_envelope_and_line_without_timestamp_takes_the_envelope_time():
    env = {"log": "[gpu=0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, #running-req: 0, "
                  "#queue-req: 0\n",
           "stream": "stdout", "time": "2025-01-08T20:17:40.5Z",
           "kubernetes": {"pod_name": "sglang-llama-0", "namespace_name": "llm", "container_name": "server"}}
    (e,) = decode_record(json.dumps(env).encode()).events
    assert (e.instance_id, e.ts, e.new_tokens, e.tp_rank) == ("sglang-llama-0", T_LINE + 8.5, 7, 0)


def test_filebeat_envelope_where_log_is_an_object():
    env = {"@timestamp": "2025-01-08T20:17:32.000Z", "message": LINE, "log": {"file": {"path": "/var/log/s.log"}},
           "host": {"name": "gpu-host-3"}, "agent": {"type": "filebeat"}}
    (e,) = decode_record(json.dumps(env).encode()).events
    assert e.instance_id == "gpu-host-3" and e.running_reqs == 2


def test_kafka_key_wins_over_the_envelope():
    env = {"message": LINE, "host": "node-7"}
    (e,) = decode_record(json.dumps(env).encode(), key=b"inst-42").events
    assert e.instance_id == "inst-42"


def test_envelope_with_a_non_sglang_line_is_skipped():
    env = {"log": 'INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK', "time": "2025-01-08T20:17:32Z"}
    res = decode_record(json.dumps(env).encode())
    assert (res.events, res.skipped, res.dead_letters) == ([], 1, [])
