"""GpuTimeScaling: wrappers multiply the wrapped model's GPU time, keep its CPU time, and carry its identity."""
from __future__ import annotations

from dataclasses import dataclass

from simcore.perf.base import BatchShape, GpuTimeScaling, LatencyModel, LinearLatencyModel


@dataclass
class Doubled(GpuTimeScaling):
    base: LatencyModel

    def gpu_factor(self, shape: BatchShape) -> float:
        return 2.0 if shape.extend_lens else 1.0


def test_factor_scales_gpu_time_only_and_identity_passes_through() -> None:
    base = LinearLatencyModel(base_s=0.01, per_extend_token_s=1e-4, cpu_s=0.002, name="lin", profile_hash="h1")
    w = Doubled(base)
    prefill = BatchShape(extend_lens=(100,), prefix_lens=(0,))
    st = w.step_time(prefill)
    assert st.gpu_s == 2 * (0.01 + 100 * 1e-4) and st.cpu_s == 0.002  # 0.04 s GPU, CPU unchanged
    decode = BatchShape(num_decode=4, decode_sum_kv=400)
    assert w.step_time(decode) == base.step_time(decode)  # factor 1: the base's answer as is
    assert (w.name, w.profile_hash) == ("lin", "h1")
    assert isinstance(w, LatencyModel)
