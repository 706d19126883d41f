"""shadowsim.known_deployments: the registry of public InferenceX deployments and ``validate --deployment``.

The rules are read from SemiAnalysisAI/InferenceX: ``.github/configs/nvidia-master.yaml`` @12ba0ae07 (B200 SGLang
v0.5.9: dsr1-fp8-b200-sglang TP8 at 1k×1k / 1k×8k C 4–64 and 8k×1k C 4, TP4 8k×1k C 4–32; dsr1-fp8-b200-sglang-mtp
TP8 C 4–512; dsr1-fp4-b200-sglang TP4/EP4 and TP8/EP8), @5b302f147 / @9ebeafb4e (B300 v0.5.10.post1), @d27433dff
(v0.5.6); the launch lines of ``benchmarks/single_node/dsr1_fp8_b200.sh`` (``SCHEDULER_RECV_INTERVAL`` 30 from
CONC 16 on in the TP 8 branch, always 10 in the TP 4 one), ``dsr1_fp4_b200.sh`` and ``dsr1_fp8_b200_mtp.sh``; the
client of ``benchmarks/benchmark_lib.sh`` (``--num-prompts 10·C --num-warmups 2·C``, range ratio 0.8).
"""
from __future__ import annotations

import csv
import json

import pytest

from shadowsim import known_deployments as kd
from shadowsim.cli import main

SHARED_FILE = ("data", "validation", "sglang_deepseek_b200_b300.csv")


@pytest.fixture(scope="module")
def records(shared_dir) -> dict[str, dict[str, str]]:
    with shared_dir.joinpath(*SHARED_FILE).open(newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def _name(m: kd.Match | None) -> str | None:
    return None if m is None else m.deployment.name


def test_each_configuration_is_recognised_on_real_ids_of_the_file(records) -> None:
    cases = {  # id → (configuration, tp as run, tp relabelled from the file's tp × ep)
        "dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg87": ("dsr1-fp8-b200-sglang", 8, False),
        "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271": ("dsr1-fp8-b200-sglang", 4, False),
        "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c32_tp4_0_ep1_0_286": ("dsr1-fp8-b200-sglang", 4, False),
        "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c512_tp8_0_ep1_0_275": ("dsr1-fp8-b200-sglang-mtp", 8, False),
        "dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg202": ("dsr1-fp4-b200-sglang", 4, True),  # file: tp 16, ep 4
        "2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x8192_c4_tp4_0_ep4_0_287": ("dsr1-fp4-b200-sglang", 4, False),
        "dsr1_b300_sglang_fp8_agg_1024x1024_c4_cfg719": ("dsr1-fp8-b300-sglang", 8, False),
        "dsr1_b300_sglang_fp8_agg_8192x1024_c32_cfg720": ("dsr1-fp8-b300-sglang", 4, False),
        "dsr1_b300_sglang_fp4_agg_1024x1024_c128_cfg717": ("dsr1-fp4-b300-sglang", 4, True),
        "dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg718": ("dsr1-fp4-b300-sglang", 8, True),  # file: tp 64, ep 8
    }
    for rid, (name, tp, relabelled) in cases.items():
        m = kd.recognise(records[rid])
        assert (_name(m), m.tp, m.relabelled) == (name, tp, relabelled), rid
    assert records["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg718"]["tp"] == "64"


def test_rows_outside_every_search_space_or_version_are_left_alone(records) -> None:
    # the unversioned cfg88 / cfg99 / cfg199 rows and the 0.5.6 one: no registered configuration (module
    # docstring: why)
    for rid in ("dsr1_b200_sglang_fp4_agg_1024x1024_c32_cfg88", "dsr1_b200_sglang_fp4_agg_8192x1024_c4_cfg99",
                "dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg199",
                "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp8_0_ep1_0_1288"):
        assert kd.candidates(records[rid]) == [] and kd.unknown_reason(records[rid]) == kd.UNKNOWN_LABEL
    r = records["dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg87"]
    # C 128 is outside dsr1-fp8-b200-sglang's TP8 space (conc-end 64): not a run of it
    assert kd.recognise({**r, "id": r["id"].replace("_c64_", "_c128_"), "concurrency": "128"}) is None
    # 8192 × 1024 at TP8 only at C 4 in the 0.5.9 space
    assert kd.recognise({**r, "id": "dsr1_b200_sglang_fp8_agg_8192x1024_c64_cfg87", "isl": "8192", "osl": "1024"}) is None
    # the id must agree with the columns, and a cfg id with the branch's config id
    assert kd.recognise({**r, "concurrency": "32"}) is None
    assert kd.recognise({**r, "id": r["id"].replace("cfg87", "cfg199")}) is None
    assert kd.recognise({**r, "sglang_version": "0.5.8"}) is None
    assert kd.recognise({**r, "id": "qwen3_32b_tp8_c64"}) is None and kd.unknown_reason({"id": "qwen3_32b"}) is None


def test_twins_are_one_run_simulated_as_the_first_copy(records) -> None:
    plain = "dsr1_b200_sglang_fp8_agg_1024x8192_c8_cfg87"
    dated = "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x8192_c8_tp8_0_ep1_0_255"
    # alone, a dated TP8 EP1 fp8 0.5.9 row is the EAGLE configuration's (the plain TP8 branch takes dated ids only
    # as the same run as a cfg87 row) ...
    assert _name(kd.recognise(records[dated])) == "dsr1-fp8-b200-sglang-mtp"
    # ... next to its cfg87 twin (equal TTFT and TPOT) it is that run
    found = kd.recognise_all([records[plain], records[dated]])
    assert [(_name(m), first) for m, first in found] == [("dsr1-fp8-b200-sglang", None), ("dsr1-fp8-b200-sglang", 0)]
    # a V3 cfg201 row (tp 64 / ep 8 in the file) and its R1 twin (tp 8 / ep 8): simulated alike, as the first
    v3, r1 = "dsr1_b200_sglang_fp4_agg_1024x1024_c8_cfg201", \
        "2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c8_tp8_0_ep8_0_248"
    out, _ = kd.as_deployed([records[v3], records[r1]], list(records[v3]))
    same = ("model", "tp", "ep", "server_args", "client", "num_requests", "warmup_requests", "published_deployment")
    assert [out[1][k] for k in same] == [out[0][k] for k in same]
    assert (out[0]["model"], out[1]["tp"], records[r1]["model"]) == ("deepseek-ai/DeepSeek-V3", "8", "deepseek-ai/DeepSeek-R1")
    assert out[1]["deployment_assumption"].startswith(f"published deployment: the same run as {v3} ")
    # the whole shared file: 180 rows, 103 distinct published runs + 25 copies, 52 with no known deployment
    every, _ = kd.as_deployed(list(records.values()), list(records[v3]))
    firsts = [r for r in every if r.get("published_deployment") and "the same run" not in r["deployment_assumption"]]
    copies = [r for r in every if "the same run" in r.get("deployment_assumption", "")]
    assert (len(every), len(firsts), len(copies)) == (180, 103, 25)
    assert sum(r.get("deployment_assumption") == kd.UNKNOWN_LABEL for r in every) == 52


def test_a_row_with_other_recorded_flags_is_trusted_as_recorded(records) -> None:
    r = records["dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg87"]
    assert r["server_args"] == "--enable-mixed-chunk --max-prefill-tokens 2524"  # the reconstruction: replaced
    assert kd.is_reconstruction(r["server_args"], 1024) and kd.is_reconstruction("", 1024)
    assert kd.is_reconstruction("--max-prefill-tokens=2524   --enable-mixed-chunk", 1024)
    assert not kd.is_reconstruction("--enable-mixed-chunk --max-prefill-tokens 2524", 8192)  # isl + 1500 = 9692
    recorded = {**r, "server_args": "--enable-mixed-chunk --max-prefill-tokens 2524 --kv-cache-dtype fp8_e4m3"}
    assert not kd.is_reconstruction(recorded["server_args"], 1024)
    (out,), _ = kd.as_deployed([recorded], list(r))
    assert out["server_args"] == recorded["server_args"] and not out.get("published_deployment")
    assert "deployment_assumption" not in out  # recognised, so not labelled unknown either


def test_the_flags_follow_the_scripts_rules(records) -> None:
    # dsr1_fp8_b200.sh TP 8 branch at CONC 8 (SCHEDULER_RECV_INTERVAL 10) and 16 (30)
    out, _ = kd.as_deployed([records["dsr1_b200_sglang_fp8_agg_1024x8192_c8_cfg87"],
                             records["dsr1_b200_sglang_fp8_agg_1024x1024_c16_cfg87"]], [])
    assert out[0]["server_args"] == (
        "--cuda-graph-max-bs 128 --max-running-requests 128 --mem-fraction-static 0.82 --kv-cache-dtype fp8_e4m3 "
        "--chunked-prefill-size 32768 --max-prefill-tokens 32768 --scheduler-recv-interval 10 --disable-radix-cache "
        "--stream-interval 30 --ep-size 1")
    assert "--scheduler-recv-interval 30 " in out[1]["server_args"]
    assert (out[0]["client"], out[0]["random_range_ratio"], out[0]["seed"], out[0]["num_requests"],
            out[0]["warmup_requests"]) == ("bench_serving", "0.8", "0", "80", "16")
    assert out[0]["server_tokenize_us_per_token"] == "7.26" and out[0]["server_tokens_per_prompt_token"] == ""
    # TP 4 branch: 32 / 32, 0.95, 8192 / 8192, recv 10 even at CONC 32
    assert kd.recognise(records["2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c32_tp4_0_ep1_0_286"]) \
        .columns(8192, 1024, 32)["server_args"] == (
        "--cuda-graph-max-bs 32 --max-running-requests 32 --mem-fraction-static 0.95 --kv-cache-dtype fp8_e4m3 "
        "--chunked-prefill-size 8192 --max-prefill-tokens 8192 --scheduler-recv-interval 10 --disable-radix-cache "
        "--stream-interval 30 --ep-size 1")
    # dsr1_fp4_b200.sh at TP4/EP4, CONC 4: --ep-size from the search space, no --max-prefill-tokens
    (fp4,), _ = kd.as_deployed([records["dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg202"]], [])
    assert (fp4["tp"], fp4["ep"], fp4["server_args"]) == ("4", "4", (
        "--cuda-graph-max-bs 256 --max-running-requests 256 --mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 "
        "--chunked-prefill-size 16384 --ep-size 4 --scheduler-recv-interval 10 --disable-radix-cache "
        "--stream-interval 10"))
    # dsr1_fp8_b200_mtp.sh: EAGLE 2 steps, 3 draft tokens, top-k 1; 512 / 512; 16384 / 16384
    assert kd.eagle_flags(256).endswith("--scheduler-recv-interval 30 --disable-radix-cache --stream-interval 30 "
                                        "--ep-size 1 --speculative-algorithm EAGLE --speculative-num-steps 2 "
                                        "--speculative-num-draft-tokens 3 --speculative-eagle-topk 1")
    # B300 (transformers 5.3.0 client tokenizer): the server saw 5.16 / 5.18 × the prompt tokens; no tokenizer cost
    (b300,), _ = kd.as_deployed([records["dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg718"]], [])
    assert (b300["tp"], b300["server_tokens_per_prompt_token"], b300["server_tokenize_us_per_token"]) == ("8", "5.18", "")


def test_validate_uses_the_registry_by_default_and_recorded_does_not(shared_dir, tmp_path, capsys) -> None:
    lines = shared_dir.joinpath(*SHARED_FILE).read_text().splitlines()
    ids = ("dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg202", "dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg87",
           "dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg88")
    picked = [lines[0]] + [ln for i in ids for ln in lines[1:] if ln.startswith(i + ",")]
    assert len(picked) == 4
    path = tmp_path / "three.csv"
    path.write_text("\n".join(picked) + "\n")
    assert main(["validate", str(path), "--quiet", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    fp4, fp8, unknown = (rows[i] for i in ids)
    assert fp4["client"] == fp8["client"] == "bench_serving" and fp4["tp"] == 4
    assert fp4["server_args_source"] == "published deployment"
    assert fp4["assumptions"][0].startswith("published deployment: InferenceX dsr1-fp4-b200-sglang "
                                            "(SemiAnalysisAI/InferenceX@12ba0ae07 benchmarks/single_node/dsr1_fp4_b200.sh)")
    assert "--scheduler-recv-interval 10" in fp8["deployment"] and "--enable-mixed-chunk" not in fp8["deployment"]
    assert unknown["client"] == "aiperf" and unknown["assumptions"] == [kd.UNKNOWN_LABEL]
    assert unknown["deployment"] == "as deployed: --enable-mixed-chunk --max-prefill-tokens 2524"
    assert main(["validate", str(path), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert ("2 row(s) simulated as their published deployment (InferenceX dsr1-fp4-b200-sglang 1, dsr1-fp8-b200-sglang"
            " 1; shadowsim/known_deployments.py); --deployment recorded for the file's flags") in table
    assert f"1 row(s): {kd.UNKNOWN_LABEL}" in table and "assumption:" not in table
    assert main(["validate", str(path), "--quiet", "--json", "--deployment", "recorded"]) == 0
    rec = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert all(r["client"] == "aiperf" and r["assumptions"] == [] and r["published_deployment"] is None
               for r in rec.values())
    assert rec[ids[0]]["tp"] == 16 and rec[ids[0]]["deployment"] == "as deployed: --enable-mixed-chunk --max-prefill-tokens 2524"
    assert rec[ids[0]]["predicted_ttft_ms"] != fp4["predicted_ttft_ms"]


def test_the_shared_file_as_deployed_is_the_inferencex_files_rows(shared_dir, repo_dir) -> None:
    """One source of truth: every distinct published run of the shared file, read as deployed, is the row of
    validation/sglang_deepseek_inferencex*.csv with the same id (built from the same registry), field for field."""
    from shadowsim.commands.validate import read_rows

    shared = {r.id: r for r in read_rows(shared_dir.joinpath(*SHARED_FILE), "as-deployed")}
    built = {r.id: r for name in ("sglang_deepseek_inferencex.csv", "sglang_deepseek_inferencex_eagle.csv")
             for r in read_rows(repo_dir / "validation" / name)}
    fields = ("gpu", "precision", "tp", "ep", "isl", "osl", "concurrency", "num_requests", "sglang_version",
              "server_args", "server_settings", "client", "random_range_ratio", "seed", "warmup_requests",
              "server_tokens_per_prompt_token", "server_tokenize_us_per_token", "measured")
    common = set(shared) & set(built)
    assert len(built) == 103 and len(common) == 103
    for rid in common:
        assert [getattr(shared[rid], f) for f in fields] == [getattr(built[rid], f) for f in fields], rid
    # the model: the 14 R1 twins are simulated as their V3 first copy in the shared file (the deployed file dropped
    # that copy); the catalogue's V3 and R1 are one architecture, so the simulation is the same
    differ = {rid for rid in common if shared[rid].model != built[rid].model}
    assert len(differ) == 14 and all(built[rid].model == "deepseek-ai/DeepSeek-R1" for rid in differ)
    from simcore.models import load_model

    v3, r1 = (load_model(m).model_dump() for m in ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"))
    assert {k for k in v3 if v3[k] != r1[k]} == {"name"}
