"""The Python API's contract beyond the doc examples: keyword checking, workload objects, the sweep result's
methods against brute force, and results that survive a round trip through their --json form."""
from __future__ import annotations

import json

import pytest

import shadowsim
from shadowsim.api import Prediction, SweepResult
from shadowsim.cli import main

M8 = dict(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100_sxm")


def test_unknown_keywords_and_clashing_workloads_are_user_errors() -> None:
    with pytest.raises(shadowsim.UserError, match="schedule_polcy: unknown keyword.*schedule_policy"):
        shadowsim.predict(**M8, concurrency=2, schedule_polcy="lpm")
    w = shadowsim.closed_loop(concurrency=2, num_requests=4)
    with pytest.raises(shadowsim.UserError, match="concurrency: given both"):
        shadowsim.predict(**M8, workload=w, concurrency=3)
    with pytest.raises(shadowsim.UserError, match="expected a shadowsim workload"):
        shadowsim.predict(**M8, workload={"concurrency": 2})  # type: ignore[arg-type]
    with pytest.raises(shadowsim.UserError, match="fractions must add up to 1"):
        shadowsim.scenario({"a": (0.5, (10, 20), (10, 20))}, request_rate=1)
    with pytest.raises(shadowsim.UserError, match="exactly one of"):
        shadowsim.scenario("chat")
    with pytest.raises(shadowsim.UserError, match="concurrency: must be > 0"):
        shadowsim.closed_loop(concurrency=0)


def test_the_api_and_the_cli_give_the_same_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    p = shadowsim.predict(**M8, concurrency=4, num_requests=16, input_len=300, output_len=20, schedule_policy="lpm")
    assert main(["predict", "--model", M8["model"], "--gpu", M8["gpu"], "--concurrency", "4", "--num-requests",
                 "16", "--input-len", "300", "--output-len", "20", "--schedule-policy", "lpm", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = p.to_dict()
    for d in (cli, api):
        d.pop("wall_time_s")
    # the CLI loads its latency tables from the on-disk cache (shadowsim.cli.table_cache_dir), the API builds
    # them: the same numbers to float rounding
    assert api.keys() == cli.keys()
    assert _close(api, cli)
    again = Prediction.from_dict(cli)
    assert again.ttft_ms == cli["ttft_ms"] and again.memory == cli["memory"] and again.records == []


def _close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-6)
    return a == b


def test_sweep_result_methods_match_brute_force() -> None:
    s = shadowsim.sweep(**{**M8, "gpu": ["h100_sxm", "a100_sxm"]}, tp=[1, 2], request_rate=[4, 12],
                        num_requests=40, input_len=512, output_len=64, slo_ttft_ms=80, slo_tpot_ms=12)
    feasible = [p for p in s.points if p["slo_both_ok"] >= 0.9]
    best = max(feasible, key=lambda p: p["output_tokens_per_s_per_gpu"])
    assert s.best() == best
    own = s.best(slo={"ttft_p90_ms": 80, "tpot_p90_ms": 12})
    assert own["ttft_p90_ms"] <= 80 and own["tpot_p90_ms"] <= 12
    with pytest.raises(shadowsim.UserError, match="no simulated point meets it"):
        s.best(slo={"ttft_p90_ms": 0.001})
    with pytest.raises(shadowsim.UserError, match="unknown figure"):
        s.best(slo={"ttft_p90": 100})
    for row in s.max_rate_under_slo():
        meets = [p["request_rate"] for p in feasible if (p["gpu"], p["tp"]) == (row["gpu"], row["tp"])]
        assert row["max_rate_rps"] == (max(meets) if meets else None)
    assert {p["id"] for p in s.pareto()} == set(s.raw["pareto"])  # the API and the CLI's JSON agree
    back = SweepResult.from_dict(json.loads(json.dumps(s.to_dict())))
    assert [p["id"] for p in back.pareto()] == [p["id"] for p in s.pareto()] and back.best() == s.best()


def test_report_stays_the_function_after_the_html_package_is_imported() -> None:
    # A sub-package named like the API function would replace it on the parent package once imported
    # (Python binds submodules as attributes of their package): shadowsim.report must stay callable.
    import importlib

    import shadowsim

    importlib.import_module("shadowsim.html_report")
    assert callable(shadowsim.report)
    assert shadowsim.report.__module__ == "shadowsim.api"
