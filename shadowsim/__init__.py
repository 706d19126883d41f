"""shadowsim: simulate SGLang servers offline (predict, sweep, validate, report) and shadow live ones.

The Python API (docs/api.md)::

    import shadowsim
    p = shadowsim.predict(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100_sxm", concurrency=8,
                          num_requests=64, input_len=512, output_len=64)
    p.ttft_ms["p90"], p.throughput_rps

Names are imported lazily so ``shadowsim --help`` and ``import shadowsim`` stay fast.
"""
from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("shadowsim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "predict": "shadowsim.api", "sweep": "shadowsim.api", "validate": "shadowsim.api", "report": "shadowsim.api",
    "Prediction": "shadowsim.api", "SweepResult": "shadowsim.api", "Validation": "shadowsim.api",
    "closed_loop": "shadowsim.workloads", "open_loop": "shadowsim.workloads", "from_trace": "shadowsim.workloads",
    "scenario": "shadowsim.workloads", "SCENARIOS": "shadowsim.workloads", "Workload": "shadowsim.workloads",
    "UserError": "simcore.errors", "models": "shadowsim.catalogue", "gpus": "shadowsim.catalogue",
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'shadowsim' has no attribute {name!r}")
