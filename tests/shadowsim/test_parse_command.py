"""``shadowsim parse FILE``: events as JSON lines on stdout, a summary on stderr."""
from __future__ import annotations

import json
from pathlib import Path

from shadowsim.cli import main
from simcore.events import parse_event


def test_parse_prints_events_and_a_summary(shared_dir: Path, capsysbinary):
    f = shared_dir / "data/sglang_logs/issue2777_v0.4.1_llama2-7b_eagle2_l4_retract-decode-oom_crash.log"
    assert main(["parse", str(f)]) == 0
    out, err = capsysbinary.readouterr()
    events = [parse_event(line) for line in out.splitlines()]
    assert [e.kind for e in events].count("prefill_batch") == 23
    assert events[0].new_tokens == 48
    text = err.decode()
    assert "25 events, 85 lines skipped, 0 dead-lettered" in text
    assert "retraction" in text and "decode_batch" in text


def test_parse_json_summary_lists_dead_letters_with_lines(tmp_path: Path, capsys):
    p = tmp_path / "bad.log"
    p.write_text("[2025-01-07 20:16:02 TP0] Prefill batch. #new-seq: x, #new-token: 1, #cached-token: 0\n"
                 "hello\n"
                 "[2025-01-07 20:16:03 TP0] Decode batch. #running-req: 1, #token: 3, token usage: 0.00, "
                 "gen throughput (token/s): 1.00, #queue-req: 0\n")
    assert main(["parse", str(p), "--json", "--no-events", "--strict"]) == 1
    out, err = capsys.readouterr()
    assert err == ""  # JSON goes to stdout, like every --json
    s = json.loads(out)["summary"]
    assert (s["events"], s["lines_skipped"], s["dead_letters"]) == (1, 1, 1)
    assert s["events_by_kind"] == {"decode_batch": 1}
    assert s["dead_letter_reasons"] == [
        {"reason": "prefill_batch.new_seqs: Input should be a valid integer, unable to parse string as an integer, "
                   "got 'x'", "count": 1, "first_lines": [1]}]


def test_parse_missing_file_is_a_one_line_error(tmp_path: Path, capsys):
    assert main(["parse", str(tmp_path / "nope.log")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shadowsim: error: FILE:") and err.count("\n") == 1


def test_parse_with_explicit_format_and_instance(shared_dir: Path, capsysbinary):
    f = shared_dir / "data/llmservingsim/workloads/workload_me2_01_mixed.jsonl"
    assert main(["parse", str(f), "--format", "sharegpt", "--instance-id", "sim-1", "--start-ts", "100"]) == 0
    out, _ = capsysbinary.readouterr()
    first = parse_event(out.splitlines()[0])
    assert (first.kind, first.instance_id, first.prompt_tokens, first.ts) == ("request_arrived", "sim-1", 27369,
                                                                              100.101537)


def test_parse_reads_standard_input(shared_dir: Path, monkeypatch, capsysbinary):
    import io
    import sys

    data = (shared_dir / "data/sglang_logs/issue2795_v0.4.1.post3_deepseek-v3_2x8-h800_decode.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["parse", "-"]) == 0
    out, err = capsysbinary.readouterr()
    assert len(out.splitlines()) == 19
    assert err.decode().startswith("-: 19 events, 0 lines skipped, 0 dead-lettered")
    assert parse_event(out.splitlines()[0]).event_id == "stdin:1"
