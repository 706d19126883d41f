"""The GPU catalogue: names, aliases and the numbers the roofline uses."""
from __future__ import annotations

import pytest

from simcore.errors import UserError
from simcore.gpus import list_gpus, load_gpu


@pytest.mark.parametrize("alias, name", [
    ("H100", "h100_sxm"), ("h100", "h100_sxm"), ("NVIDIA H100 80GB HBM3", "h100_sxm"), ("A100-80GB", "a100_sxm"),
    ("a100-40gb", "a100_sxm_40gb"), ("H200", "h200_sxm"), ("b200", "b200_sxm"), ("MI300X", "mi300x"),
    ("l40s", "l40s"), ("H20", "h20"), ("h100_pcie", "h100_pcie"), ("L4", "l4"),
])
def test_aliases_resolve(alias: str, name: str) -> None:
    assert load_gpu(alias).name == name


def test_required_gpus_and_units() -> None:
    for n in ("a100_sxm_40gb", "a100_sxm", "h100_sxm", "h100_pcie", "h200_sxm", "h20", "l40s", "l4", "b200_sxm",
              "mi300x"):
        assert n in list_gpus()
    h100 = load_gpu("h100_sxm")
    assert h100.memory_bytes == 81559 * 2**20  # what the driver reports, which SGLang sizes from
    assert h100.peak_flops["bf16"] == 989e12 and h100.peak_flops["fp8"] == 1978e12
    assert h100.hbm_bytes_per_s == 3.35e12 and h100.nvlink_bytes_per_s == 450e9
    # No fp8 tensor cores on Ampere: fp8 work runs at the bf16 rate.
    assert load_gpu("a100").flops("fp8") == load_gpu("a100").peak_flops["bf16"]


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(UserError) as exc:
        load_gpu("tpu-v5")
    assert exc.value.field == "--gpu" and "h100_sxm" in str(exc.value)
