"""`shadowsim sweep`: the cartesian product of configurations, skipped impossible points, the Pareto front,
SLO attainment (also on `shadowsim predict`) and the max-rate-under-SLO search.

Runs the real CLI in-process on small workloads (tens of requests per point).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from shadowsim.cli import main

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SMALL = ["--input-len", "512", "--output-len", "32", "--num-requests", "24"]


def _sweep(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["sweep", "--model", MODEL, *SMALL, *args, "--json", "--jobs", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def _by(points: list[dict], **match: object) -> dict:
    (hit,) = [p for p in points if all(p[k] == v for k, v in match.items())]
    return hit


def test_tp_axis_lowers_tpot_and_counts_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    res = _sweep(capsys, "--gpu", "h100_sxm", "--tp", "1,2", "--concurrency", "4")
    assert [p["id"] for p in res["points"]] == [0, 1] and res["skipped"] == []
    tp1, tp2 = _by(res["points"], tp=1), _by(res["points"], tp=2)
    assert tp2["tpot_p50_ms"] < tp1["tpot_p50_ms"]  # half the weights per GPU to read every decode step
    assert (tp1["num_gpus"], tp2["num_gpus"]) == (1, 2)
    assert tp2["output_tokens_per_s_per_gpu"] == pytest.approx(tp2["output_tokens_per_s"] / 2)
    assert tp1["num_requests"] == 24 and tp1["gpu"] == "h100_sxm" and tp1["concurrency"] == 4
    # same workload (same seed): the tokens are identical, only the time differs
    assert tp1["output_tokens_per_s"] / tp1["throughput_rps"] == pytest.approx(32.0)


def test_impossible_points_are_skipped_with_their_reason(capsys: pytest.CaptureFixture[str]) -> None:
    # 70B in bf16 is ~141 GB of weights: it fits no single H100 (80 GB); 64 heads do not split over 3 GPUs
    assert main(["sweep", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100_sxm", "--tp", "1,3,4",
                 "--concurrency", "2", "--input-len", "256", "--output-len", "8", "--num-requests", "4",
                 "--json", "-j", "1"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["tp"] for p in res["points"]] == [4]
    reasons = {s["point"]["tp"]: s["reason"] for s in res["skipped"]}
    assert set(reasons) == {1, 3}
    assert reasons[1].startswith("does not fit:") and "KV cache" in reasons[1]
    assert reasons[3].startswith("unsupported:") and "64 attention heads" in reasons[3]
    assert res["pareto"] == [2]  # the only simulated point (id = position in the product)


def test_pareto_equals_brute_force_per_load_among_slo_feasible_points(capsys: pytest.CaptureFixture[str]) -> None:
    res = _sweep(capsys, "--gpu", "h100_sxm,a100_sxm", "--tp", "1,2", "--request-rate", "4,16",
                 "--slo-ttft-ms", "60", "--slo-tpot-ms", "9")
    pts = res["points"]
    assert len(pts) == 8 and res["objectives"] == {
        "maximize": ["output_tokens_per_s_per_gpu"], "minimize": ["ttft_p90_ms", "tpot_p90_ms"],
        "per_load_axis": ["request_rate"], "slo_attainment": 0.9}
    keys = ("output_tokens_per_s_per_gpu", "ttft_p90_ms", "tpot_p90_ms")

    def better_or_equal(a: dict, b: dict) -> bool:
        return a[keys[0]] >= b[keys[0]] and a[keys[1]] <= b[keys[1]] and a[keys[2]] <= b[keys[2]]

    def strictly(a: dict, b: dict) -> bool:
        return better_or_equal(a, b) and tuple(a[k] for k in keys) != tuple(b[k] for k in keys)

    # brute force: a point is optimal when >= 90 % of its requests meet both SLOs and no such point of the SAME
    # request rate dominates it (a lighter load is not a better configuration)
    feasible = [p for p in pts if p["slo_both_ok"] >= 0.9]
    brute = sorted(p["id"] for p in feasible
                   if not any(strictly(q, p) for q in feasible if q["request_rate"] == p["request_rate"]))
    assert res["pareto"] == brute and 1 <= len(brute) < len(pts)
    assert all(p["pareto"] == (p["id"] in brute) for p in pts)
    assert all(p["slo_feasible"] == (p["slo_both_ok"] >= 0.9) for p in pts)
    for p in pts:  # goodput = throughput x fraction meeting both SLOs (same span)
        assert p["goodput_rps"] == pytest.approx(p["throughput_rps"] * p["slo_both_ok"])
        assert p["slo_both_ok"] <= min(p["slo_ttft_ok"], p["slo_tpot_ok"])
    # the A100 at TP 1 decodes an 8B model at ~14 ms per token: nobody meets a 9 ms TPOT there, so it is never
    # on the front however cheap it is per GPU
    a100 = _by(pts, gpu="a100_sxm", tp=1, request_rate=4.0)
    assert a100["slo_tpot_ok"] == 0.0 and not a100["pareto"]
    assert _by(pts, gpu="h100_sxm", tp=2, request_rate=4.0)["slo_both_ok"] == 1.0


def test_parallel_jobs_give_the_same_points_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "--model", MODEL, *SMALL, "--gpu", "h100_sxm", "--tp", "1,2,3",
            "--schedule-policy", "fcfs,lpm", "--request-rate", "8", "--json"]
    assert main([*args, "-j", "1"]) == 0
    serial = json.loads(capsys.readouterr().out)
    out = tmp_path / "points.csv"
    assert main([*args, "-j", "2", "--out", str(out)]) == 0
    parallel = json.loads(capsys.readouterr().out)
    del serial["wall_time_s"], parallel["wall_time_s"]
    assert serial == parallel
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == ["0", "1", "2", "3", "4", "5"]  # 4 simulated + 2 skipped (tp 3), by id
    assert [r["schedule_policy"] for r in rows] == ["fcfs", "lpm"] * 3
    assert rows[4]["skipped_reason"].startswith("unsupported:") and rows[0]["skipped_reason"] == ""
    assert float(rows[0]["tpot_p90_ms"]) == pytest.approx(_by(serial["points"], id=0)["tpot_p90_ms"])


def test_table_marks_pareto_and_lists_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--model", MODEL, *SMALL, "--gpu", "h100_sxm", "--tp", "1,3", "--concurrency", "2,8",
                 "--slo-ttft-ms", "500", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "tok/s/GPU" in out and "TTFT p50" in out and "goodput" in out and "conc" in out
    assert "*" in out and "skipped 2 (gpu=h100_sxm tp=3 conc=2): unsupported" in out
    assert "2 simulated, 2 skipped" in out


def test_max_rate_under_slo_brackets_the_knee(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", MODEL, "--gpu", "a100_sxm", "--input-len", "1024", "--output-len", "16",
            "--num-requests", "40"]
    assert main(["sweep", *base, "--slo-ttft-ms", "150", "--max-rate-under-slo", "--request-rate", "1,64",
                 "--rate-tolerance", "0.1", "--json", "-j", "1"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["max_rate_under_slo"]
    assert found["max_rate_rps"] is not None and found["first_miss_rps"] is not None
    assert found["first_miss_rps"] - found["max_rate_rps"] <= 0.1 * found["max_rate_rps"]

    def ttft_p90(rate: float) -> float:
        assert main(["predict", *base, "--request-rate", str(rate), "--json"]) == 0
        return json.loads(capsys.readouterr().out)["ttft_ms"]["p90"]

    assert ttft_p90(found["max_rate_rps"]) <= 150.0 < ttft_p90(found["first_miss_rps"])


def test_predict_slo_report(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", MODEL, "--gpu", "h100_sxm", "--request-rate", "4", *SMALL]
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "slo" not in plain
    # an SLO at the measured median TTFT: about half the requests meet it
    med = plain["ttft_ms"]["p50"]
    assert main([*args, "--slo-ttft-ms", str(med), "--json"]) == 0
    slo = json.loads(capsys.readouterr().out)["slo"]
    assert slo["tpot_ok"] is None and slo["ttft_slo_ms"] == med
    assert 0.5 <= slo["ttft_ok"] <= 0.5 + 1 / 24 and slo["both_ok"] == slo["ttft_ok"]
    assert slo["goodput_rps"] == pytest.approx(plain["throughput_rps"] * slo["both_ok"])
    assert main([*args, "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50"]) == 0
    assert "both 100.0 %" in capsys.readouterr().out


@pytest.mark.parametrize("extra, field", [
    (["--gpu", "h100_sxm,z9000", "--tp", "1", "--concurrency", "1"], "--gpu"),
    (["--gpu", "h100_sxm", "--precision", "bf16,fp7", "--concurrency", "1"], "--precision"),
    (["--gpu", "h100_sxm", "--request-rate", "1,2", "--concurrency", "1"], "--concurrency"),
    (["--gpu", "h100_sxm", "--schedule-policy", "fcfs,sjf", "--concurrency", "1"], "--schedule-policy"),
    (["--gpu", "h100_sxm"], "workload"),
    (["--gpu", "h100_sxm", "--concurrency", "1", "--pareto", "ttft_p95"], "--pareto"),
    (["--gpu", "h100_sxm", "--request-rate", "1,2,4", "--max-rate-under-slo", "--slo-ttft-ms", "100"],
     "--request-rate"),
    (["--gpu", "h100_sxm", "--request-rate", "1,2", "--max-rate-under-slo"], "--max-rate-under-slo"),
    (["--gpu", "h100_sxm", "--concurrency", "1", "--out", "points.txt"], "--out"),
    # an impossible SLO is an error before anything runs, not a sweep of points all skipped as 'unsupported'
    (["--gpu", "h100_sxm", "--concurrency", "1,2", "--slo-ttft-ms", "0"], "--slo-ttft-ms"),
])
def test_bad_input_is_one_line_naming_the_field(extra: list[str], field: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--model", MODEL, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shadowsim: error: ") and "\n" not in err and field in err


def test_bad_list_value_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--model", MODEL, "--gpu", "h100_sxm", "--tp", "1,two", "--concurrency", "1"])
    assert exc.value.code == 2 and "--tp" in capsys.readouterr().err


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "Examples:" in out and "--max-rate-under-slo" in out and "comma-separated list" in out
    assert "Pareto" in out and "goodput" in out
