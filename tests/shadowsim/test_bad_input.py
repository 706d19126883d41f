"""Every bad input is one line on stderr, exit 2, no traceback: a table of bad inputs through every command.

Binary and empty files, files in the wrong format, missing files, zero and negative values of numeric flags,
unknown names. Each case runs the real entry point in-process (so an uncaught exception fails the test) and
checks the message names what is wrong. The last-resort "internal:" line of the CLI counts as a failure here:
it means a bad input reached code that did not check it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from shadowsim.cli import main

M8 = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100_sxm"]
PRED = ["predict", *M8, "--concurrency", "2", "--num-requests", "4"]
SWEEP = ["sweep", *M8, "--request-rate", "2", "--num-requests", "4", "--jobs", "1"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    paths = {
        "binary": d / "binary.bin", "empty": d / "empty.txt", "text": d / "words.txt", "csv": d / "wrong.csv",
        "json_list": d / "list.json", "missing": d / "no_such_file.jsonl", "dir": d,
    }
    paths["binary"].write_bytes(bytes(range(256)) * 16)
    paths["empty"].write_text("")
    paths["text"].write_text("this is not a trace\nnor a log line\n" * 20)
    paths["csv"].write_text("a,b,c\n1,2,3\n")
    paths["json_list"].write_text("[1, 2, 3]\n")
    paths["bad_yaml"] = d / "shadow.yaml"
    paths["bad_yaml"].write_text("default:\n model: x\n  gpu: h100\n")  # over-indented third line
    paths["measurements"] = d / "one_row.csv"  # a valid measurement file, for flags checked after reading it
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "validation" / "sglang_qwen3_32b_h100.csv"
    paths["measurements"].write_text("\n".join(shared.read_text().splitlines()[:2]) + "\n")
    return {k: str(v) for k, v in paths.items()}


# (case id, argv with {placeholders} for the files above, a word the message must contain)
CASES: list[tuple[str, list[str], str]] = [
    # predict: files
    ("predict-trace-binary", [*PRED[:5], "--trace", "{binary}"], "trace"),
    ("predict-trace-empty", [*PRED[:5], "--trace", "{empty}"], "trace"),
    ("predict-trace-text", [*PRED[:5], "--trace", "{text}"], "trace"),
    ("predict-trace-csv", [*PRED[:5], "--trace", "{csv}"], "trace"),
    ("predict-trace-missing", [*PRED[:5], "--trace", "{missing}"], "trace"),
    ("predict-trace-dir", [*PRED[:5], "--trace", "{dir}"], "trace"),
    ("predict-trace-wrong-format", [*PRED[:5], "--trace", "{text}", "--trace-format", "mooncake"], "trace"),
    # the undetected-format error advises `--trace-format native` (streams/traces.py): the CLI takes it (= jsonl)
    ("predict-trace-native", [*PRED[:5], "--trace", "{text}", "--trace-format", "native"], "no usable request"),
    ("predict-profile-binary", [*PRED, "--profile", "{binary}"], "profile"),
    ("predict-profile-empty", [*PRED, "--profile", "{empty}"], "profile"),
    ("predict-profile-list", [*PRED, "--profile", "{json_list}"], "profile"),
    ("predict-profile-missing", [*PRED, "--profile", "{missing}"], "profile"),
    ("predict-model-binary", ["predict", "--model", "{binary}", "--gpu", "h100", "--concurrency", "1"], "model"),
    ("predict-out-ext", [*PRED, "--out", "x.txt"], "--out"),
    ("predict-report-ext", [*PRED, "--report", "x.pdf"], "--report"),
    ("predict-model-error-list", [*PRED, "--model-error", "{json_list}"], "RESULT"),
    ("predict-model-error-missing", [*PRED, "--model-error", "{missing}"], "RESULT"),
    # predict: unknown names
    ("predict-model", ["predict", "--model", "no/such-model", "--gpu", "h100", "--concurrency", "1"], "model"),
    ("predict-model-not-modelled", ["predict", "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--gpu", "h100",
                                    "--concurrency", "1"], "linear attention"),
    ("predict-gpu", ["predict", "--model", "Qwen/Qwen3-8B", "--gpu", "tpu9", "--concurrency", "1"], "gpu"),
    ("predict-precision", [*PRED, "--precision", "fp3"], "precision"),
    ("predict-policy", [*PRED, "--schedule-policy", "fastest"], "schedule-policy"),
    ("predict-scenario", ["predict", *M8, "--request-rate", "1", "--scenario", "nope"], "scenario"),
    ("predict-kv-dtype", [*PRED, "--kv-cache-dtype", "fp2"], "kv"),
    ("predict-misspelled-flag", [*PRED, "--concurency", "3"], "concurrency"),
    ("predict-not-a-number", [*PRED[:5], "--concurrency", "many"], "concurrency"),
    # predict: conflicting workload flags
    ("predict-conc-and-rate", [*PRED, "--request-rate", "3"], "concurrency"),
    ("predict-trace-and-conc", [*PRED, "--trace", "{csv}"], "trace"),
    ("predict-no-workload", ["predict", *M8], "workload"),
    ("predict-prompt-beyond-context", [*PRED, "--input-len", "200000"], "context"),
    ("sweep-conc-and-rate", [*SWEEP, "--concurrency", "2"], "concurrency"),
    # validate, calibrate, parse, report
    ("validate-binary", ["validate", "{binary}"], "MEASUREMENTS"),
    ("validate-empty", ["validate", "{empty}"], "MEASUREMENTS"),
    ("validate-wrong-csv", ["validate", "{csv}"], "MEASUREMENTS"),
    ("validate-missing", ["validate", "{missing}"], "MEASUREMENTS"),
    ("validate-dir", ["validate", "{dir}"], "MEASUREMENTS"),
    ("validate-profile-binary", ["validate", "{measurements}", "--profile", "{binary}"], "profile"),
    ("calibrate-e2e-binary", ["calibrate", "--from-e2e", "{binary}"], "MEASUREMENTS"),
    ("calibrate-e2e-missing", ["calibrate", "--from-e2e", "{missing}"], "MEASUREMENTS"),
    ("calibrate-base-binary", ["calibrate", "--base", "{binary}", "--cpu-base-s", "0.001"], "profile"),
    ("calibrate-tables-unknown", ["calibrate", "--from-tables", "tpu9"], "--from-tables: unknown gpu"),
    ("calibrate-nothing", ["calibrate"], "nothing to fit"),
    ("parse-binary", ["parse", "{binary}"], "FILE"),
    ("parse-missing", ["parse", "{missing}"], "FILE"),
    ("parse-dir", ["parse", "{dir}"], "FILE"),
    ("parse-format", ["parse", "{text}", "--trace-format", "nope"], "format"),
    ("report-binary", ["report", "{binary}", "--out", "r.html"], "RESULT"),
    ("report-empty", ["report", "{empty}", "--out", "r.html"], "RESULT"),
    ("report-list", ["report", "{json_list}", "--out", "r.html"], "RESULT"),
    ("report-missing", ["report", "{missing}", "--out", "r.html"], "RESULT"),
    ("report-ext", ["report", "{json_list}", "--out", "r.txt"], "--out"),
    ("schema-kind", ["schema", "--kind", "no_such_kind"], "kind"),
    ("publish-missing", ["publish", "{missing}", "--bootstrap-servers", "127.0.0.1:1"], "FILE"),
    ("publish-binary", ["publish", "{binary}", "--bootstrap-servers", "127.0.0.1:1"], "FILE"),
    ("run-config-missing", ["run", "--bootstrap-servers", "127.0.0.1:1", "--config", "{missing}"], "config"),
    ("run-config-binary", ["run", "--bootstrap-servers", "127.0.0.1:1", "--config", "{binary}"], "config"),
    ("run-config-bad-yaml", ["run", "--bootstrap-servers", "127.0.0.1:1", "--config", "{bad_yaml}"],
     "not valid YAML at line 3, column 6: mapping values are not allowed here"),
    ("unknown-command", ["frobnicate"], "frobnicate"),
]

# zero and negative values of every numeric flag that must be positive (not --chunked-prefill-size: SGLang reads
# any value <= 0 as "no chunking", scheduler.py Scheduler.init_chunked_prefill)
NUMERIC: list[tuple[str, list[str], str]] = []
for flag in ("--tp", "--concurrency", "--num-requests", "--input-len", "--output-len", "--max-prefill-tokens",
             "--max-running-requests", "--max-total-tokens", "--page-size", "--context-length",
             "--cuda-graph-max-bs", "--replicas", "--slo-ttft-ms", "--slo-tpot-ms", "--mem-fraction-static",
             "--random-range-ratio", "--until", "--prefill-max-requests", "--swa-full-tokens-ratio"):
    for value in ("0", "-3"):
        NUMERIC.append((f"predict{flag}={value}", [*PRED, f"{flag}={value}"], flag.lstrip("-").split("-")[0]))
for flag in ("--time-scale", "--trace-limit"):
    for value in ("0", "-3"):
        NUMERIC.append((f"predict{flag}={value}", [*PRED[:5], "--trace", "{csv}", f"{flag}={value}"],
                        flag.lstrip("-").split("-")[0]))
for value in ("0", "-2"):
    NUMERIC.append((f"predict--request-rate={value}", [*PRED[:5], f"--request-rate={value}"], "request"))
    NUMERIC.append((f"predict--tokenize-ms=-{value or 1}", [*PRED, "--tokenize-ms=-1"], "tokenize"))
    for flag in ("--tp", "--request-rate", "--jobs", "--replicas", "--slo-attainment", "--rate-tolerance",
                 "--num-requests", "--max-running-requests"):
        NUMERIC.append((f"sweep{flag}={value}", [*SWEEP, f"{flag}={value}"], flag.lstrip("-").split("-")[0]))
    for flag in ("--requests-per-client", "--prompt-overhead-tokens", "--warmup-per-client"):
        if flag == "--warmup-per-client" and value == "0":
            continue  # 0 = no warm-up, documented
        if flag == "--prompt-overhead-tokens" and value == "0":
            continue  # 0 = /generate with token ids, documented
        NUMERIC.append((f"validate{flag}={value}", ["validate", "{csv}", f"{flag}={value}"],
                        flag.lstrip("-").split("-")[0]))
    NUMERIC.append((f"demo--duration={value}", ["demo", f"--duration={value}", "--no-ui"], "duration"))
    NUMERIC.append((f"publish--speed={value}", ["publish", "{csv}", "--bootstrap-servers", "127.0.0.1:1",
                                                f"--speed={value}"], "speed"))
    NUMERIC.append((f"broker--partitions={value}", ["broker", f"--partitions={value}"], "partitions"))
    NUMERIC.append((f"calibrate--cpu-base-s=-1", ["calibrate", "--cpu-base-s=-1"], "cpu"))


@pytest.mark.parametrize("argv,word", [pytest.param(a, w, id=i) for i, a, w in CASES + NUMERIC])
def test_bad_input_is_one_line_exit_2(argv: list[str], word: str, files: dict[str, str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    args = [a.format(**files) for a in argv]
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse errors exit through SystemExit(2)
        rc = exc.code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (rc, out[-500:], err[-2000:])
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal:" not in err, err
    assert word.lower() in lines[0].lower(), lines[0]
    assert lines[0].startswith("shadowsim"), lines[0]
