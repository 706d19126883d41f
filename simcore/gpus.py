"""GPU catalogue: peak throughput and memory of the accelerators shadowsim knows, loaded from data.

The numbers live in ``simcore/perf/data/gpus.json`` (specs are data, STYLE §5). Names follow aiconfigurator's
system names (``h100_sxm``, ``h200_sxm``, ``a100_sxm``, ``b200_sxm``, ``l40s`` …); common spellings such as
``H100``, ``A100-80GB`` or ``NVIDIA H100 80GB HBM3`` resolve through aliases.

Units: bytes, bytes per second, FLOP per second (dense tensor-core peak, no sparsity).
"""
from __future__ import annotations

import json
import os
import re
from functools import lru_cache

from simcore.frozen_model import ConfigDict, FrozenModel

from simcore.errors import UserError


class GpuSpec(FrozenModel):
    """One accelerator model. ``nvlink_bytes_per_s`` is per GPU, one direction (PCIe for NVLink-less cards)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    aliases: tuple[str, ...] = ()
    memory_bytes: int
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    peak_flops: dict[str, float]
    sm_version: int = 0
    # Multi-node TP/EP: GPUs per NVLink domain and the per-GPU network bandwidth (one direction) between domains;
    # the defaults are an 8-GPU box on 200 Gb/s HDR per GPU.
    gpus_per_node: int = 8
    inter_node_bytes_per_s: float = 2.5e10

    def flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for a compute dtype; fp8 falls back to bf16 on GPUs without fp8 tensor cores."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        if dtype == "nvfp4":  # FP4 tensor cores (Blackwell); else it runs as fp8 (Hopper) or bf16
            return self.peak_flops.get("fp4", self.peak_flops.get("fp8", self.peak_flops["bf16"]))
        if dtype in ("fp8", "fp8_block", "int8", "fp4", "int4"):
            return self.peak_flops["bf16"]
        return self.peak_flops["bf16"]

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30


def _norm(name: str) -> str:
    s = name.strip().lower()
    s = s.removeprefix("nvidia").strip(" -_")
    s = re.sub(r"[\s_]+", "-", s)
    return s


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, GpuSpec]:
    with open(os.path.join(os.path.dirname(__file__), "perf", "data", "gpus.json")) as f:  # os.path: start-up
        raw = json.loads(f.read())
    return {g["name"]: GpuSpec(**g) for g in raw["gpus"]}


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    idx: dict[str, str] = {}
    for name, spec in _catalogue().items():
        for key in (name, *spec.aliases):
            idx[_norm(key)] = name
    return idx


def list_gpus() -> list[str]:
    """Canonical names of every catalogued GPU."""
    return sorted(_catalogue())


def load_gpu(name: str) -> GpuSpec:
    """Look a GPU up by canonical name or alias (case-insensitive).

    Also accepts driver strings such as ``NVIDIA H100 80GB HBM3`` by trying progressively shorter prefixes.
    Raises UserError("--gpu", …) listing the known names when nothing matches.
    """
    idx = _index()
    key = _norm(name)
    if key in idx:
        return _catalogue()[idx[key]]
    # Driver strings: "h100-80gb-hbm3" → "h100-80gb" → "h100".
    parts = key.split("-")
    for n in range(len(parts) - 1, 0, -1):
        cand = "-".join(parts[:n])
        if cand in idx:
            return _catalogue()[idx[cand]]
    raise UserError("--gpu", f"unknown GPU {name!r}", f"known: {', '.join(list_gpus())}")
