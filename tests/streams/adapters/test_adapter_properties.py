"""Property: no input makes an adapter raise. Random bytes, random JSON and mutated real lines are fed to
``decode_record`` under every format; each record ends as events, quiet skips, or dead letters with a reason."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcore.events import EVENT_KINDS
from streams.adapters.base import ParseContext
from streams.adapters.sglang_log import parse_line
from streams.decode import FORMATS, decode_record

REAL_LINES = [
    "[2025-07-02 11:36:23 DP5 TP5] Decode batch. #running-req: 1, #token: 2765, token usage: 0.01, "
    "pre-allocated usage: 0.00, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 15.02, #queue-req: 0",
    "[2026-08-01 23:43:46] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, full token usage: 0.00, "
    "swa token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, "
    "input throughput (token/s): 1.81",
    "[gpu_id=0] Prefil batch. #new-seq: 1, #new-token: 7, #cached-token: 0, cache hit rate: 0.00%, "
    "#running-req: 0, #queue-req: 0",
    "[2025-01-07 20:16:26 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.6348 -> 0.7838",
    "[14:39:48 TP0] max_total_num_tokens=1218251, max_prefill_tokens=16384, max_running_requests=5119, "
    "context_len=32768",
    "[2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB",
    "[2026-10-30 12:00:05 TP0] ReqTimeStats(rid=mock1, input_len=100, cached_input_len=40, output_len=20, "
    "attempts=1, type=unified): queue_duration=10.00ms, forward_duration=990.00ms, entry_time=1793361601.000",
    "[2026-10-30 12:00:03] Finish: obj=GenerateReqInput(rid='abc'), out={'meta_info': {'id': 'abc', "
    "'prompt_tokens': 7, 'completion_tokens': 16, 'e2e_latency': 0.18}}",
    '{"timestamp": 0, "input_length": 1500, "output_length": 500, "hash_ids": [0, 1, 2]}',
    '{"input_toks": 3, "output_toks": 70, "arrival_time_ns": 46926808, "input_tok_ids": [1, 2, 3]}',
    '{"message": "[2025-01-08 20:17:32 TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, '
    'gen throughput (token/s): 33.38, #queue-req: 0", "host": "h"}',
    '{"request_parameters": "{}", "id": "r1", "prompt_tokens": 10, "completion_tokens": 2, "e2e_latency": 1.5}',
    'sglang:token_usage{model_name="m"} 0.28',
    "2023-11-16 18:17:03.9799600,4808,10",
    '{"kind": "kv_stored", "schema_version": 1, "ts": 1.0, "block_hashes": [1, 2]}',
]
ALPHABET = st.sampled_from(list("0123456789-.,:;[]{}()#%=' \"\r\n\t\x1b\x00abcTPDx->é"))


@st.composite
def mutated_line(draw):
    line = draw(st.sampled_from(REAL_LINES))
    chars = list(line)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["replace", "delete", "insert", "truncate", "duplicate"]))
        pos = draw(st.integers(0, max(0, len(chars) - 1)))
        if op == "replace" and chars:
            chars[pos] = draw(ALPHABET)
        elif op == "delete" and chars:
            del chars[pos]
        elif op == "insert":
            chars.insert(pos, draw(ALPHABET))
        elif op == "truncate":
            chars = chars[:pos]
        else:
            chars = chars[:pos] + chars[pos:pos + 20] + chars[pos:]
    return "".join(chars)


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
KEYS = st.sampled_from(["kind", "schema_version", "ts", "message", "log", "event", "rid", "obj", "out", "meta_info",
                        "request_parameters", "prompt_tokens", "completion_tokens", "e2e_latency", "input_length",
                        "timestamp", "hash_ids", "input_toks", "arrival_time_ns", "resourceSpans", "completed",
                        "duration", "input_lens", "output_lens", "ttfts", "itls", "id", "host", "kubernetes",
                        "model_path", "tp_size", "internal_states", "server_info", "memory_usage"])
JSON = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(KEYS, inner, max_size=6)), max_leaves=12)


def check(res) -> None:
    assert len(res.events) + res.skipped + len(res.dead_letters) >= 1
    for e in res.events:
        assert e.kind in EVENT_KINDS
    for d in res.dead_letters:
        assert isinstance(d.reason, str) and d.reason
        assert not d.reason.startswith("internal error"), d.reason


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(value=st.binary(max_size=300), fmt=st.sampled_from(FORMATS), key=st.none() | st.binary(max_size=8))
def test_random_bytes_under_every_format(value: bytes, fmt: str, key: bytes | None):
    check(decode_record(value, key=key, fmt=fmt))


@SETTINGS
@given(line=mutated_line(), fmt=st.sampled_from(FORMATS))
def test_mutated_real_lines_under_every_format(line: str, fmt: str):
    check(decode_record(line.encode("utf-8", errors="surrogatepass"), fmt=fmt))


@SETTINGS
@given(obj=JSON)
def test_random_json_shapes(obj):
    check(decode_record(json.dumps(obj).encode()))


@SETTINGS
@given(line=mutated_line())
def test_log_adapter_directly_returns_only_the_three_outcomes(line: str):
    res = parse_line(line, ParseContext())
    assert res is None or isinstance(res, (list, str))


@pytest.mark.parametrize("line", REAL_LINES)
def test_the_unmutated_seed_lines_all_parse(line: str):
    # a bare CSV row is not recognisable on its own: the Azure format is named (files are detected by the header)
    res = decode_record(line.encode(), fmt="azure" if line.startswith("2023-") else "auto")
    assert res.events and not res.dead_letters, res
