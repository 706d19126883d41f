"""Anchored mode: predicted latencies from the observed steps, S(t) = summed predicted time of steps ended by t.

Linear model used throughout (no overlap, so a step's wall time is its GPU time): 6 ms per step + 60 µs per new
prompt token + 0.1 ms per decoding request. A 1000-token prefill = 66 ms; a one-request decode step = 6.1 ms.
"""
from __future__ import annotations

from typing import Any

import pytest

from simcore.events import parse_event
from simcore.perf.base import LinearLatencyModel
from shadowsim.shadow.anchor import Anchor
from shadowsim.shadow.config import DriftConfig, InstanceConfig, LinearLatencyConfig, TimeConfig
from shadowsim.shadow.drift import OnlineCalibrator
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.twin import InstanceTwin

T = 1_000_000.0
LIN = LinearLatencyConfig(base_s=0.006, per_extend_token_s=6e-5, per_decode_req_s=1e-4, per_kv_token_s=0.0)


def ev(kind: str, ts: float, **kw: Any) -> Any:
    return parse_event({"kind": kind, "instance_id": "a", "ts": ts, **kw})


def prefill_fp(ts: float, tokens: int, cached: int = 0, n_decode: int = 0) -> Any:
    return ev("forward_pass", ts, forward_mode="mixed" if n_decode else "prefill", batch_size=1 + n_decode,
              num_extend_tokens=tokens, num_cached_tokens=cached, sum_kv_tokens=0, duration_s=0.05,
              num_decode_reqs=n_decode, num_prefill_reqs=1)


def decode_fp(ts: float, bs: int = 1) -> Any:
    return ev("forward_pass", ts, forward_mode="decode", batch_size=bs, num_extend_tokens=0, sum_kv_tokens=0,
              duration_s=0.006, num_decode_reqs=bs, num_prefill_reqs=0)


def test_steps_observed_before_the_first_request_finishes_count_towards_its_anchored_prediction() -> None:
    # The twin builds its simulator lazily, on the first request whose length is known (here: when r1 finishes).
    # The steps r1 ran before that must still be on the anchored timeline — dropping them made the demo's
    # long-prompt Mooncake instance show ~30 % anchored TPOT error while its free-running error was 0.5 %.
    cfg = InstanceConfig(latency_backend="linear", linear=LIN,
                         settings={"disable_overlap_schedule": True, "chunked_prefill_size": 8192})
    t = InstanceTwin("a", cfg, TimeConfig(allowed_lateness_s=0.0), DriftConfig(), engine_factory, lambda: 0.0)
    t.apply(ev("request_arrived", T, request_id="r1", prompt_tokens=1000))
    t.apply(prefill_fp(T + 0.1, 1000))
    for k in range(10):
        t.apply(decode_fp(T + 0.2 + 0.01 * k))
    t.apply(ev("request_finished", T + 0.29, request_id="r1", prompt_tokens=1000, output_tokens=11, ttft_s=0.1,
               e2e_s=0.29, arrival_ts=T, cached_tokens=0))
    t.apply(ev("decode_batch", T + 5.0, running_reqs=0))  # moves the watermark past the predicted finish
    (rec,) = t.out
    # TTFT = the 66 ms prefill; e2e adds ten 6.1 ms decode steps; TPOT = 61 ms / 10
    assert rec["anchored"]["ttft"] == pytest.approx(0.066)
    assert rec["anchored"]["e2e"] == pytest.approx(0.066 + 0.061)
    assert rec["anchored"]["tpot"] == pytest.approx(0.0061)
    # actual TPOT = (0.29 − 0.1) / 10 = 19 ms → |6.1 − 19| / 19
    assert rec["ape"]["anchored"]["tpot"] == pytest.approx((0.019 - 0.0061) / 0.019)


def test_another_requests_prefill_chunks_inside_a_decode_window_lengthen_its_anchored_tpot() -> None:
    # r1 decodes 4 tokens after its first token at T+0.1; between them the server runs a mixed step that prefills
    # a 2000-token chunk of another request next to r1's decode (the chunk attends 8192 cached tokens; the linear
    # model has no prefix cost). Steps: decode 6.1 ms, mixed 6 + 120 + 0.1 = 126.1 ms, decode 6.1, decode 6.1.
    lat = LinearLatencyModel(base_s=0.006, per_extend_token_s=6e-5, per_decode_req_s=1e-4, per_kv_token_s=0.0)
    a = Anchor(lat, (1, 2, 4, 8), OnlineCalibrator(), overlap=False)
    a.on_forward_pass(prefill_fp(T + 0.1, 1000))
    a.on_forward_pass(decode_fp(T + 0.11))
    a.on_forward_pass(prefill_fp(T + 0.25, 2000, cached=8192, n_decode=1))
    a.on_forward_pass(decode_fp(T + 0.26))
    a.on_forward_pass(decode_fp(T + 0.27))
    p = a.predict(T, T + 0.1, T + 0.27, output_tokens=5)
    assert p is not None
    assert p["ttft"] == pytest.approx(0.066)
    assert p["e2e"] == pytest.approx(0.066 + 0.0061 + 0.1261 + 0.0061 + 0.0061)
    assert p["tpot"] == pytest.approx((0.0061 + 0.1261 + 0.0061 + 0.0061) / 4)
    # a request arriving after the last step saw none of them: nothing to predict from
    assert a.predict(T + 0.3, T + 0.31, T + 0.4, output_tokens=2) is None


class _GenericLinear(LinearLatencyModel):
    """The same model through the generic path (not exactly ``LinearLatencyModel``: a ``BatchShape`` and
    ``LinearLatencyModel.step_time`` per line)."""


@pytest.mark.parametrize("overlap", [True, False])
def test_linear_pricing_of_batch_lines_written_out_equals_step_time_of_their_batch_shape(overlap: bool) -> None:
    # Anchor.on_prefill_batch / on_decode_batch price a LinearLatencyModel's step inline (no BatchShape, no
    # StepTime): the same floats, bit for bit, as the generic path, on seeded random lines and coefficients
    # (zero, negative, huge, infinite and NaN ones included; one- and many-request prefills, padded and eager
    # decodes, kv_tokens absent).
    import math
    import random

    rng = random.Random(11)
    odd = [0.0, -1e-4, 1e300, math.inf, -math.inf, math.nan]
    sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    for trial in range(60):
        coef = {k: (rng.choice(odd) if rng.random() < 0.2 else rng.uniform(0, 1e-3)) for k in
                ("base_s", "per_extend_token_s", "per_prefix_token_s", "per_decode_req_s", "per_kv_token_s", "cpu_s")}
        fast = Anchor(LinearLatencyModel(**coef), sizes, OnlineCalibrator(), overlap=overlap)
        slow = Anchor(_GenericLinear(**coef), sizes, OnlineCalibrator(), overlap=overlap)
        for i in range(200):
            ts = T + i * 0.01
            if rng.random() < 0.5:
                n = rng.choice([0, 1, 1, 2, 3, 7, 64])
                e = ev("prefill_batch", ts, new_seqs=n, new_tokens=rng.choice([0, 1, 2, 5, 100, 8191, 100_000]),
                       cached_tokens=rng.choice([0, 1, 3, 512, 70_000]), running_reqs=rng.randint(0, 300))
                fast.on_prefill_batch(e)
                slow.on_prefill_batch(e)
            else:
                kw: dict[str, Any] = {"running_reqs": rng.choice([0, 1, 3, 16, 17, 255, 256, 257, 1000])}
                if rng.random() < 0.8:
                    kw["kv_tokens"] = rng.choice([0, 1, 999, 123_456, 10**7])
                if rng.random() < 0.7:
                    kw["gen_throughput_tok_s"] = rng.choice([0.5, 400.0, 12_345.6])
                e = ev("decode_batch", ts, **kw)
                fast.on_decode_batch(e)
                slow.on_decode_batch(e)
        assert len(fast.timeline.cum_s) > 50, trial
        # repr: NaN == NaN is false, and -0.0 == 0.0 is true; the texts tell both apart
        assert [repr(x) for x in fast.timeline.cum_s] == [repr(x) for x in slow.timeline.cum_s], (trial, coef)
        assert fast.timeline.ts == slow.timeline.ts
        assert repr(fast.calibrator.snapshot()) == repr(slow.calibrator.snapshot()), (trial, coef)


def test_batch_line_fields_read_from_the_instance_dict_are_the_attributes() -> None:
    # Anchor.on_prefill_batch / on_decode_batch and the twin's batch handlers read a batch event's fields from its
    # __dict__ (pydantic keeps field values there; reading them skips BaseModel.__getattr__'s hook). They must be
    # exactly the attributes, for events built every way the ingest path builds them: the Kafka consumer's
    # decoder (its one-line fast path) and decode_record, on the benchmark's real SGLang log lines.
    from benchmarks.bench_ingest import records
    from simcore.events import DecodeBatch, PrefillBatch
    from streams.decode import decode_record
    from streams.kafka_io import RecordDecoder

    fast = RecordDecoder("auto")
    seen = {PrefillBatch: 0, DecodeBatch: 0}
    for i, (key, value) in enumerate(records(4000)):
        got, _ = fast(value, key, "t", 0, [], None)
        for e in list(got) + list(decode_record(value, key=key, fmt="auto").events):
            if type(e) in seen:
                seen[type(e)] += 1
                for name in type(e).model_fields:
                    assert e.__dict__[name] is getattr(e, name), (i, name)
    assert min(seen.values()) > 1000, seen
