"""The fidelity oracle's own machinery (oracle/): scenarios, the trace diff, the environment cache, the exit codes.

These run in the project environment and never need SGLang; `make oracle` is what runs SGLang's side.
"""
from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

import oracle.__main__ as oracle_main
from oracle import env as oracle_env
from oracle import shadow_side
from oracle.compare import compare_cache, compare_scheduler, format_row
from oracle.scenarios import (MOONCAKE_BLOCK_TOKENS, Scenario, all_scenarios, mooncake_requests, output_ids,
                              scheduler_scenarios, shared_prefix_workload, step_time_s)


def test_scenario_json_round_trip_keeps_every_field() -> None:
    for sc in all_scenarios():
        back = Scenario.from_json(sc.to_json())
        assert back == sc, sc.name
    names = [s.name for s in all_scenarios()]
    assert len(names) == len(set(names))
    assert {"closed-fcfs", "closed-lpm", "eos-reservation", "retraction", "chunked-prefill", "page16", "mixed-chunk",
            "priority-preemption", "overlap"} <= set(names)


def test_workload_is_seeded_and_shares_the_system_prompt() -> None:
    a = shared_prefix_workload(7, 20, 256, (300, 1500), (20, 200))
    b = shared_prefix_workload(7, 20, 256, (300, 1500), (20, 200))
    assert a == b
    assert all(r.input_ids[:256] == a[0].input_ids[:256] for r in a)
    assert len({tuple(r.input_ids[256:300]) for r in a}) == 20  # unique tails
    assert all(3 <= t < 32000 for r in a for t in r.input_ids)
    assert all(300 <= len(r.input_ids) < 1500 and 20 <= r.max_new_tokens < 200 for r in a)


def test_step_time_is_the_shared_linear_function() -> None:
    assert step_time_s(0, 0) == 0.0
    assert step_time_s(1000, 0) == pytest.approx(0.01 + 0.01)
    assert step_time_s(0, 32) == pytest.approx(0.01 + 0.0032)


def test_mooncake_blocks_expand_to_distinct_tokens(shared_dir: Path) -> None:
    trace = shared_dir / "data" / "mooncake" / "conversation_trace.jsonl"
    reqs = mooncake_requests(trace, 5)
    first = json.loads(trace.read_text().splitlines()[0])
    assert len(reqs[0]["prompt"]) == first["input_length"]
    assert reqs[0]["prompt"][:2] == [first["hash_ids"][0] * MOONCAKE_BLOCK_TOKENS,
                                     first["hash_ids"][0] * MOONCAKE_BLOCK_TOKENS + 1]
    # requests 0 and 1 share block 0 and nothing else
    assert reqs[0]["prompt"][:512] == reqs[1]["prompt"][:512] and reqs[0]["prompt"][512] != reqs[1]["prompt"][512]
    assert set(output_ids(0, 10)).isdisjoint(output_ids(1, 10)) and min(output_ids(3, 5)) < 0


def _trace(n_steps: int) -> dict:
    steps = [{"mode": "prefill", "rids": ["a"], "extend": [100], "prefix": [0], "n_dec": 0, "t": 0.0,
              "retracted": []}]
    steps += [{"mode": "decode", "n_dec": 1, "t": round(0.011 + i * 0.0101, 6), "retracted": []}
              for i in range(n_steps - 1)]
    return {"info": {}, "steps": steps,
            "reqs": {"a": {"arrival": 0.0, "first": 0.011, "finish": 0.5, "cached": 0, "output_len": n_steps}}}


def test_compare_reports_the_first_divergent_step_and_field() -> None:
    theirs = _trace(10)
    assert compare_scheduler("x", theirs, copy.deepcopy(theirs)).ok
    ours = copy.deepcopy(theirs)
    ours["steps"][4]["n_dec"] = 2
    ours["steps"][7]["retracted"] = ["a"]
    c = compare_scheduler("x", theirs, ours)
    assert not c.ok and c.divergent == 2 and c.compared == 10
    assert c.hit_tokens_ours == c.hit_tokens_sglang == 0  # the requests' reported cached tokens
    assert (c.first.where, c.first.field, c.first.ours, c.first.sglang) == ("step 4", "n_dec", 2, 1)
    assert "step 4: n_dec ours 2 vs SGLang 1" in format_row(c)


def test_compare_checks_times_and_requests_after_equal_steps() -> None:
    theirs = _trace(6)
    ours = copy.deepcopy(theirs)
    ours["steps"][3]["t"] += 1e-6  # within the 2 µs rounding tolerance
    assert compare_scheduler("x", theirs, ours).ok
    ours["steps"][3]["t"] += 1e-4
    assert compare_scheduler("x", theirs, ours).first.field == "t"
    ours = copy.deepcopy(theirs)
    ours["reqs"]["a"]["finish"] = 0.6
    c = compare_scheduler("x", theirs, ours)
    assert (c.first.where, c.first.field) == ("request a", "finish")
    ours = copy.deepcopy(theirs)
    ours["steps"].pop()
    assert compare_scheduler("x", theirs, ours).first.field == "number of steps"


def test_compare_cache_counts_hit_differences_and_tree_size() -> None:
    theirs = {"hits": [0, 512, 1024], "tree_size": 5000}
    c = compare_cache("m", theirs, {"hits": [0, 512, 1024], "tree_size": 5000})
    assert c.ok and (c.hit_tokens_ours, c.hit_tokens_sglang) == (1536, 1536)
    c = compare_cache("m", theirs, {"hits": [0, 600, 1024], "tree_size": 5000})
    assert (c.first.where, c.first.ours, c.first.sglang, c.divergent) == ("request 1", 600, 512, 1)
    c = compare_cache("m", theirs, {"hits": [0, 512, 1024], "tree_size": 4999})
    assert c.first.field == "size (tokens)"


def test_shadow_side_writes_the_trace_format() -> None:
    sc = scheduler_scenarios()[0]
    sc = replace(sc, requests=sc.requests[:40])
    out = shadow_side.run(sc)
    first = out["steps"][0]
    assert first["mode"] == "prefill" and first["rids"][0] == "q0000" and len(first["rids"]) == len(first["extend"])
    assert sum(first["extend"]) == 2048  # the 2,048-token chunk budget, the last prompt cut to fill it
    assert set(out["reqs"]) == {r.rid for r in sc.requests}
    # the shared system prompt is hit by every prefill after the first batch
    assert sum(sum(s["prefix"]) for s in out["steps"] if s["mode"] == "prefill") >= 8 * 256


def test_lock_hash_keys_the_environment_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWSIM_ORACLE_CACHE", str(tmp_path))
    h = oracle_env.lock_hash()
    assert oracle_env.env_dir() == tmp_path / f"oracle-{h}"
    assert not oracle_env.is_built()
    lock = tmp_path / "requirements.lock"
    lock.write_text("numpy==2.4.6\n")
    monkeypatch.setattr(oracle_env, "LOCK_FILES", (oracle_env.LOCK_FILES[0], lock))
    h2 = oracle_env.lock_hash()
    lock.write_text("numpy==2.4.5\n")
    assert len({h, h2, oracle_env.lock_hash()}) == 3


def test_a_failed_build_step_names_itself(tmp_path: Path) -> None:
    with open(tmp_path / "log", "w") as log, pytest.raises(oracle_env.EnvironmentBuildError,
                                                           match="dependency install failed .exit 3."):
        oracle_env._run("dependency install", ["sh", "-c", "exit 3"], log)


def test_make_oracle_fails_with_the_reason_when_the_environment_cannot_be_built(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def no_build() -> Path:
        raise oracle_env.EnvironmentBuildError("dependency install failed (exit 1); see /x.log")

    monkeypatch.setattr(oracle_env, "build", no_build)
    assert oracle_main.main(["--only", "closed-fcfs"]) == 2
    assert "cannot build the SGLang environment: dependency install failed" in capsys.readouterr().err


def test_unknown_scenario_is_an_error(capsys: pytest.CaptureFixture) -> None:
    assert oracle_main.main(["--only", "nope"]) == 2
    assert "unknown scenario(s) nope" in capsys.readouterr().err
