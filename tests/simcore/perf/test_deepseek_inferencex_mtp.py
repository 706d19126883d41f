"""validation/build_deepseek_inferencex_mtp.py: InferenceX's EAGLE/MTP DeepSeek-R1 B200 rows with their flags.

The rows are those `build_deepseek_inferencex.config_of` assigns to ``dsr1-fp8-b200-sglang-mtp`` (every TP8 EP1 fp8
B200 0.5.9 row that is not one of the plain configuration's 11 points), each measured once; the flags are the MTP
script's (its docstring), which the simulator now runs (simcore/speculative.py).
"""
from __future__ import annotations

import importlib.util
from collections import Counter

from shadowsim.commands.validate import read_rows
from simcore.server_flags import parse_server_args


def _build_module(repo_dir):
    spec = importlib.util.spec_from_file_location("build_ix_mtp",
                                                  repo_dir / "validation" / "build_deepseek_inferencex_mtp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mtp_file_is_the_build_output_and_its_rules_hold(repo_dir) -> None:
    build = _build_module(repo_dir)
    fields, rows, counts = build.build()
    out = repo_dir / "validation" / "sglang_deepseek_inferencex_mtp.csv"
    assert build._plain_builder().render(fields, rows) == out.read_text()
    # the 27 EAGLE rows build_deepseek_inferencex.py leaves out, 3 of them the same run filed twice
    assert counts == {"dsr1-fp8-b200-sglang-mtp": 24, "same run (left out)": 3}
    assert Counter(r["isl"] + "x" + r["osl"] for r in rows) == {"1024x1024": 8, "1024x8192": 8, "8192x1024": 8}
    assert all(r["id"].startswith("2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg") for r in rows)
    c4 = next(r for r in rows if r["isl"] == "1024" and r["osl"] == "1024" and r["concurrency"] == "4")
    flags = parse_server_args(c4["server_args"], "c4", tp=8)
    assert (flags["speculative_algorithm"], flags["speculative_num_steps"], flags["speculative_eagle_topk"],
            flags["speculative_num_draft_tokens"]) == ("EAGLE", 2, 1, 3)
    assert (flags["max_running_requests"], flags["chunked_prefill_size"], flags["scheduler_recv_interval"],
            flags["kv_cache_dtype"]) == (512, 16384, 10, "fp8_e4m3")
    assert (c4["client"], c4["num_requests"], c4["warmup_requests"]) == ("bench_serving", "40", "8")
    c64 = next(r for r in rows if r["concurrency"] == "64")
    assert parse_server_args(c64["server_args"], "c64", tp=8)["scheduler_recv_interval"] == 30
    assert len(read_rows(out)) == 24  # validate reads every row
