"""shadow.yaml: the example in docs/shadow.md loads, flags override it, and mistakes name the field."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simcore.errors import UserError
from shadowsim.shadow.config import TimeConfig, load_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "shadow.md"


def test_the_documented_example_loads(tmp_path: Path) -> None:
    block = re.search(r"## shadow.yaml\n\n```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    assert block is not None
    path = tmp_path / "shadow.yaml"
    path.write_text(block.group(1))
    cfg = load_config(path, {"kafka.topic": "t1", "snapshot.every_s": 2.5, "kafka.group": None})
    assert cfg.instance("anything").model == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.instance("anything").settings["chunked_prefill_size"] == 8192
    assert cfg.instance("anything").latency_backend == "auto" and cfg.instance("anything").gpu == "h100_sxm"
    big = cfg.instance("sglang-big")  # the override keeps what it does not set from `default`
    assert (big.model, big.gpu, big.tp_size, big.precision) == ("meta-llama/Meta-Llama-3.1-70B", "h200_sxm", 4, "fp8")
    # the example leaves the KV pool unset: the twin sizes it like SGLang for the model/GPU/TP (test_engine_sizing)
    assert big.settings == cfg.instance("anything").settings and big.kv_capacity_tokens is None
    assert cfg.time.max_wait_s == 60.0 and cfg.drift.mape_threshold["tpot"] == 0.2
    assert cfg.kafka.topic == "t1" and cfg.kafka.group == "shadowsim" and cfg.snapshot.every_s == 2.5


def test_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("time:\n  max_wait_s: -3\n")
    with pytest.raises(UserError, match=r"time\.max_wait_s"):
        load_config(path)
    with pytest.raises(UserError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_expiry_is_max_wait_plus_margin_behind_the_watermark() -> None:
    assert TimeConfig().expiry_before(1000.0) == 1000.0 - (60.0 + 600.0)  # the defaults
    assert TimeConfig(max_wait_s=5.0, pending_expiry_margin_s=10.0).expiry_before(100.0) == 85.0
