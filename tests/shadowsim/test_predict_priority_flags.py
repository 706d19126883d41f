"""`shadowsim predict` priority-scheduling, prefill-cap and waiting-prefix-refresh flags (sglang-internals §2.4,
§2.9, §2.11): they reach the simulated scheduler, and impossible combinations are one-line errors (exit 2)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowsim.cli import main

BASE = ["predict", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-running-requests", "1"]


def _trace(tmp_path: Path) -> str:
    # a long low-priority request, then an urgent one 10 ms later: with one running slot it must wait for
    # 200 decode steps unless it preempts
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 0.0, "input_len": 512, "output_len": 200, "priority": 0}\n'
                 '{"arrival_s": 0.01, "input_len": 512, "output_len": 10, "priority": 50}\n')
    return str(p)


def _ttft_max(capsys: pytest.CaptureFixture[str], *args: str) -> float:
    assert main([*BASE, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["ttft_ms"]["p99"]


def test_priority_flags_change_who_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path)
    plain = _ttft_max(capsys, "--trace", trace)
    prio = _ttft_max(capsys, "--trace", trace, "--enable-priority-scheduling")
    no_preempt = _ttft_max(capsys, "--trace", trace, "--enable-priority-scheduling",
                           "--disable-priority-preemption")
    high_bar = _ttft_max(capsys, "--trace", trace, "--enable-priority-scheduling",
                         "--priority-scheduling-preemption-threshold", "60")
    # the urgent request waits ~200 decode steps without preemption; with it, about one step
    assert prio < plain / 5
    assert no_preempt == plain and high_bar == plain
    flipped = _ttft_max(capsys, "--trace", trace, "--enable-priority-scheduling",
                        "--schedule-low-priority-values-first")
    assert flipped == plain  # now 50 is the least urgent value: nobody is preempted


def test_prefill_max_requests_and_refresh_flags_run(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--concurrency", "4",
            "--num-requests", "8", "--input-len", "64", "--output-len", "4", "--json"]
    assert main([*args, "--prefill-max-requests", "1", "--waiting-prefix-refresh", "on",
                 "--sglang-version", "0.5.9"]) == 0
    assert json.loads(capsys.readouterr().out)["num_requests"] == 8


@pytest.mark.parametrize("extra,field", [
    (["--enable-priority-scheduling", "--schedule-policy", "lpm"], "enable_priority_scheduling"),
    (["--prefill-max-requests", "0"], "--prefill-max-requests"),
])
def test_bad_combinations_are_one_line_errors(extra: list[str], field: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--concurrency", "1", "--num-requests", "1", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shadowsim: error:") and field in err and "\n" not in err
