"""Split a simulated TPOT into the decode step and the prefill pauses it carries (docs/accuracy.md §3.12, B300).

bench_serving's TPOT is ``(latency − ttft) / (output tokens − 1)``: a request's decode time divided by its tokens,
so it holds every forward pass that ran while the request was decoding, its own decode steps and the other
requests' prefill (or mixed) steps in between. Over a closed-loop run every running request sees the same
sequence of steps, so to first order ``TPOT ≈ decode step + pause per decode step`` with

- ``decode step`` = mean GPU time of the decode-only steps, and
- ``pause per decode step`` = GPU time of all other steps / number of decode steps.

Subtracting the simulated pause per decode step from a measured TPOT leaves the **implied measured decode step**:
what one decode forward must have cost on the real server if the simulated prefills are right (their cost is
checked separately against the measured TTFT). Comparing it with the simulated decode step prices the decode
forward alone, row by row, without the prefills' share.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from simcore.results import StepRecord


@dataclass(frozen=True, slots=True)
class DecodeSplit:
    """Seconds; ``mean_batch`` rows and ``mean_kv`` tokens per decode row, averaged over the decode steps."""

    decode_steps: int
    decode_step_s: float
    pause_per_decode_step_s: float
    mean_batch: float
    mean_kv: float

    def implied_decode_step_s(self, measured_tpot_s: float) -> float:
        """The measured TPOT less the simulated prefill pauses per decode step."""
        return measured_tpot_s - self.pause_per_decode_step_s


def split_decode(steps: Iterable[StepRecord]) -> DecodeSplit:
    """Decode-only steps against every other forward pass (prefill, mixed) of a run's step records."""
    n = rows = 0
    kv = 0
    decode_s = other_s = 0.0
    for s in steps:
        dt = s.end_s - s.start_s
        if s.shape.mode == "decode":
            n += 1
            decode_s += dt
            rows += s.shape.num_decode
            kv += s.shape.decode_sum_kv
        else:
            other_s += dt
    if n == 0:
        raise ValueError("no decode-only step in the run: nothing to split")
    return DecodeSplit(n, decode_s / n, other_s / n, rows / n, kv / rows if rows else 0.0)
