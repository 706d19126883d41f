"""Trace files → RequestSpec lists: Mooncake, Azure, ShareGPT-style and the native format (docs/workloads.md).

Real files from ../shared/data are read whole; small hand-written files pin the edge cases. A bad line is never
dropped silently: it comes back as an issue with its line number and field, and the good lines still load.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from simcore.errors import UserError
from simcore.workload import prefix_reuse_ceiling
from streams.traces import detect_format, read_trace


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_mooncake_conversation_trace(shared_dir: Path) -> None:
    res = read_trace(shared_dir / "data/mooncake/conversation_trace.jsonl")
    assert res.format == "mooncake" and res.issues == [] and len(res.requests) == 12031
    r = res.requests[0]
    assert (r.arrival_s, r.input_len, r.output_len, r.max_new_tokens, r.key_unit) == (0.0, 6758, 500, 500, 512)
    assert r.key == tuple(range(14)) and r.ignore_eos and r.rid == "conversation_trace:1"
    assert res.requests[-1].arrival_s == pytest.approx(3537, abs=5)
    assert sum(q.input_len for q in res.requests) / 12031 == pytest.approx(12035, abs=1)
    # the mooncake README: infinite-cache ideal block hit rate 0.374
    assert prefix_reuse_ceiling(res.requests) == pytest.approx(0.3736, abs=0.0005)


def test_azure_csv(shared_dir: Path) -> None:
    res = read_trace(shared_dir / "data/azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    assert res.format == "azure" and res.issues == [] and len(res.requests) == 8819
    r0, r1 = res.requests[:2]
    assert (r0.arrival_s, r0.input_len, r0.output_len, r0.key) == (0.0, 4808, 10, None)
    assert r1.arrival_s == pytest.approx(0.052, abs=1e-6) and (r1.input_len, r1.output_len) == (3180, 8)


def test_sharegpt_token_ids(shared_dir: Path) -> None:
    res = read_trace(shared_dir / "data/llmservingsim/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl")
    assert res.format == "sharegpt" and res.issues == [] and len(res.requests) == 300
    r = res.requests[0]
    assert (r.input_len, r.output_len, r.key_unit) == (2358, 531, 1) and len(r.key or ()) == 2358
    assert r.arrival_s == pytest.approx(0.046926808)
    assert r.key is not None and r.key[:3] == (5971, 2927, 220)


def test_sharegpt_agentic_sessions_are_reported(tmp_path: Path) -> None:
    p = _write(tmp_path, "w.jsonl",
               '{"input_toks": 5, "output_toks": 2, "arrival_time_ns": 1000000000}\n'
               '{"session_id": "s", "arrival_time_ns": 0, "sub_requests": []}\n')
    res = read_trace(p)
    assert len(res.requests) == 1 and res.requests[0].arrival_s == 1.0
    assert [(i.line_no, i.field) for i in res.issues] == [(2, "sub_requests")]


def test_native_format(tmp_path: Path) -> None:
    p = _write(tmp_path, "n.jsonl", "\n".join([
        '{"arrival_s": 0.5, "input_ids": [1, 2, 3], "output_len": 4, "max_new_tokens": 16, "rid": "x"}',
        '{"arrival_s": 0.25, "input_len": 1000, "block_hashes": [7, 8], "block_size": 512, "output_len": 2}',
        '{"arrival_s": 1, "input_len": 9, "output_len": 1, "ignore_eos": true, "priority": 3}',
    ]) + "\n")
    res = read_trace(p)
    assert res.format == "native" and res.issues == []
    b, a, c = res.requests  # sorted by arrival
    assert (a.rid, a.input_len, a.key, a.max_new_tokens, a.ignore_eos) == ("x", 3, (1, 2, 3), 16, False)
    assert (b.rid, b.input_len, b.key, b.key_unit, b.max_new_tokens) == ("n:2", 1000, (7, 8), 512, None)
    assert (c.key, c.ignore_eos, c.priority, c.arrival_s) == (None, True, 3, 1.0)
    assert (a.priority, b.priority) == (None, None)  # not given: the least preferred under priority scheduling


@pytest.mark.parametrize("line,field", [
    ('{"arrival_s": 0, "output_len": 1}', "input_len"),
    ('{"arrival_s": -1, "input_len": 3, "output_len": 1}', "arrival_s"),
    ('{"arrival_s": 0, "input_len": 3, "output_len": 0}', "output_len"),
    ('{"arrival_s": 0, "input_len": 3, "input_ids": [1, 2], "output_len": 1}', "input_len"),
    ('{"arrival_s": 0, "input_len": 3, "output_len": 5, "max_new_tokens": 4}', "max_new_tokens"),
    ('{"arrival_s": 0, "input_len": 3000, "block_hashes": [1], "block_size": 512, "output_len": 1}', "block_hashes"),
    ('{"arrival_s": 0, "input_len": 3, "block_hashes": [1], "output_len": 1}', "block_size"),
    ('{"arrival_s": 0, "input_ids": [1, "a"], "output_len": 1}', "input_ids"),
    ('{"arrival_s": 0, "input_len": 3, "output_len": 1, "ignore_eos": "yes"}', "ignore_eos"),
    ('{"arrival_s": 0, "input_len": 3, "output_len": 1', "line"),
    ('[1, 2]', "line"),
])
def test_native_bad_lines_are_reported_and_skipped(tmp_path: Path, line: str, field: str) -> None:
    good = '{"arrival_s": 0, "input_len": 3, "output_len": 1}'
    p = _write(tmp_path, "bad.jsonl", f"{good}\n{line}\n{good}\n")
    res = read_trace(p, "native")
    assert len(res.requests) == 2
    assert len(res.issues) == 1 and res.issues[0].line_no == 2 and res.issues[0].field == field
    assert str(res.issues[0]).startswith(f"line 2: {field}: ")


def test_mooncake_bad_lines(tmp_path: Path) -> None:
    p = _write(tmp_path, "m.jsonl", "\n".join([
        '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}',
        '{"timestamp": 10, "input_length": 1500, "output_length": 3, "hash_ids": [1, 2]}',
        '{"timestamp": 20, "input_length": 600, "hash_ids": [1, 2]}',
        '{"timestamp": "soon", "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}',
        '',
        '{"timestamp": 3000, "input_length": 600, "output_length": 3}',
    ]) + "\n")
    res = read_trace(p)
    assert [r.arrival_s for r in res.requests] == [0.0, 3.0]
    assert res.requests[1].key is None and res.requests[1].key_unit == 1
    assert [(i.line_no, i.field) for i in res.issues] == [(2, "hash_ids"), (3, "output_length"), (4, "timestamp")]
    with pytest.raises(UserError, match="line 2"):
        read_trace(p, strict=True)


def test_azure_bad_rows(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                  "2023-11-16 18:15:46.6805900,374,44\n"
                                  "2023-11-16 18:15:47,0,5\n"
                                  "yesterday,10,5\n"
                                  "2023-11-16 18:15:48,10\n"
                                  "2023-11-16 18:15:50.9951690,396,109\n")
    res = read_trace(p)
    assert len(res.requests) == 2 and res.requests[1].arrival_s == pytest.approx(4.314579)
    assert [(i.line_no, i.field) for i in res.issues] == [(3, "ContextTokens"), (4, "TIMESTAMP"), (5, "line")]


def test_detection_limit_and_errors(tmp_path: Path) -> None:
    p = _write(tmp_path, "x.txt", '{"arrival_s": 0, "input_len": 3, "output_len": 1}\n' * 5)
    assert detect_format(p) == "native"
    assert len(read_trace(p, limit=2).requests) == 2
    with pytest.raises(UserError, match="cannot tell the format"):
        read_trace(_write(tmp_path, "y.jsonl", '{"foo": 1}\n'))
    with pytest.raises(UserError, match="no such file"):
        read_trace(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="unknown format"):
        read_trace(p, "csv")
    assert read_trace(p, ignore_eos=True).requests[0].ignore_eos


@pytest.mark.parametrize("path", ["a/b.jsonl", "b.jsonl", "./x/../y.csv", "//srv/t.csv", "///a/b", "/a/b/",
                                  "a//b/./c.tar.gz", ".hidden", "a.", "a..b", "x/.jsonl", "", ".", "..", "a/..",
                                  "t.CSV", "dir/"])
def test_trace_paths_are_spelled_as_pathlib_spells_them(path: str) -> None:
    # read_trace names requests <stem>:<line> and files in its messages without importing pathlib (start-up):
    # the same text, name, stem and suffix as PurePosixPath
    from pathlib import PurePosixPath

    from streams.traces import _name, _path_text, _stem, _suffix_at

    p, text = PurePosixPath(path), _path_text(path)
    name = _name(text)
    assert (text, name, _stem(path), name[_suffix_at(name):]) == (str(p), p.name, p.stem, p.suffix)


def test_a_trace_read_imports_no_pathlib(tmp_path: Path) -> None:
    import subprocess
    import sys

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n')
    code = ("import sys; from streams.traces import read_trace; r = read_trace(sys.argv[1]); "
            "print(r.requests[0].rid, 'pathlib' in sys.modules)")
    root = str(Path(__file__).resolve().parents[2])
    # -S: without site, whose editable-install hook (a development venv) imports pathlib itself
    out = subprocess.run([sys.executable, "-S", "-c", code, str(trace)], cwd=root, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["t:1", "False"], out.stderr[-500:]
