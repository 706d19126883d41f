"""The ``server_tokenize_us_per_token`` column and ``validate --tokenizer-us-per-token``: the server encodes every
prompt it receives, one at a time.

SGLang 0.5.9 ``managers/tokenizer_manager.py`` ``_tokenize_texts`` calls ``self.tokenizer(tokenizer_input)``
synchronously inside the tokenizer manager's asyncio process, so prompts sent as text are encoded one after the other:
a prompt reaches the scheduler when its own encoding and that of every prompt ahead of it are done
(`simcore.server.Server.submit`, docs/accuracy.md §3.14).
"""
from __future__ import annotations

import json

import pytest

from shadowsim.cli import main
from shadowsim.commands.validate import read_rows
from simcore.errors import UserError
from simcore.perf.validation import Protocol, rows_from_records, simulate_row

HEADER = ("id,model,gpu,precision,tp,ep,dp_attention,isl,osl,concurrency,request_rate,num_requests,"
          "sglang_version,measured_ttft_ms,measured_tpot_ms,measured_throughput_rps,warmup_requests,"
          "server_tokenize_us_per_token\n")
# a burst: 200 clients send one request each (200-token prompts, 50 output tokens), no warm-up; the server sees
# 208 tokens (aiperf's chat template, 8 tokens) and its tokenizer costs 1 ms per prompt token: 0.208 s per prompt
BURST = "b,Qwen/Qwen3-8B,h100_sxm,bf16,1,1,1,200,50,200,,200,0.5.5,,,,0,1000\n"


def test_the_column_is_read_and_checked() -> None:
    base = {"id": "r1", "model": "deepseek-ai/DeepSeek-V3", "gpu": "b200_sxm", "tp": "8", "isl": "1024",
            "osl": "1024", "concurrency": "4"}
    fields = [*base, "server_tokenize_us_per_token"]
    assert rows_from_records([{**base, "server_tokenize_us_per_token": "7.26"}], fields)[0] \
        .server_tokenize_us_per_token == 7.26
    assert rows_from_records([{**base, "server_tokenize_us_per_token": ""}], fields)[0] \
        .server_tokenize_us_per_token is None
    assert rows_from_records([base], list(base))[0].server_tokenize_us_per_token is None
    for bad in ("-1", "nan", "inf", "x"):
        with pytest.raises(UserError, match="server_tokenize_us_per_token"):
            rows_from_records([{**base, "server_tokenize_us_per_token": bad}], fields)


def test_a_burst_of_prompts_waits_for_the_one_tokenizer(tmp_path) -> None:
    p = tmp_path / "m.csv"
    p.write_text(HEADER + BURST)
    row = read_rows(p)[0]
    assert row.server_tokenize_us_per_token == 1000.0
    serial = simulate_row(row)
    off = simulate_row(row, protocol=Protocol(tokenizer_s_per_token=0.0))
    # prompt k (1…200) reaches the scheduler k × 0.208 s after the burst: mean 0.208 × 201 / 2 = 20.904 s; each is
    # then prefilled alone (a 208-token prefill on an H100: milliseconds) and its first token follows
    assert 20_904.0 < serial.predicted["ttft"] < 20_904.0 + 100.0
    assert off.predicted["ttft"] < 1_000.0
    # the protocol's value replaces the column for every row: 0.5 ms per token halves the queue
    half = simulate_row(row, protocol=Protocol(tokenizer_s_per_token=0.5e-3))
    assert 10_452.0 < half.predicted["ttft"] < 10_452.0 + 100.0


def test_cli_flag_overrides_the_column(tmp_path, capsys) -> None:
    p = tmp_path / "m.csv"
    p.write_text(HEADER + BURST)
    assert main(["validate", str(p), "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["predicted_ttft_ms"] > 20_904.0
    assert main(["validate", str(p), "--json", "-q", "--tokenizer-us-per-token", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["predicted_ttft_ms"] < 1_000.0
    assert main(["validate", str(p), "-q", "--tokenizer-us-per-token", "-5"]) == 2
    assert "tokenizer-us-per-token: must be a finite number >= 0, got -5 µs" in capsys.readouterr().err
    assert main(["validate", str(p), "-q", "--tokenizer-us-per-token", "inf"]) == 2  # as the column rejects it
    assert "tokenizer-us-per-token: must be a finite number >= 0, got inf µs" in capsys.readouterr().err
