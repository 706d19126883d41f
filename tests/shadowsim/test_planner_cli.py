"""The capacity planner's command-line conventions: intervals from --replicas, warnings that stop silent wrong
answers, the catalogue commands, --version, a sub-command's own usage, JSON on stdout with units in the keys."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowsim.cli import main

M8 = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100_sxm"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_predict_replicas_carry_p5_p50_p95_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", *M8, "--concurrency", "8", "--num-requests", "48", "--input-len", "512", "--output-len", "64"]
    s, _ = _json(capsys, *base, "--replicas", "10")
    assert s["replicas"] == 10 and s["replica_seeds"] == list(range(10))
    assert s["server"]["variability"]["step_time_cv"] == 0.05  # --replicas turns the measured variability on
    iv = s["intervals_p5_p95"]
    for key in ("throughput_rps", "ttft_p50_ms", "ttft_p90_ms", "tpot_p90_ms", "e2e_p99_ms"):
        assert iv[key]["p5"] <= iv[key]["p50"] <= iv[key]["p95"], key
    # jitter makes the replicas differ: a real interval, not a point
    assert iv["tpot_p50_ms"]["p95"] > iv["tpot_p50_ms"]["p5"]
    # replica 0 is the single run of the same seed with the same variability
    one, _ = _json(capsys, *base, "--variability", "measured")
    assert one["tpot_ms"] == s["tpot_ms"] and one["ttft_ms"] == s["ttft_ms"]
    # without variability one replica is the deterministic simulator
    plain, _ = _json(capsys, *base)
    assert plain["server"]["variability"]["step_time_cv"] == 0 and "intervals_p5_p95" not in plain
    assert plain["tpot_ms"] != one["tpot_ms"]


def test_overload_is_a_warning_not_a_silent_answer(capsys: pytest.CaptureFixture[str]) -> None:
    # the case: Qwen3-32B on one H100 offered 50 req/s
    s, err = _json(capsys, "predict", "--model", "Qwen/Qwen3-32B", "--gpu", "h100_sxm", "--request-rate", "50",
                   "--num-requests", "200")
    assert s["throughput_rps"] < 10 and s["offered_rps"] == 50
    (line,) = [x for x in err.splitlines() if "offered" in x]
    assert line.startswith("shadowsim: warning: the server serves about") and "queue grows" in line
    assert s["warnings"] and "offered" in s["warnings"][0]
    # a load the server keeps up with: no warning
    s, err = _json(capsys, "predict", *M8, "--request-rate", "4", "--num-requests", "80")
    assert "warning" not in err and s["warnings"] == []


def test_prompts_beyond_the_context_are_refused_or_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "Qwen/Qwen3-8B", "--gpu", "h100_sxm", "--concurrency", "1",
                 "--input-len", "50000", "--num-requests", "2"]) == 2
    err = capsys.readouterr().err
    assert "40960-token context length" in err and err.count("\n") == 1
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.1, "input_len": 60_000 if i < 3 else 500,
                                         "output_len": 8}) + "\n" for i in range(10)))
    s, err = _json(capsys, "predict", "--model", "Qwen/Qwen3-8B", "--gpu", "h200_sxm", "--trace", str(trace))
    assert any("3 of 10 prompts are at least the 40960-token context length" in w for w in s["warnings"])
    assert s["num_rejected_context"] == 3 and s["num_requests"] == 7  # refused like SGLang's tokenizer does
    assert "left out" in err


def test_repeated_trace_warnings_are_summarised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [json.dumps({"arrival_s": i * 0.1, "input_len": 100, "output_len": 4}) for i in range(20)]
    lines += ["{not json"] * 500
    trace.write_text("\n".join(lines) + "\n")
    s, err = _json(capsys, "predict", *M8, "--trace", str(trace))
    assert s["num_requests"] == 20
    warn = [x for x in err.splitlines() if x.startswith("shadowsim: warning:")]
    assert len(warn) == 4 and "497 more lines skipped (497 x line)" in warn[-1]


def test_catalogue_commands(capsys: pytest.CaptureFixture[str]) -> None:
    models, _ = _json(capsys, "models")
    ids = [m["id"] for m in models]
    assert len(ids) >= 40 and len(set(ids)) == len(ids)
    for want in ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Meta-Llama-3.1-405B", "Qwen/Qwen3-0.6B",
                 "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
                 "Qwen/Qwen3-Coder-480B-A35B-Instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1",
                 "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.3",
                 "deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3.2", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
                 "google/gemma-3-1b-it", "google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it",
                 "zai-org/GLM-4.5", "zai-org/GLM-4.5-Air"):
        assert want in ids, want
    oss = next(m for m in models if m["id"] == "openai/gpt-oss-120b")
    # config.json layer_types: 18 of 36 layers sliding_attention with sliding_window 128; MXFP4 experts
    assert (oss["sliding_window_layers"], oss["sliding_window_tokens"], oss["precision"]) == (18, 128, "mxfp4")
    l70 = next(m for m in models if m["id"] == "meta-llama/Llama-3.3-70B-Instruct")
    # public config.json: 80 layers, 8 KV heads of 128 -> 2 x 80 x 8 x 128 x 2 bytes per token in bf16
    assert (l70["num_layers"], l70["attention"], l70["kv_bytes_per_token"]) == (80, "GQA", 327_680)
    assert 70 < l70["params_billion"] < 71
    a3b = next(m for m in models if m["id"] == "Qwen/Qwen3-30B-A3B")
    assert (a3b["num_experts"], a3b["experts_per_token"]) == (128, 8) and a3b["active_params_billion"] < 4
    # every catalogued id is accepted as --model, case-insensitive, -Instruct optional
    assert main(["predict", "--model", "meta-llama/llama-3.3-70b-instruct", "--gpu", "h200", "--tp", "2",
                 "--concurrency", "1", "--num-requests", "1", "--input-len", "16", "--output-len", "2"]) == 0
    capsys.readouterr()
    gpus, _ = _json(capsys, "gpus")
    h100 = next(g for g in gpus if g["name"] == "h100_sxm")
    assert h100["memory_gib"] == pytest.approx(79.6, abs=0.5) and h100["peak_tflops"]["bf16"] > 900
    every, _ = _json(capsys, "models", "--all")
    gap = {m["id"]: m["not_modelled"] for m in every if "not_modelled" in m}
    assert "linear attention" in gap["qwen/qwen3-next-80b-a3b-instruct"] and len(every) == len(models) + len(gap)
    assert main(["models", "--filter", "qwen3-vl"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-VL-8B-Instruct" in out and "Llama" not in out


def test_version_and_a_subcommands_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from shadowsim import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"shadowsim {__version__}"
    with pytest.raises(SystemExit) as exc:
        main(["sweep", *M8, "--request-rate", "1", "--pareto-maxx", "x"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("shadowsim sweep: error: unrecognized arguments: --pareto-maxx")
    assert "did you mean --pareto-max" in err and "see `shadowsim sweep --help`" in err


def test_sweep_json_keys_carry_units(capsys: pytest.CaptureFixture[str]) -> None:
    res, _ = _json(capsys, "sweep", *M8, "--request-rate", "2", "--num-requests", "30", "-j", "1",
                   "--slo-ttft-ms", "300")
    (p,) = res["points"]
    unitless = {"id", "model", "gpu", "tp", "precision", "schedule_policy", "chunked_prefill_size",
                "max_running_requests", "request_rate", "pareto", "slo_feasible", "warnings", "memory",
                "precision_used", "latency_model", "cache_hit_rate", "kv_peak_usage"}
    units = ("_ms", "_s", "_rps", "_per_gpu", "_per_s", "_tokens", "_bytes", "_ok", "_num")
    for key in p:
        assert key in unitless or key.startswith("num_") or key.endswith(units), key
    assert "ttft_p90_ms" in p and "ttft_p90" not in p


def test_calibrate_json_is_one_document_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--neutral", "--cpu-base-s", "0.002", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["profile"]["cpu_base_s"] == 0.002 and doc["profile_path"] is None
    assert doc["report"]["profile_hash"] == doc["profile"]["profile_hash"]


def test_model_error_band_from_a_saved_validation(tmp_path: Path, shared_dir: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rows = (shared_dir / "data/validation/sglang_qwen3_32b_h100.csv").read_text().splitlines()
    csv = tmp_path / "m.csv"
    csv.write_text("\n".join(rows[:3]) + "\n")
    v, _ = _json(capsys, "validate", str(csv), "-q")
    (tmp_path / "v.json").write_text(json.dumps(v))
    s, _ = _json(capsys, "predict", "--model", "Qwen/Qwen3-32B", "--gpu", "h100_sxm", "--tp", "2",
                 "--concurrency", "4", "--num-requests", "16", "--model-error", str(tmp_path / "v.json"))
    band = s["model_error_band"]
    tpot_err = v["summary"]["tpot"]["p90_ape"] / 100
    assert band["tpot_p90_ms"]["low"] == pytest.approx(s["tpot_ms"]["p90"] * (1 - tpot_err))
    assert band["tpot_p90_ms"]["high"] == pytest.approx(s["tpot_ms"]["p90"] * (1 + tpot_err))
    assert band["ttft_p50_ms"]["p90_ape_pct"] == v["summary"]["ttft"]["p90_ape"]
    assert main(["predict", "--model", "Qwen/Qwen3-32B", "--gpu", "h100_sxm", "--concurrency", "1",
                 "--model-error", str(csv)]) == 2
    assert "RESULT.json" in capsys.readouterr().err
