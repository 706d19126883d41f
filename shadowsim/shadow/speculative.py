"""Decode cadence of a speculative-decoding server, learned online from its ``Decode batch`` lines.

A server launched with ``--speculative-algorithm`` logs ``accept len`` on every ``Decode batch`` line: the mean
tokens each request emitted per verify pass over the last ``decode_log_interval`` iterations (bonus token
included). Its decode cadence, the tokens per second the line reports as ``gen throughput``, is

    running requests × accepted length / iteration time,

with the iteration (draft steps + verify + draft extend) priced by `simcore.speculative.SpeculativeConfig`.
`SpeculativeCadence` keeps, per server (or per DP rank), the two things a live shadow learns from the log:

- the acceptance distribution (`simcore.speculative.OnlineAcceptance`), from the ``accept len`` fields, each line
  weighted by the verify passes it averages (running requests × ``decode_log_interval``);
- the iteration-time factor: observed iteration time (running × accept len / gen throughput) over the modelled
  one, a geometric running mean, like the shadow's other calibration factors.

`observe(event)` first predicts the line from what earlier lines taught (so every prediction is out of sample),
then learns from it. `replay(events)` does that for a whole log and returns the predictions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from simcore.events import DecodeBatch
from simcore.perf.base import LatencyModel
from simcore.speculative import OnlineAcceptance, SpeculativeConfig

# SGLang's --decode-log-interval default: one Decode batch line per 40 decode iterations.
DEFAULT_DECODE_LOG_INTERVAL = 40


@dataclass(frozen=True)
class CadencePrediction:
    """One line's predicted and logged cadence. Throughputs in tokens/s (the whole batch), times in seconds."""

    ts: float
    running_reqs: int
    predicted_tok_s: float
    actual_tok_s: float | None
    predicted_accept_len: float
    actual_accept_len: float | None
    iteration_s: float  # modelled iteration time × the learned factor
    model_iteration_s: float  # the perf model alone

    @property
    def ape_pct(self) -> float | None:
        if not self.actual_tok_s:
            return None
        return abs(self.predicted_tok_s - self.actual_tok_s) / self.actual_tok_s * 100.0


@dataclass
class SpeculativeCadence:
    """Online cadence model of one speculative server (one scheduler: a DP rank with DP attention)."""

    config: SpeculativeConfig
    target: LatencyModel
    draft: LatencyModel
    decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL
    overlap: bool = False
    factor_memory_lines: float = 20.0  # the time factor's running mean forgets with this many lines' memory
    acceptance: OnlineAcceptance = field(init=False)
    _log_factor: float = field(default=0.0, init=False)
    _factor_weight: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.acceptance = OnlineAcceptance(max_len=self.config.max_accept_len,
                                           prior_mean=(1.0 + self.config.max_accept_len) / 2.0)

    @property
    def time_factor(self) -> float:
        return math.exp(self._log_factor) if self._factor_weight else 1.0

    def model_iteration_s(self, running: int, kv_tokens: int, accept_len: float) -> float:
        st = self.config.iteration_time(self.target, self.draft, running, kv_tokens, accept_len)
        return st.gpu_s if self.overlap else st.gpu_s + st.cpu_s

    def observe(self, ev: DecodeBatch) -> CadencePrediction | None:
        """Predict this line from the past, then learn from it. None for a line without running requests."""
        running = ev.running_reqs or 0
        if running <= 0:
            return None
        kv = ev.kv_tokens or running
        accept = self.acceptance.mean
        model_s = self.model_iteration_s(running, kv, accept)
        iteration_s = model_s * self.time_factor
        pred = CadencePrediction(ev.ts, running, running * accept / iteration_s, ev.gen_throughput_tok_s, accept,
                                 ev.accept_len, iteration_s, model_s)
        self._learn(ev, running, kv)
        return pred

    def _learn(self, ev: DecodeBatch, running: int, kv: int) -> None:
        if ev.accept_len is None:
            return
        self.acceptance.observe(ev.accept_len, running * self.decode_log_interval)
        if ev.gen_throughput_tok_s:
            observed_s = running * ev.accept_len / ev.gen_throughput_tok_s
            model_s = self.model_iteration_s(running, kv, ev.accept_len)
            keep = 1.0 - 1.0 / self.factor_memory_lines
            x = math.log(observed_s / model_s)
            self._log_factor = (self._log_factor * self._factor_weight * keep + x) / (self._factor_weight * keep + 1)
            self._factor_weight = self._factor_weight * keep + 1

    def replay(self, events: Iterable[Any]) -> list[CadencePrediction]:
        """Every Decode batch event of ``events`` in order, predicted then learned."""
        out = []
        for ev in events:
            if isinstance(ev, DecodeBatch):
                p = self.observe(ev)
                if p is not None:
                    out.append(p)
        return out
