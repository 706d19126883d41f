"""`shadowsim validate --output-path-us-per-token/...`: the host-side serial stages in a benchmark run.

A serial output path of b seconds per emitted token can deliver at most 1/b tokens per second, whatever the GPU
does; with b = 1 ms it is far slower than Qwen3-8B's decode on an H100, so it sets the run's throughput.
"""
from __future__ import annotations

import json

import pytest

from shadowsim.cli import main
from shadowsim.commands.validate import read_rows
from simcore.errors import UserError
from simcore.perf.validation import Protocol, simulate_row

HEADER = ("id,model,gpu,precision,tp,ep,dp_attention,isl,osl,concurrency,request_rate,num_requests,"
          "sglang_version,measured_ttft_ms,measured_tpot_ms,measured_throughput_rps,warmup_requests\n")
# a burst: 200 clients send one request each (200-token prompts, 50 output tokens), no warm-up
BURST = "b,Qwen/Qwen3-8B,h100_sxm,bf16,1,1,1,200,50,200,,200,0.5.5,,,,0\n"


def test_a_slow_output_path_caps_the_burst_throughput(tmp_path) -> None:
    p = tmp_path / "m.csv"
    p.write_text(HEADER + BURST)
    row = read_rows(p)[0]
    free = simulate_row(row, protocol=Protocol())
    capped = simulate_row(row, protocol=Protocol(output_path_s_per_token=1e-3))
    # 200 × 50 tokens × 1 ms = 10 s of serial output work: at most 20 requests per second; a little less, as
    # the output path idles while the burst's first prefill chunks run (prefill-first stalls all decodes)
    assert free.predicted["throughput"] > 60
    assert 18.0 < capped.predicted["throughput"] <= 20.0
    # every step's 200 streams cost 200 ms in the output path: that is the client-visible TPOT
    assert capped.predicted["tpot"] == pytest.approx(200.0, rel=0.05)
    assert free.predicted["tpot"] < 30


def test_cli_flags_reach_the_simulation(tmp_path, capsys) -> None:
    p = tmp_path / "m.csv"
    p.write_text(HEADER + BURST)
    assert main(["validate", str(p), "--json", "-q", "--output-path-us-per-token", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 18.0 < out["rows"][0]["predicted_throughput_rps"] <= 20.0
    assert main(["validate", str(p), "-q", "--tokenizer-us-per-request", "-5"]) == 2
    assert "tokenizer-us-per-request: must be a finite number >= 0, got -5 µs" in capsys.readouterr().err


def test_protocol_rejects_negative_stage_costs() -> None:
    with pytest.raises(UserError, match="output-path-us-per-step"):
        Protocol(output_path_s_per_step=-1.0)
