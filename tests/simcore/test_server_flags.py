"""simcore.server_flags: one flag table for predict/sweep options and measurement files' server_args."""
from __future__ import annotations

import argparse

import pytest

from simcore.errors import UserError
from simcore.server_flags import SERVER_FLAGS, add_server_flags, parse_server_args, settings_fields
from simcore.settings import ServerSettings


def test_the_generators_flags_parse_to_settings_fields() -> None:
    # aiconfigurator's SGLang rule (rule_plugin/sglang.rule): max_prefill_tokens = isl + 1500, mixed chunk on
    assert parse_server_args("--enable-mixed-chunk --max-prefill-tokens 2524") == {
        "enable_mixed_chunk": True, "max_prefill_tokens": 2524}
    assert parse_server_args("--max-prefill-tokens=9692 --kv-cache-dtype fp8_e4m3") == {
        "max_prefill_tokens": 9692, "kv_cache_dtype": "fp8_e4m3"}
    # cli_args.j2 writes quoted values and a space-separated --cuda-graph-bs list
    got = parse_server_args('--max-running-requests "128" --cuda-graph-bs 4 1 2 --schedule-policy lpm')
    assert got == {"max_running_requests": 128, "cuda_graph_bs": (1, 2, 4), "schedule_policy": "lpm"}
    ServerSettings(**got)  # every field is a real settings field
    assert parse_server_args("") == {} and parse_server_args(None) == {} and parse_server_args("   ") == {}


def test_flags_that_change_nothing_are_accepted_and_tp_must_agree() -> None:
    text = "--model-path deepseek-ai/DeepSeek-V3 --host 0.0.0.0 --port 8000 --trust-remote-code --tp-size 8"
    assert parse_server_args(text, tp=8) == {}
    with pytest.raises(UserError, match="row r7: --tp-size 4 disagrees with the row's tp 8"):
        parse_server_args("--tp-size 4", "row r7", tp=8)


@pytest.mark.parametrize("text, message", [
    ("--enable-mixed-chunk --enable-two-batch-overlap", "row r1: unknown flag '--enable-two-batch-overlap'"),
    ("--speculative-algorithm MEDUSA", "row r1: argument --speculative-algorithm: invalid choice: 'MEDUSA'"),
    ("--max-prefill-tokens", "row r1: argument --max-prefill-tokens: expected one argument"),
    ("--max-prefill-tokens lots", "row r1: argument --max-prefill-tokens: invalid int value: 'lots'"),
    ("--schedule-policy fastest", "row r1: argument --schedule-policy: invalid choice: 'fastest'"),
    ("--enable-mixed-chunk 1", "row r1: unexpected value '1'"),
    ("--sglang-version 0.5.9", "row r1: --sglang-version is not an SGLang launch flag"),
    ("--enable-mixed", "row r1: unknown flag '--enable-mixed'"),  # no abbreviations: SGLang has none either
    ("--host 'unclosed", "row r1: cannot split"),
])
def test_bad_flags_are_one_line_errors_naming_row_and_flag(text: str, message: str) -> None:
    with pytest.raises(UserError) as exc:
        parse_server_args(text, "row r1")
    assert str(exc.value).startswith("server_args: ") and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_speculative_flags_parse_and_the_accept_length_assumption_may_be_stated() -> None:
    text = ("--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 --speculative-draft-model-path lmsys/x --speculative-accept-length 2.6")
    assert parse_server_args(text, "row r1") == {
        "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4, "speculative_draft_model_path": "lmsys/x",
        "speculative_accept_length": 2.6}


def test_predict_options_come_from_the_same_table() -> None:
    p = argparse.ArgumentParser()
    add_server_flags(p)
    ns = p.parse_args(["--enable-mixed-chunk", "--max-prefill-tokens", "2524", "--waiting-prefix-refresh", "on"])
    fields = settings_fields(ns)
    # every table entry is a field; defaults are SGLang's
    assert set(fields) == {f.field for f in SERVER_FLAGS}
    assert fields["max_prefill_tokens"] == 2524 and fields["enable_mixed_chunk"] is True
    assert fields["enable_waiting_prefix_refresh"] is True and fields["page_size"] == 1
    s = ServerSettings(**fields)
    assert s.enable_mixed_chunk and s.max_prefill_tokens == 2524
    # same words, same meaning: the row parser and predict's parser agree
    assert {k: fields[k] for k in ("enable_mixed_chunk", "max_prefill_tokens")} == parse_server_args(
        "--enable-mixed-chunk --max-prefill-tokens 2524")
