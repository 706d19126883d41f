"""Which latency model a twin predicts with: `auto` (the default) picks simcore.perf when the model and GPU are
known and catalogued, else the linear placeholder — said once in the log and in build info; `perf` and `linear`
are explicit choices; a calibration profile named in shadow.yaml reaches the model and `calibration_hash`."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from exporters.prometheus import make_registry
from simcore.errors import UserError
from simcore.events import parse_event
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import build_latency_model, default_profile
from simcore.perf.base import BatchShape
from simcore.perf.profile import CalibrationProfile
from shadowsim.shadow import engine as engine_mod
from shadowsim.shadow.config import InstanceConfig, ShadowConfig, SnapshotConfig, load_config
from shadowsim.shadow.engine import FALLBACK_NAME, build_latency, engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sources import MemorySource, Record
from shadowsim.shadow.view import build_view

DECODE = BatchShape(num_decode=16, decode_sum_kv=16 * 2048, cuda_graph_bs=16)


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    engine_mod._WARNED.clear()  # "once" is per process; each test starts from a process that said nothing yet


def test_auto_is_the_default_and_without_a_model_falls_back_to_linear_saying_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    cfg = InstanceConfig()
    assert cfg.latency_backend == "auto"
    with caplog.at_level(logging.WARNING, logger="shadowsim.shadow"):
        first, second = build_latency(cfg, {}), build_latency(cfg, {})
    assert first.name == second.name == FALLBACK_NAME == "linear-fallback"
    assert first.profile_hash == "none"
    # the fallback predicts with the configured `linear:` coefficients: 6 ms + 16 × 0.1 ms + 32768 × 2e-8 s
    assert first.step_time(DECODE).gpu_s == pytest.approx(0.006 + 16e-4 + 16 * 2048 * 2e-8)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no model named" in warnings[0].getMessage()


def test_auto_uses_perf_when_server_config_names_a_catalogued_model_and_gpu() -> None:
    lm = build_latency(InstanceConfig(), {"model": "Qwen/Qwen3-8B", "gpu": "h100_sxm", "tp_size": 2})
    assert lm.name == "table:h100_sxm:tp2:bf16"
    ref = build_latency_model(load_model("Qwen/Qwen3-8B"), load_gpu("h100_sxm"), 2, "bf16")
    assert lm.step_time(DECODE) == ref.step_time(DECODE)
    assert lm.profile_hash == ref.profile_hash != "none"


def test_auto_takes_model_gpu_tp_from_the_instance_config() -> None:
    cfg = InstanceConfig(model="Qwen/Qwen3-8B", gpu="l4", tp_size=2, precision="fp8")
    assert build_latency(cfg, {}).name == "roofline:l4:tp2:fp8"  # no tables for L4: the roofline model
    # the server's own word wins over shadow.yaml
    assert build_latency(cfg, {"tp_size": 4}).name == "roofline:l4:tp4:fp8"


def test_auto_falls_back_when_the_catalogue_does_not_know_the_model(caplog: pytest.LogCaptureFixture) -> None:
    cfg = InstanceConfig(model="acme/secret-13b", gpu="h100_sxm")
    with caplog.at_level(logging.WARNING, logger="shadowsim.shadow"):
        assert build_latency(cfg, {}).name == FALLBACK_NAME
    assert "acme/secret-13b" in caplog.text and "unknown model" in caplog.text


def test_explicit_choices_are_kept() -> None:
    assert build_latency(InstanceConfig(latency_backend="linear", model="Qwen/Qwen3-8B", gpu="h100_sxm"), {}
                         ).name == "linear"
    assert build_latency(InstanceConfig(latency_backend="perf", model="Qwen/Qwen3-8B", gpu="h100_sxm"), {}
                         ).name == "table:h100_sxm:tp1:bf16"
    with pytest.raises(UserError, match="unknown model"):  # perf never silently falls back
        build_latency(InstanceConfig(latency_backend="perf", model="acme/secret-13b", gpu="h100_sxm"), {})


def test_instance_entries_override_default_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "shadow.yaml"
    path.write_text("instances:\n"
                    "  default: {model: Qwen/Qwen3-8B, gpu: h100_sxm, tp_size: 1, settings: {chunked_prefill_size: 8192}}\n"
                    "  big: {gpu: h200_sxm, tp_size: 4, settings: {page_size: 16}}\n")
    cfg = load_config(path)
    big, other = cfg.instance("big"), cfg.instance("sglang-3")
    assert (big.model, big.gpu, big.tp_size) == ("Qwen/Qwen3-8B", "h200_sxm", 4)
    assert big.settings == {"chunked_prefill_size": 8192, "page_size": 16}
    assert (other.gpu, other.tp_size, other.settings) == ("h100_sxm", 1, {"chunked_prefill_size": 8192})


def _profile(tmp_path: Path) -> tuple[Path, CalibrationProfile]:
    prof = default_profile().model_copy(update={"name": "test", "op_scale": {**default_profile().op_scale,
                                                                            "gemm": 1.3}})
    (tmp_path / "profiles").mkdir()
    path = tmp_path / "profiles" / "h100.json"
    prof.save(path)
    return path, prof


def test_a_profile_named_in_shadow_yaml_reaches_the_model(tmp_path: Path) -> None:
    _, prof = _profile(tmp_path)
    (tmp_path / "shadow.yaml").write_text(
        "instances:\n  default: {model: Qwen/Qwen3-8B, gpu: l4, profile: profiles/h100.json}\n"
        "  tabled: {gpu: h100_sxm}\n")
    cfg = load_config(tmp_path / "shadow.yaml")  # relative to shadow.yaml's directory
    assert cfg.instance("x").profile == tmp_path / "profiles" / "h100.json"
    roof = build_latency(cfg.instance("x"), {})
    assert roof.profile_hash == prof.profile_hash != default_profile().profile_hash  # roofline: the profile's hash
    table = build_latency(cfg.instance("tabled"), {})
    want = build_latency_model(load_model("Qwen/Qwen3-8B"), load_gpu("h100_sxm"), 1, "bf16", profile=prof)
    assert table.profile_hash == want.profile_hash  # table backend: the profile's hash combined with the tables'
    assert table.step_time(DECODE) == want.step_time(DECODE)
    plain = build_latency_model(load_model("Qwen/Qwen3-8B"), load_gpu("h100_sxm"), 1, "bf16")
    assert table.step_time(DECODE).gpu_s > plain.step_time(DECODE).gpu_s  # gemm × 1.3 made the step slower


def test_a_hand_edited_profile_is_refused_at_startup_naming_the_entry(tmp_path: Path) -> None:
    path, _ = _profile(tmp_path)
    data = json.loads(path.read_text())
    data["op_scale"]["gemm"] = 0.5  # the stored profile_hash no longer matches
    path.write_text(json.dumps(data))
    (tmp_path / "shadow.yaml").write_text("instances:\n  sglang-1: {profile: profiles/h100.json}\n")
    with pytest.raises(UserError, match=r"instances\.sglang-1\.profile: .*content hash"):
        load_config(tmp_path / "shadow.yaml")


def _build_info(cfg: ShadowConfig, events: list[dict]) -> dict[str, str]:
    recs = tuple(Record("t", 0, i, b"k", [parse_event(e)]) for i, e in enumerate(events))
    svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: 0.0)
    svc.run(idle_timeout_s=0, checkpoint_at_end=False)
    reg = make_registry(lambda: build_view(svc))
    [metric] = [m for m in reg.collect() if m.name == "shadowsim_build_info"]
    return {s.labels["sglang_instance"]: s.labels for s in metric.samples}


def test_build_info_names_the_model_the_twin_predicts_with_and_the_profile_hash(tmp_path: Path) -> None:
    _, prof = _profile(tmp_path)
    (tmp_path / "shadow.yaml").write_text("instances:\n  calibrated: {model: Qwen/Qwen3-8B, gpu: l4, "
                                          "profile: profiles/h100.json}\n")
    cfg = load_config(tmp_path / "shadow.yaml").model_copy(update={"snapshot": SnapshotConfig(dir=tmp_path / "s")})
    arrive = {"kind": "request_arrived", "ts": 100.0, "request_id": "r1", "prompt_tokens": 64,
              "output_tokens_hint": 8}
    labels = _build_info(cfg, [
        {**arrive, "instance_id": "placeholder"},
        {"kind": "server_config", "instance_id": "announced", "ts": 99.0, "model": "Qwen/Qwen3-8B",
         "gpu": "h100_sxm", "tp_size": 2},
        {**arrive, "instance_id": "announced"},
        {**arrive, "instance_id": "calibrated"},
    ])
    assert labels["placeholder"]["latency_model"] == "linear-fallback"
    assert labels["placeholder"]["calibration_hash"] == "none"
    assert labels["announced"]["latency_model"] == "table:h100_sxm:tp2:bf16"
    assert labels["announced"]["model"] == "Qwen/Qwen3-8B"
    assert labels["calibrated"]["latency_model"] == "roofline:l4:tp1:bf16"
    assert labels["calibrated"]["calibration_hash"] == prof.profile_hash


def test_shadowsim_run_refuses_a_bad_profile_before_touching_kafka(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from shadowsim.cli import main

    (tmp_path / "shadow.yaml").write_text("instances:\n  default: {profile: missing.json}\n")
    rc = main(["run", "--config", str(tmp_path / "shadow.yaml"), "--bootstrap-servers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("shadowsim: error: instances.default.profile: no profile file at")
    assert str(tmp_path / "missing.json") in err
