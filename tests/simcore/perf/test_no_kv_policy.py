"""The no-KV rule of `validate` (``simcore.perf.validation.NO_KV_MEM_FRACTION``, docs/accuracy.md §3.10).

A measured row whose recorded flags leave no KV cache at SGLang's default ``--mem-fraction-static`` cannot be what
the server ran: SGLang refuses to start without a KV pool (0.5.9
``model_executor/model_runner_kv_cache_mixin.py`` ``init_memory_pool``: ``max_total_num_tokens <= 0`` raises "Not
enough memory. Please try to increase --mem-fraction-static."). `validate` simulates such
a row at the fraction of InferenceX's launch script for the only such rows in the project's files
(``dsr1_fp8_b200.sh`` TP4: 0.95), says so in the row's ``assumptions`` and on the CLI, and never where the fraction
is a recorded flag.

Hand-derived pool of the five B200 fp8 TP4 rows (DeepSeek-R1 fp8, 671B, TP4; ``simcore.memory``'s P/A rule):
P = 179.0615 GiB (B200) − 0.95 GiB context = 178.1115 GiB; weights 168,246,737,408 B / rank = 156.6920 GiB;
A = P − 156.6920 − 0.2 GiB load overhead = 21.2195 GiB. At SGLang 0.5.9's default 0.855: A − 0.145·P =
−4.61 GiB (no KV cache). At 0.95: A − 0.05·P = 12.3139 GiB; a bf16 MLA KV cell is 61 layers × (512 + 64) × 2 B = 70,272 B;
12.3139 GiB / 70,272 B = 188,154 tokens.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from shadowsim.cli import main
from shadowsim.commands.validate import read_rows
from simcore.errors import UserError
from simcore.perf.validation import NO_KV_MEM_FRACTION, Protocol, simulate_row, validate
from simcore.server_flags import parse_server_args

SHARED_FILE = ("data", "validation", "sglang_deepseek_b200_b300.csv")
C4_ROW = "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271"


def _no_kv_rows(shared_dir):
    rows = read_rows(shared_dir.joinpath(*SHARED_FILE))
    return [r for r in rows if r.gpu == "b200_sxm" and r.precision == "fp8" and r.tp == 4 and r.ep == 1]


def _short(row, **changes):
    """The row with 64 output tokens (the pool rule does not depend on the output length; keeps the test fast)."""
    return dataclasses.replace(row, osl=64, **changes)


def test_the_shared_file_has_exactly_five_such_rows_and_none_records_a_fraction(shared_dir) -> None:
    rows = _no_kv_rows(shared_dir)
    assert len(rows) == 5
    assert {r.concurrency for r in rows} == {4, 8, 16, 32}
    assert all("mem_fraction_static" not in r.server_settings and r.sglang_version == "0.5.9" for r in rows)
    assert NO_KV_MEM_FRACTION == 0.95  # InferenceX dsr1_fp8_b200.sh @12ba0ae07, TP4


def test_every_row_of_the_shared_file_has_a_kv_pool_and_only_those_five_need_the_rule(shared_dir) -> None:
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.settings import ServerSettings, resolve

    needed = []
    for row in read_rows(shared_dir.joinpath(*SHARED_FILE)):
        model, gpu = load_model(row.model), load_gpu(row.gpu)
        flags = dict(row.server_settings, ep_size=row.ep)
        settings = resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp, **flags), gpu.memory_bytes)
        try:
            size_kv_pool(model, gpu, settings, row.precision)
        except UserError as exc:
            assert exc.field == "mem_fraction_static", (row.id, exc)
            at_rule = resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp,
                                             mem_fraction_static=NO_KV_MEM_FRACTION, **flags), gpu.memory_bytes)
            assert size_kv_pool(model, gpu, at_rule, row.precision).max_total_num_tokens == 188154
            needed.append(row.id)
    assert sorted(needed) == sorted(r.id for r in _no_kv_rows(shared_dir))


def test_a_no_kv_row_is_simulated_at_the_rule_fraction_and_says_so(shared_dir) -> None:
    row = _short(next(r for r in _no_kv_rows(shared_dir) if r.id == C4_ROW))
    res = simulate_row(row)
    (assumption,) = res.extra["assumptions"]
    assert assumption.startswith("--mem-fraction-static 0.95 assumed")
    assert "default 0.855" in assumption and "-4.61 GiB after weights" in assumption
    assert "188154 KV tokens at 0.95" in assumption
    # exactly the same simulation as the row with the flag written into its server_args
    text = row.server_args + " --mem-fraction-static 0.95"
    explicit = simulate_row(_short(row, server_args=text, server_settings=parse_server_args(text, "test")))
    assert explicit.extra["assumptions"] == []
    assert res.predicted == explicit.predicted
    assert res.to_dict()["assumptions"] == [assumption]


def test_the_rule_is_off_for_a_recorded_fraction_an_unmeasured_row_or_when_switched_off(shared_dir) -> None:
    row = _short(next(r for r in _no_kv_rows(shared_dir) if r.id == C4_ROW))
    with pytest.raises(UserError, match=r"no memory left for the KV cache \(-4.61 GiB"):
        simulate_row(row, protocol=Protocol(no_kv_mem_fraction=None))
    text = row.server_args + " --mem-fraction-static 0.855"  # recorded: the record is not overridden
    with pytest.raises(UserError, match="no memory left for the KV cache"):
        simulate_row(_short(row, server_args=text, server_settings=parse_server_args(text, "test")))
    with pytest.raises(UserError, match="no memory left for the KV cache"):  # nothing proves the server ran
        simulate_row(_short(row, measured={k: None for k in row.measured}))
    with pytest.raises(UserError, match="no memory left for the KV cache"):  # not above the default 0.855
        simulate_row(row, protocol=Protocol(no_kv_mem_fraction=0.85))
    # a rule fraction that leaves no KV either: one reason naming both fractions
    with pytest.raises(UserError, match=r"at the default 0\.855, and at the no-KV rule's --mem-fraction-static 0\.86"):
        simulate_row(row, protocol=Protocol(no_kv_mem_fraction=0.86))
    with pytest.raises(UserError, match="--no-kv-mem-fraction"):
        Protocol(no_kv_mem_fraction=1.5)


def test_validate_skips_such_a_row_only_with_the_rule_off(shared_dir) -> None:
    row = _short(next(r for r in _no_kv_rows(shared_dir) if r.id == C4_ROW))
    on = validate([row])
    assert on["skipped"] == [] and len(on["rows"]) == 1 and on["rows"][0]["assumptions"]
    off = validate([row], protocol=Protocol(no_kv_mem_fraction=None))
    assert off["rows"] == [] and "no memory left for the KV cache" in off["skipped"][0]["reason"]


def test_the_cli_prints_the_assumption_per_row_and_off_skips(shared_dir, tmp_path, capsys) -> None:
    src = shared_dir.joinpath(*SHARED_FILE)
    lines = src.read_text().splitlines()
    picked = [lines[0]] + [ln for ln in lines[1:] if ln.startswith(C4_ROW + ",")]
    assert len(picked) == 2
    csv_path = tmp_path / "one.csv"
    csv_path.write_text("\n".join(picked).replace(",8192,1024,4,", ",8192,64,4,") + "\n")
    assert main(["validate", str(csv_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "assumption: 1 row(s) simulated with a setting their file does not record:" in out
    assert f"  {C4_ROW}: --mem-fraction-static 0.95 assumed" in out
    assert "skipped" not in out
    assert main(["validate", str(csv_path), "--quiet", "--json", "--no-kv-mem-fraction", "off"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["rows"] == [] and got["skipped"][0]["id"] == C4_ROW
    assert main(["validate", str(csv_path), "--quiet", "--no-kv-mem-fraction", "lots"]) == 2
    assert "--no-kv-mem-fraction: 'lots' is neither a fraction nor off" in capsys.readouterr().err
