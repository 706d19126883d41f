"""Build validation/sglang_deepseek_inferencex_mtp.csv: the B200 SGLang 0.5.9 DeepSeek-R1 rows InferenceX measured
with EAGLE/MTP speculative decoding (``dsr1-fp8-b200-sglang-mtp``), with their launch flags and client.

`validation/build_deepseek_inferencex.py` (its docstring has the sources: SemiAnalysisAI/InferenceX @12ba0ae07,
``.github/configs/nvidia-master.yaml`` and ``benchmarks/single_node/dsr1_fp8_b200_mtp.sh``) identifies these rows
and leaves them out of validation/sglang_deepseek_inferencex.csv; this script writes them, by the same rules
(`config_of`, the same-run key, the client) and the MTP script's flags: those of the plain TP8 fp8 script
(``--mem-fraction-static 0.82 --kv-cache-dtype fp8_e4m3 --scheduler-recv-interval {10 if C < 16 else 30}
--disable-radix-cache --stream-interval 30``) with ``--cuda-graph-max-bs 512 --max-running-requests 512
--chunked-prefill-size 16384 --max-prefill-tokens 16384`` and ``--speculative-algorithm EAGLE
--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3`` (DeepSeek's NextN layer
as the draft). The acceptance length is not recorded; `shadowsim validate` draws it from its default (each draft
token accepted with probability 0.7: mean 2.19 of at most 3), or from ``--speculative-accept-length`` appended to
``server_args`` (docs/accuracy.md §3.13).

    python validation/build_deepseek_inferencex_mtp.py           # writes the CSV
    python validation/build_deepseek_inferencex_mtp.py --check   # exits 1 if the CSV in the repo differs
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "sglang_deepseek_inferencex_mtp.csv"
MTP_CONFIG = "dsr1-fp8-b200-sglang-mtp"
SPECULATIVE = ("--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 1 "
               "--speculative-num-draft-tokens 3")


def _plain_builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_deepseek_inferencex", ROOT / "build_deepseek_inferencex.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mtp_launch_flags(concurrency: int, recv: int) -> str:
    """The flags of ``dsr1_fp8_b200_mtp.sh`` the simulator models (module docstring)."""
    return (f"--cuda-graph-max-bs 512 --max-running-requests 512 --mem-fraction-static 0.82 "
            f"--kv-cache-dtype fp8_e4m3 --chunked-prefill-size 16384 --max-prefill-tokens 16384 "
            f"--scheduler-recv-interval {recv} --disable-radix-cache --stream-interval 30 --ep-size 1 {SPECULATIVE}")


def build(source: Path | None = None) -> tuple[list[str], list[dict[str, str]], dict[str, int]]:
    plain = _plain_builder()
    src = source or plain.SOURCE
    with src.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    plain_tp8 = {plain._key(r) for r in rows if r["id"].endswith(plain.PLAIN_CONFIG_ID)}
    out: list[dict[str, str]] = []
    seen: set[tuple] = set()
    counts: dict[str, int] = {}
    for r in rows:
        if plain.config_of(r, plain_tp8) != MTP_CONFIG:
            continue
        k = plain._key(r)
        if k in seen:
            counts["same run (left out)"] = counts.get("same run (left out)", 0) + 1
            continue
        seen.add(k)
        c = int(r["concurrency"])
        r = dict(r)
        r["server_args"] = mtp_launch_flags(c, plain.recv_interval(c, int(r["tp"]), r["precision"]))
        r["client"] = "bench_serving"
        r["random_range_ratio"] = plain.RANGE_RATIO
        r["seed"] = "0"
        r["num_requests"] = str(10 * c)
        r["warmup_requests"] = str(2 * c)
        r["deployment_note"] = f"{MTP_CONFIG}; not simulated: {plain.NOT_SIMULATED['fp8']}"
        counts[MTP_CONFIG] = counts.get(MTP_CONFIG, 0) + 1
        out.append(r)
    extra = [f for f in ("client", "random_range_ratio", "seed", "warmup_requests", "deployment_note")
             if f not in fields]
    return fields + extra, out, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    a = ap.parse_args(argv)
    fields, rows, counts = build()
    text = _plain_builder().render(fields, rows)
    if a.check:
        if not a.out.exists() or a.out.read_text() != text:
            print(f"{a.out} is stale: rerun python validation/build_deepseek_inferencex_mtp.py", file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(f"wrote {a.out}: {len(rows)} rows; {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
