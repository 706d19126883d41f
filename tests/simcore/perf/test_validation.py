"""`shadowsim validate`: measurement rows, the benchmark they describe, and the error statistics."""
from __future__ import annotations

import csv
import json

import pytest

from shadowsim.cli import main
from simcore.errors import UserError
from shadowsim.commands.validate import read_rows
from simcore.perf.validation import Protocol, RowResult, ape, error_summary, simulate_row, validate

HEADER = ("id,model,gpu,precision,tp,ep,dp_attention,isl,osl,concurrency,request_rate,num_requests,"
          "sglang_version,measured_ttft_ms,measured_tpot_ms,measured_throughput_rps\n")


def write(tmp_path, *lines: str):
    p = tmp_path / "m.csv"
    p.write_text(HEADER + "".join(line + "\n" for line in lines))
    return p


def test_read_rows_handles_blanks(tmp_path) -> None:
    rows = read_rows(write(tmp_path, "a,Qwen/Qwen3-32B,h100_sxm,bf16,2,1,1,1024,128,16,,,0.5.1.post1,840.8,16.5,",
                           "b,Qwen/Qwen3-8B,h100_sxm,,1,,,512,64,,inf,40,,,,2.5"))
    a, b = rows
    assert (a.tp, a.isl, a.osl, a.concurrency, a.request_rate, a.num_requests) == (2, 1024, 128, 16, None, None)
    assert a.measured == {"ttft": 840.8, "tpot": 16.5, "throughput": None}
    assert (b.precision, b.ep, b.request_rate, b.num_requests, b.sglang_version) == (None, 1, None, 40, "0.5.9")
    assert b.measured["throughput"] == 2.5


def test_read_rows_errors_name_the_problem(tmp_path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_rows(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model\nx,y\n")
    with pytest.raises(UserError, match="lacks column"):
        read_rows(bad)
    with pytest.raises(UserError, match="not a number"):
        read_rows(write(tmp_path, "a,Qwen/Qwen3-32B,h100,bf16,two,1,1,1024,128,16,,,0.5.9,1,1,"))


def test_error_statistics() -> None:
    assert ape(110.0, 100.0) == pytest.approx(10.0) and ape(90.0, 100.0) == pytest.approx(10.0)
    assert ape(1.0, None) is None and ape(1.0, 0.0) is None
    results = [RowResult(None, {}, {"ttft": e, "tpot": None, "throughput": None}) for e in (10.0, 20.0, 30.0, 40.0)]
    s = error_summary(results)
    assert s["ttft"] == {"mape": 25.0, "median_ape": 25.0, "p90_ape": pytest.approx(37.0), "n": 4}
    assert s["tpot"] == {"mape": None, "median_ape": None, "p90_ape": None, "n": 0}


def test_unsimulatable_rows_are_skipped_with_a_reason(tmp_path) -> None:
    rows = read_rows(write(tmp_path,
                           "unknown,foo/bar,h100,bf16,1,1,1,10,10,1,,,0.5.9,1,1,",
                           "ep,Qwen/Qwen3-32B,h100,bf16,8,8,1,10,10,1,,,0.5.9,1,1,",
                           "dp,Qwen/Qwen3-32B,h100,bf16,8,1,8,10,10,1,,,0.5.9,1,1,",
                           "gpu,Qwen/Qwen3-32B,tpu,bf16,2,1,1,10,10,1,,,0.5.9,1,1,",
                           "ok,Qwen/Qwen3-32B,h100,bf16,2,1,1,10,10,1,,,0.5.9,1,1,"))
    calls = []

    def fake(row, **kw):
        calls.append(row.id)
        if row.gpu == "tpu":
            raise UserError("--gpu", "unknown GPU 'tpu'")
        if row.model == "foo/bar":
            raise UserError("--model", "unknown model 'foo/bar'")
        return RowResult(row, {"ttft": 1.5, "tpot": 1.0, "throughput": 1.0}, {"ttft": 50.0, "tpot": 0.0})

    out = validate(rows, simulate_fn=fake)
    reasons = {s["id"]: s["reason"] for s in out["skipped"]}
    # expert parallelism (simcore/perf/moe_parallel) and DP attention (simcore/dp_attention) are simulated
    assert set(reasons) == {"unknown", "gpu"}
    assert "--gpu" in reasons["gpu"]
    assert calls == ["unknown", "ep", "dp", "gpu", "ok"]
    assert [r["id"] for r in out["rows"]] == ["ep", "dp", "ok"] and out["summary"]["ttft"]["mape"] == 50.0


def test_real_simulation_of_a_small_closed_loop_row(tmp_path) -> None:
    rows = read_rows(write(tmp_path, "small,Qwen/Qwen3-32B,h100_sxm,bf16,4,1,1,1024,64,4,,12,0.5.9,100,10,"))
    r = simulate_row(rows[0])
    # 4 clients, 1024-token prompts on TP4: prefill ≈ 0.12 s for 4 prompts, decode ≈ 10 ms per token.
    assert 20 < r.predicted["ttft"] < 400
    assert 7 < r.predicted["tpot"] < 14
    assert r.predicted["throughput"] == pytest.approx(4 / (r.predicted["ttft"] / 1e3 + 63 * r.predicted["tpot"] / 1e3),
                                                      rel=0.2)
    assert r.ape["tpot"] == pytest.approx(abs(r.predicted["tpot"] - 10) * 10)


def test_warm_up_requests_run_but_are_not_measured(tmp_path) -> None:
    # aiperf's protocol: 2 × concurrency warm-up requests, then the measured ones (num_requests here, 6).
    row = read_rows(write(tmp_path, "w,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,32,3,,6,0.5.9,,,"))[0]
    warm = simulate_row(row, protocol=Protocol(warmup_per_client=2, prompt_overhead_tokens=0))
    cold = simulate_row(row, protocol=Protocol(warmup_per_client=0, prompt_overhead_tokens=0))
    assert warm.requests == cold.requests == 6
    # identical requests from clients that start together move in lockstep waves, so a steady closed loop
    # looks the same after its warm-up: same TTFT, TPOT and throughput
    for m in ("ttft", "tpot", "throughput"):
        assert warm.predicted[m] == pytest.approx(cold.predicted[m], rel=1e-9)
    default = simulate_row(read_rows(write(tmp_path, "d,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,32,3,,,0.5.9,,,"))[0])
    assert default.requests == 20 * 3  # REQUESTS_PER_CLIENT × concurrency when num_requests is blank


def test_chat_template_tokens_break_exact_chunk_fills(tmp_path) -> None:
    # 16 prompts of exactly 1024 tokens fill two 8192-token prefill chunks to the token; with the 8 tokens a chat
    # template adds, the 8th, 16th prompts straddle chunk boundaries and a third prefill step is needed.
    row = read_rows(write(tmp_path, "c,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,1024,8,16,,16,0.5.9,,,"))[0]
    exact = simulate_row(row, protocol=Protocol(warmup_per_client=0, prompt_overhead_tokens=0))
    chat = simulate_row(row, protocol=Protocol(warmup_per_client=0))
    assert 1.02 < chat.predicted["ttft"] / exact.predicted["ttft"] < 1.5


def test_protocol_rejects_impossible_counts() -> None:
    with pytest.raises(UserError, match="requests-per-client"):
        Protocol(requests_per_client=0)
    with pytest.raises(UserError, match="warmup-per-client"):
        Protocol(warmup_per_client=-1)
    with pytest.raises(UserError, match="prompt-overhead-tokens"):
        Protocol(prompt_overhead_tokens=-8)


def test_cli_json_and_rows_csv(tmp_path, capsys) -> None:
    m = write(tmp_path, "small,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,256,16,2,,4,0.5.9,50,8,",
              "bad,Nope/Model,h100_sxm,bf16,8,1,1,256,16,2,,4,0.5.9,50,8,")
    out_csv = tmp_path / "rows.csv"
    assert main(["validate", str(m), "--json", "-q", "--out", str(out_csv)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"rows", "summary", "skipped"}
    assert set(doc["summary"]) == {"ttft", "tpot", "throughput", "e2e"}
    assert set(doc["summary"]["ttft"]) == {"mape", "median_ape", "p90_ape", "n"}
    assert doc["skipped"][0]["id"] == "bad" and "unknown model" in doc["skipped"][0]["reason"]
    with open(out_csv) as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["id"] == "small" and float(rows[0]["predicted_tpot_ms"]) > 0


def test_cli_protocol_flags(tmp_path, capsys) -> None:
    m = write(tmp_path, "small,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,256,16,2,,,0.5.9,50,8,")
    assert main(["validate", str(m), "--json", "-q", "--requests-per-client", "2", "--warmup-per-client", "0",
                 "--prompt-overhead-tokens", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["predicted_throughput_rps"] > 0
    assert main(["validate", str(m), "-q", "--requests-per-client", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shadowsim: error: --requests-per-client") and err.count("\n") == 1


def test_cli_missing_file_is_a_one_line_error(capsys) -> None:
    assert main(["validate", "/nonexistent.csv"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shadowsim: error: MEASUREMENTS") and err.count("\n") == 1


HEADER_ARGS = HEADER.rstrip("\n") + ",server_args\n"


def write_args(tmp_path, *lines: str):
    p = tmp_path / "a.csv"
    p.write_text(HEADER_ARGS + "".join(line + "\n" for line in lines))
    return p


def test_server_args_column_is_parsed_and_labelled(tmp_path) -> None:
    rows = read_rows(write_args(tmp_path, 'a,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,16,4,,8,0.5.9,,,,'
                                          '"--enable-mixed-chunk  --max-prefill-tokens 2012"',
                                "b,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,16,4,,8,0.5.9,,,,"))
    a, b = rows
    assert a.server_settings == {"enable_mixed_chunk": True, "max_prefill_tokens": 2012}
    assert a.server_args == "--enable-mixed-chunk --max-prefill-tokens 2012"
    assert (b.server_args, b.server_settings) == (None, {})
    ra, rb = simulate_row(a), simulate_row(b)
    assert ra.extra["deployment"] == "as deployed: --enable-mixed-chunk --max-prefill-tokens 2012"
    assert rb.extra["deployment"] == "SGLang defaults (no server_args)"
    ignored = simulate_row(a, protocol=Protocol(deployment="defaults"))
    assert ignored.extra["deployment"] == "SGLang defaults (server_args ignored)"
    assert ignored.predicted == rb.predicted  # same row, same defaults, same numbers
    # --server-args fills rows without the column only
    both = simulate_row(b, protocol=Protocol(server_args="--enable-mixed-chunk --max-prefill-tokens {isl+1500}"))
    assert both.predicted == ra.predicted and both.extra["server_args_source"] == "--server-args"
    # flags: the same flags replace the column; the row's lengths fill the template (512 + 1500 = 2012)
    over = simulate_row(a, protocol=Protocol(deployment="flags", server_args="--max-prefill-tokens {isl+1500}"))
    assert over.extra["deployment"] == "as deployed: --max-prefill-tokens 2012"
    with pytest.raises(UserError, match="--server-args"):
        Protocol(server_args="--max-prefill-tokens {prompt}")


def test_a_bad_flag_is_a_one_line_error_naming_row_and_flag(tmp_path, capsys) -> None:
    m = write_args(tmp_path, "ok,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,16,4,,8,0.5.9,,,,--enable-mixed-chunk",
                   "bad7,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,16,4,,8,0.5.9,,,,--enable-mixed-chunk --fast-mode")
    with pytest.raises(UserError, match=r"server_args: row bad7: unknown flag '--fast-mode'"):
        read_rows(m)
    assert main(["validate", str(m), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shadowsim: error: server_args: row bad7: unknown flag '--fast-mode'")
    assert err.count("\n") == 1


def test_a_flag_value_out_of_range_names_row_flags_and_rule(tmp_path) -> None:
    # parsed fine (an int), refused by ServerSettings' bound (page_size >= 1): simulate_row says which row and
    # which flags, as it does for an unknown flag
    row = read_rows(write_args(tmp_path, "pg0,Qwen/Qwen3-8B,h100_sxm,bf16,1,1,1,128,16,2,,8,0.5.9,,,,"
                                         "--page-size 0"))[0]
    with pytest.raises(UserError, match=r"server_args: row pg0: --page-size 0: should be greater than or equal to 1"):
        simulate_row(row)


def test_row_result_reports_e2e_percentiles_and_lockstep(tmp_path) -> None:
    row = read_rows(write(tmp_path, "r,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,32,4,,8,0.5.9,100,10,"))[0]
    r = simulate_row(row)
    e = r.extra
    assert e["predicted_ttft_p10_ms"] <= e["predicted_ttft_p50_ms"] <= e["predicted_ttft_p90_ms"]
    # a request's e2e is its TTFT plus 31 gaps of its TPOT; means of sums are sums of means
    assert r.predicted["e2e"] == pytest.approx(r.predicted["ttft"] + 31 * r.predicted["tpot"], rel=1e-9)
    assert r.to_dict()["measured_e2e_ms"] == pytest.approx(100 + 10 * 31)  # derived for fixed lengths
    assert e["predicted_output_tokens_per_s"] == pytest.approx(r.predicted["throughput"] * 32, rel=1e-9)
    # 4 identical clients after aiperf's barrier: every round one wave of 4 → lockstep 1.0, warned
    assert e["lockstep_index"] == pytest.approx(1.0) and "lockstep" in e["warnings"][0]


def test_replicas_are_seeded_and_give_intervals(tmp_path) -> None:
    from simcore.variability import Variability

    rows = read_rows(write(tmp_path, "r,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,16,4,,8,0.5.9,100,10,"))
    p = Protocol(variability=Variability.measured())
    one = validate(rows, protocol=p, seed=3, replicas=3)
    two = validate(rows, protocol=p, seed=3, replicas=3)
    assert one["rows"] == two["rows"] and one["intervals"] == two["intervals"] and one["seeds"] == [3, 4, 5]
    iv = one["rows"][0]["intervals"]["predicted_ttft_ms"]
    assert iv["p5"] < iv["p95"]  # jitter moves the figure between seeds
    assert one["intervals"]["ttft"]["mape"]["p5"] <= one["intervals"]["ttft"]["mape"]["p95"]
    # replica 0 is the plain run of the first seed
    assert validate(rows, protocol=p, seed=3)["rows"][0]["predicted_ttft_ms"] == one["rows"][0]["predicted_ttft_ms"]
    # off: every replica is the same deterministic run
    flat = validate(rows, seed=3, replicas=2)["rows"][0]["intervals"]["predicted_tpot_ms"]
    assert flat["p5"] == flat["p95"]


def test_only_selects_rows(tmp_path, capsys) -> None:
    m = write(tmp_path, "a,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,256,16,2,,4,0.5.9,50,8,",
              "b,Qwen/Qwen3-32B,h100_sxm,bf16,4,1,1,256,16,2,,4,0.5.9,50,8,")
    assert main(["validate", str(m), "--json", "-q", "--only", "tp=8.0"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["a"]
    assert main(["validate", str(m), "-q", "--only", "color=red"]) == 2
    assert "--only: no column 'color'" in capsys.readouterr().err


def test_generator_rule_by_version(tmp_path) -> None:
    from simcore.perf.validation import generator_server_args

    # aiconfigurator's rule_plugin/sglang.rule: max_prefill_tokens = isl + 1500 (2025-12-04), mixed chunk
    # (2026-01-19); versions released before (0.5.1.post1) ran SGLang's defaults
    assert generator_server_args(1024, "0.5.1.post1") is None
    assert generator_server_args(1024, "0.5.6") == "--max-prefill-tokens 2524"
    assert generator_server_args(8192, "0.5.8.post1") == "--enable-mixed-chunk --max-prefill-tokens 9692"
    row = read_rows(write(tmp_path, "g,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,16,4,,8,0.5.9,,,"))[0]
    r = simulate_row(row, protocol=Protocol(server_args="aiconfigurator"))
    assert r.extra["deployment"] == "as deployed: --enable-mixed-chunk --max-prefill-tokens 2012"


def test_bench_serving_rows_use_the_versions_length_rules(tmp_path) -> None:
    # client bench_serving, rate 8/s, 40 prompts, lengths uniform in [int(I·r), I] with r = 0.5: inputs 256–512,
    # outputs 16–32 tokens; no chat template (the random dataset sends text to /generate)
    head = HEADER.rstrip("\n") + ",client,random_range_ratio,seed\n"
    p = tmp_path / "b.csv"
    p.write_text(head + "o,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,32,,8,40,0.5.9,,,,bench_serving,0.5,7\n")
    row = read_rows(p)[0]
    assert (row.client, row.random_range_ratio, row.seed) == ("bench_serving", 0.5, 7)
    from simcore.perf.validation import _workload

    wl, warmup, client = _workload(row, Protocol(), 0)
    assert (warmup, client, len(wl.input_lens)) == (0, "bench_serving", 40)
    assert 256 <= min(wl.input_lens) and max(wl.input_lens) <= 512
    assert 16 <= min(wl.output_lens) and max(wl.output_lens) <= 32
    r = simulate_row(row)
    assert r.extra["client"] == "bench_serving" and r.requests == 40 and r.extra["lockstep_index"] is None
    out = simulate_row(row, protocol=Protocol(client="poisson"))
    assert out.extra["client"] == "poisson" and out.predicted != r.predicted
    p.write_text(head + "o,Qwen/Qwen3-32B,h100_sxm,bf16,8,1,1,512,32,,8,40,0.5.9,,,,vllm,,\n")
    with pytest.raises(UserError, match="row o: unknown client 'vllm'"):
        read_rows(p)
