"""Speculative decoding (EAGLE, EAGLE3, MTP/NextN) as SGLang runs it: draft steps, one verify pass, accepted length.

One speculative decode iteration of a running batch of ``bs`` requests (SGLang ``speculative/eagle_worker*.py``):

1. **draft**: ``speculative_num_steps`` forward passes of the draft model (an EAGLE head, or DeepSeek's NextN/MTP
   layer: one decoder layer plus the LM head), each over ``bs × speculative_eagle_topk`` tokens;
2. **verify**: one target-model forward over ``bs × speculative_num_draft_tokens`` tokens, each request's draft
   tree attending over its KV (``TARGET_VERIFY``), priced as an extend of ``num_draft_tokens`` per request;
3. **draft extend**: the draft model re-runs over the accepted tokens to refresh its hidden states.

Each request then emits its *accepted length* L ∈ [1, num_steps + 1] tokens (the accepted drafts plus the
target's bonus token). SGLang's ``Decode batch`` line reports ``accept len`` = accepted tokens / (requests ×
verify passes) over the log interval, bonus included (``metrics_reporter.py``: ``spec_num_accept_tokens /
spec_num_forward_ct``; ``tokenizer_manager.py``: "includes bonus token").

`AcceptanceModel` is the distribution of L: a chain whose k-th draft token is accepted with probability a when
all before it were, ``P(L ≥ k + 1) = a^k`` for k ≤ num_steps (the shape of EAGLE's per-position acceptance);
`AcceptanceModel.from_mean` solves a from a mean accept length. `OnlineAcceptance` learns the mean from a live
log's ``accept len`` fields, each weighted by the verify passes it averages (running requests × iterations),
with exponential forgetting. `SpeculativeConfig.iteration_time` prices one iteration from the target and draft
latency models; `speculative_decode_rate` is the resulting cadence (tokens per second per request).

Defaults of unset flags follow SGLang (``arg_groups/speculative_hook.py:_auto_choose_speculative_params``:
(3, 1, 4) for DeepSeek and most models, (5, 4, 8) for Llama; with topk 1 the draft tokens are num_steps + 1).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from simcore.errors import UserError
from simcore.perf.base import BatchShape, LatencyModel, StepTime

if TYPE_CHECKING:
    from simcore.models.spec import ModelSpec
    from simcore.settings import ServerSettings

Algorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "MTP"]
_LLAMA_DEFAULTS = (5, 4, 8)
_DEFAULTS = (3, 1, 4)


@dataclass(frozen=True)
class SpeculativeConfig:
    """SGLang's ``--speculative-*`` flags, resolved (``num_draft_tokens`` = num_steps + 1 when topk is 1)."""

    algorithm: Algorithm
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        if self.num_steps < 1 or self.eagle_topk < 1 or self.num_draft_tokens < 2:
            raise UserError("--speculative-num-steps", "num_steps and topk must be >= 1, draft tokens >= 2")
        if self.eagle_topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            object.__setattr__(self, "num_draft_tokens", self.num_steps + 1)  # speculative_hook.py adjusts it

    @classmethod
    def from_settings(cls, settings: "ServerSettings", architecture: str = "") -> "SpeculativeConfig | None":
        """The resolved config of a server, or None without ``--speculative-algorithm``."""
        alg = settings.speculative_algorithm
        if alg is None:
            return None
        steps, topk, draft = _LLAMA_DEFAULTS if architecture == "LlamaForCausalLM" else _DEFAULTS
        if settings.speculative_num_steps is not None:
            steps = settings.speculative_num_steps
            topk = settings.speculative_eagle_topk or 1
            draft = settings.speculative_num_draft_tokens or steps + 1
        return cls(alg, steps, topk, draft)

    @property
    def max_accept_len(self) -> int:
        """Most tokens one iteration can emit per request: every draft step accepted plus the bonus token."""
        return self.num_steps + 1

    def iteration_time(self, target: LatencyModel, draft: LatencyModel, batch: int, sum_kv: int,
                       accept_len: float) -> StepTime:
        """One speculative iteration of ``batch`` decoding requests holding ``sum_kv`` KV tokens in all."""
        kv = max(1, sum_kv // max(1, batch))
        draft_step = draft.step_time(BatchShape(num_decode=batch * self.eagle_topk,
                                                decode_sum_kv=batch * self.eagle_topk * kv,
                                                cuda_graph_bs=batch * self.eagle_topk))
        verify = target.step_time(BatchShape(extend_lens=(self.num_draft_tokens,) * batch,
                                             prefix_lens=(kv,) * batch))
        accepted = max(1, round(accept_len))
        extend = draft.step_time(BatchShape(extend_lens=(accepted,) * batch, prefix_lens=(kv,) * batch))
        gpu = self.num_steps * draft_step.gpu_s + verify.gpu_s + extend.gpu_s
        return StepTime(gpu, verify.cpu_s)


def draft_model_spec(target: "ModelSpec", algorithm: str) -> "ModelSpec":
    """The draft model's shape: one decoder layer of the target's width with its embedding and LM head (an EAGLE
    head, or DeepSeek's NextN layer, which is one MoE layer for MoE targets)."""
    dense = 0 if target.is_moe else 1
    return target.model_copy(update={"name": f"{target.name}:{algorithm.lower()}-draft", "num_layers": 1,
                                      "num_dense_layers": dense})


@dataclass(frozen=True)
class AcceptanceModel:
    """Distribution of the accepted length L ∈ [1, max_len]: ``P(L ≥ k + 1) = a^k``, a = ``accept_prob``."""

    max_len: int
    accept_prob: float

    def __post_init__(self) -> None:
        if self.max_len < 1 or not 0.0 <= self.accept_prob <= 1.0:
            raise UserError("accept_prob", f"need max_len >= 1 and 0 <= a <= 1, got {self.max_len}, {self.accept_prob}")

    def pmf(self) -> tuple[float, ...]:
        """P(L = 1), …, P(L = max_len)."""
        a, n = self.accept_prob, self.max_len
        tail = [a ** k for k in range(n)] + [0.0]  # P(L >= k + 1) for k = 0 … n
        return tuple(tail[k] - tail[k + 1] for k in range(n))

    def mean(self) -> float:
        """E[L] = Σ_{k=0}^{max_len−1} a^k."""
        return sum(self.accept_prob ** k for k in range(self.max_len))

    def sample(self, rng: random.Random) -> int:
        length = 1
        while length < self.max_len and rng.random() < self.accept_prob:
            length += 1
        return length

    @classmethod
    def from_mean(cls, mean: float, max_len: int) -> "AcceptanceModel":
        """The chain whose mean accepted length is ``mean`` (clamped to [1, max_len]); bisection on a."""
        if max_len < 1:
            raise UserError("max_len", f"must be >= 1, got {max_len}")
        target = min(max(mean, 1.0), float(max_len))
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if sum(mid ** k for k in range(max_len)) < target:
                lo = mid
            else:
                hi = mid
        return cls(max_len, (lo + hi) / 2)


@dataclass
class OnlineAcceptance:
    """The mean accepted length learned from a log's ``accept len`` fields.

    ``observe(accept_len, verify_passes)``: one ``Decode batch`` line; its mean covers ``verify_passes`` request ×
    iteration pairs (running requests × the log interval). Older evidence decays by ``forgetting`` per pass, so
    the estimate follows drift (a new prompt mix) with a memory of about 1 / (1 − forgetting) passes.
    ``prior_mean`` is the estimate before any line."""

    max_len: int
    prior_mean: float = 1.0
    prior_weight: float = 1.0
    forgetting: float = 0.999
    _sum: float = field(default=0.0, init=False)
    _weight: float = field(default=0.0, init=False)
    lines: int = field(default=0, init=False)

    def observe(self, accept_len: float, verify_passes: float = 1.0) -> None:
        if not math.isfinite(accept_len) or accept_len < 0 or verify_passes <= 0:
            return
        decay = self.forgetting ** verify_passes
        self._sum = self._sum * decay + accept_len * verify_passes
        self._weight = self._weight * decay + verify_passes
        self.lines += 1

    @property
    def mean(self) -> float:
        w = self._weight + self.prior_weight
        return min(max((self._sum + self.prior_mean * self.prior_weight) / w, 1.0), float(self.max_len))

    def model(self) -> AcceptanceModel:
        return AcceptanceModel.from_mean(self.mean, self.max_len)

    def snapshot(self) -> dict[str, float]:
        return {"sum": self._sum, "weight": self._weight, "lines": self.lines}

    def restore(self, data: dict[str, float]) -> None:
        self._sum, self._weight, self.lines = float(data["sum"]), float(data["weight"]), int(data["lines"])


def speculative_decode_rate(config: SpeculativeConfig, target: LatencyModel, draft: LatencyModel, batch: int,
                            sum_kv: int, accept_len: float, overlap: bool = False) -> float:
    """Tokens per second per request of a speculative decode run: accepted length over the iteration time
    (GPU plus, without the overlap scheduler, the host pass; SGLang's spec workers ran without overlap before
    0.5.x)."""
    st = config.iteration_time(target, draft, batch, sum_kv, accept_len)
    period = st.gpu_s if overlap else st.gpu_s + st.cpu_s
    return accept_len / period


@dataclass
class SpeculativeLatencyModel:
    """A `LatencyModel` for a speculative server in the one-token-per-step scheduler of `simcore.server`.

    The simulated server emits one token per request per decode step; a speculative server emits L per
    iteration. With E[L] = the acceptance's mean, a decode step of this model costs one speculative iteration
    divided by E[L]: the time per token, hence TPOT, throughput and KV growth per second, is the speculative
    server's; the burstiness of the L tokens (ITL spread) is not. Prefill and mixed steps also run the draft
    model's extend over the new tokens (its KV and hidden states)."""

    config: SpeculativeConfig
    target: LatencyModel
    draft: LatencyModel
    acceptance: AcceptanceModel
    name: str = ""
    profile_hash: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.target.name}+{self.config.algorithm.lower()}"
        self.profile_hash = self.profile_hash or self.target.profile_hash

    def step_time(self, shape: BatchShape) -> StepTime:
        if shape.mode == "idle":
            return self.target.step_time(shape)
        if shape.mode == "decode":
            bs = shape.num_decode
            mean = self.acceptance.mean()
            it = self.config.iteration_time(self.target, self.draft, bs, shape.decode_sum_kv, mean)
            return StepTime(it.gpu_s / mean, it.cpu_s)
        base = self.target.step_time(shape)
        extra = self.draft.step_time(BatchShape(extend_lens=shape.extend_lens, prefix_lens=shape.prefix_lens))
        return StepTime(base.gpu_s + extra.gpu_s, base.cpu_s)
