"""The event schema: every trace event is a frozen pydantic model in one union discriminated by ``kind``.

These tests pin the wire contract other components code against: JSON round-trips, strict validation, frozen
instances, and the JSON Schema that ``shadowsim schema`` prints.
"""
from __future__ import annotations

import pydantic
import pytest

from simcore import events as ev

SAMPLES: list[dict] = [
    {"kind": "server_config", "ts": 1.0, "max_total_num_tokens": 201681, "tp_size": 16, "page_size": 1},
    {"kind": "request_arrived", "ts": 2.5, "request_id": "r1", "prompt_tokens": 1024, "block_hashes": [1, 2],
     "block_size_tokens": 512, "max_new_tokens": 128, "ignore_eos": True, "priority": 0, "output_tokens_hint": 99},
    {"kind": "request_first_token", "ts": 2.9, "request_id": "r1", "ttft_s": 0.4},
    {"kind": "request_finished", "ts": 5.0, "request_id": "r1", "prompt_tokens": 1024, "output_tokens": 99,
     "cached_tokens": 512, "ttft_s": 0.4, "e2e_s": 2.5, "queue_time_s": 0.01, "num_retractions": 0,
     "arrival_ts": 2.5, "finish_reason": "length"},
    {"kind": "prefill_batch", "ts": 3.0, "new_seqs": 3, "new_tokens": 15000, "cached_tokens": 0,
     "token_usage": 0.05, "running_reqs": 0, "queue_reqs": 1, "pending_tokens": 0, "tp_rank": 0},
    {"kind": "decode_batch", "ts": 4.0, "running_reqs": 62, "kv_tokens": 81234, "token_usage": 0.31,
     "gen_throughput_tok_s": 1523.5, "queue_reqs": 0, "cuda_graph": True},
    {"kind": "retraction", "ts": 4.5, "num_retracted": 1, "old_new_token_ratio": 0.6348, "new_token_ratio": 0.7838},
    {"kind": "forward_pass", "ts": 4.6, "forward_mode": "decode", "batch_size": 8, "num_extend_tokens": 0,
     "sum_kv_tokens": 8000, "duration_s": 0.012},
    {"kind": "kv_stored", "ts": 4.7, "block_hashes": [11, 12], "parent_block_hash": 10, "token_ids": [1, 2],
     "block_size_tokens": 1},
    {"kind": "kv_removed", "ts": 4.8, "block_hashes": [11]},
    {"kind": "metrics_snapshot", "ts": 5.0, "model": "m", "running_reqs": 162, "queue_reqs": 2826,
     "token_usage": 0.28, "cache_hit_rate": 0.0075},
    {"kind": "benchmark_summary", "ts": 6.0, "backend": "sglang", "completed": 1648, "duration_s": 170.41,
     "mean_ttft_s": 44.2948},
]


REQUIRED_KINDS = {"server_config", "request_arrived", "request_first_token", "request_finished", "prefill_batch",
                  "decode_batch", "retraction", "forward_pass", "kv_stored", "kv_removed"}


def test_there_is_one_model_per_kind_and_the_required_kinds_exist():
    assert set(ev.EVENT_KINDS) == {s["kind"] for s in SAMPLES}
    assert REQUIRED_KINDS <= set(ev.EVENT_KINDS)
    assert len(ev.EVENT_KINDS) == 12


@pytest.mark.parametrize("raw", SAMPLES, ids=[s["kind"] for s in SAMPLES])
def test_every_kind_round_trips_through_canonical_json(raw):
    event = ev.parse_event(raw)
    assert type(event) is ev.KIND_TO_CLASS[raw["kind"]]
    assert event.schema_version == 1
    assert event.instance_id == "default"
    wire = ev.event_to_json(event)
    assert isinstance(wire, bytes)
    again = ev.parse_event(wire)
    assert again == event
    assert ev.parse_event(wire.decode()) == event


def test_events_are_frozen():
    event = ev.parse_event(SAMPLES[4])
    with pytest.raises(pydantic.ValidationError):
        event.new_tokens = 1  # type: ignore[misc]


def test_unknown_fields_wrong_versions_and_negative_counts_are_rejected():
    with pytest.raises(pydantic.ValidationError):
        ev.parse_event({**SAMPLES[4], "surprise": 1})
    with pytest.raises(pydantic.ValidationError):
        ev.parse_event({**SAMPLES[4], "schema_version": 2})
    with pytest.raises(pydantic.ValidationError):
        ev.parse_event({**SAMPLES[4], "new_tokens": -5})
    with pytest.raises(pydantic.ValidationError):
        ev.parse_event({"kind": "no_such_kind", "ts": 1.0})
    with pytest.raises(pydantic.ValidationError):
        ev.parse_event(b"{not json")


def test_event_json_leaves_out_none_but_keeps_kind_and_version():
    wire = ev.event_to_json(ev.KvRemoved(ts=1.0, block_hashes=[]))
    assert wire == (b'{"schema_version":1,"instance_id":"default","ts":1.0,"kind":"kv_removed",'
                    b'"block_hashes":[],"all_cleared":false}')


def test_json_schema_lists_every_kind_with_a_discriminator():
    schema = ev.event_json_schema()
    assert schema["discriminator"]["propertyName"] == "kind"
    assert set(schema["discriminator"]["mapping"]) == set(ev.EVENT_KINDS)
    prefill = schema["$defs"]["PrefillBatch"]
    assert set(prefill["required"]) >= {"ts", "new_seqs", "new_tokens", "cached_tokens"}


def test_docs_events_md_documents_every_kind_and_field(repo_dir):
    text = (repo_dir / "docs" / "events.md").read_text()
    missing = [f"{kind}.{name}" for kind, cls in ev.KIND_TO_CLASS.items() for name in cls.model_fields
               if f"`{name}`" not in text]
    assert missing == []
    assert all(f"`{kind}`" in text for kind in ev.EVENT_KINDS)
