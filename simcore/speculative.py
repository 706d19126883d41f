"""Speculative decoding (EAGLE, EAGLE3, MTP/NextN) as SGLang runs it: draft steps, one verify pass, accepted length.

One speculative decode iteration of a running batch of ``bs`` requests (SGLang ``speculative/eagle_worker*.py``):

1. **draft**: ``speculative_num_steps`` forward passes of the draft model (an EAGLE head, or DeepSeek's NextN/MTP
   layer: one decoder layer plus the LM head, after the input projection that fuses the token embedding with
   the target's hidden state, `DraftInputProjection`), each over ``bs × speculative_eagle_topk`` tokens;
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
from typing import TYPE_CHECKING, Callable, Literal

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

    def decode_reservation(self, num_reqs: int, page_size: int = 1) -> int:
        """KV slots a decode iteration needs free (0.5.9 schedule_batch.py ``new_tokens_required_next_decode``,
        spec branch): ``max(num_steps × topk, num_draft_tokens) × requests``, page-aligned with pages > 1 (plus the
        last partial page when topk > 1). The draft tokens are allocated for the verify pass and the rejected
        ones freed after it (eagle_info.py ``EagleVerifyInput.verify``)."""
        per_topk, tokens = self.num_steps, self.num_draft_tokens
        if page_size > 1:
            extra = page_size if self.eagle_topk > 1 else 0
            per_topk = -(-(per_topk + extra) // page_size) * page_size
            tokens = -(-tokens // page_size) * page_size
        return max(per_topk * self.eagle_topk, tokens) * num_reqs

    def iteration_time(self, target: LatencyModel, draft: LatencyModel, batch: int, sum_kv: int,
                       accept_len: float = 0.0, cuda_graph_bs: int | None = None) -> StepTime:
        """One speculative iteration of ``batch`` decoding requests holding ``sum_kv`` KV tokens in all, as the
        0.5.9 EAGLE worker runs it (speculative/eagle_worker.py ``forward_batch_generation``, decode branch):

        - ``draft``: ``draft_forward`` runs the draft model num_steps − 1 times (the loop breaks before the last
          step's forward), each a decode of ``batch × topk`` rows;
        - ``verify``: one target forward (``ForwardMode.TARGET_VERIFY``) over ``num_draft_tokens`` tokens per
          request, captured in CUDA graphs with ``num_tokens_per_bs`` = num_draft_tokens
          (eagle_worker.py ``init_cuda_graphs`` → cuda_graph_runner.py);
        - ``forward_draft_extend_after_decode``: one draft forward (``DRAFT_EXTEND``) over ``num_steps + 1``
          tokens per request (padded to that in its CUDA graph), which also proposes the next first draft token.

        Verify and draft extend are decode-like passes, not prefills: MLA models run them on the absorbed MLA
        kernel over each request's KV with q_len tokens, not on the MHA prefix path of a plain extend
        (models/deepseek_common/attention_backend_handler.py ``handle_attention_trtllm_mla``: MHA_CHUNKED_KV
        only when ``forward_mode.is_extend_without_speculative()``; trtllm_mla_backend.py handles
        ``is_target_verify()`` / ``is_draft_extend()`` with the decode kernel and its q_len). Each
        is priced as a decode of ``batch × tokens`` rows whose KV is read once per request (Σkv = ``sum_kv``):
        the GEMMs see every token, the attention traffic is the requests' KV. ``accept_len`` is not used (the
        padded draft extend does not depend on it); kept for callers that pass it. The host pass is the
        target's (``cpu_s`` of the verify forward)."""
        kv = max(1, sum_kv // max(1, batch))
        rows = batch * self.eagle_topk

        def graph(tokens_per_req: int) -> int | None:
            return None if cuda_graph_bs is None else cuda_graph_bs * tokens_per_req

        draft_step = draft.step_time(BatchShape(num_decode=rows, decode_sum_kv=rows * kv,
                                                cuda_graph_bs=graph(self.eagle_topk)))
        verify = target.step_time(BatchShape(num_decode=batch * self.num_draft_tokens, decode_sum_kv=sum_kv,
                                             cuda_graph_bs=graph(self.num_draft_tokens)))
        extend = draft.step_time(BatchShape(num_decode=batch * (self.num_steps + 1), decode_sum_kv=sum_kv,
                                            cuda_graph_bs=graph(self.num_steps + 1)))
        # the MLA decode kernel sees each request's q_len query tokens as q_len × heads over its KV
        reqs = batch if cuda_graph_bs is None else cuda_graph_bs
        gpu = ((self.num_steps - 1) * draft_step.gpu_s
               + verify.gpu_s + multi_token_mla_attention_s(target, reqs, sum_kv, self.num_draft_tokens)
               + extend.gpu_s + multi_token_mla_attention_s(draft, reqs, sum_kv, self.num_steps + 1))
        return StepTime(gpu, verify.cpu_s)


def multi_token_mla_attention_s(model: LatencyModel, requests: int, sum_kv: int, q_len: int) -> float:
    """Seconds an MLA model's decode attention adds, over all its layers, when each of ``requests`` requests (the
    CUDA graph's padded count in a graph) brings ``q_len`` query tokens over its own KV (``sum_kv`` tokens in all)
    instead of the ``requests × q_len`` one-token rows of ``kv / q_len`` tokens each that the decode pricing of a
    ``requests × q_len``-row step assumes (0 for a non-MLA model, q_len 1, or a model not priced per op).

    SGLang 0.5.9 runs TARGET_VERIFY and DRAFT_EXTEND on the MLA decode kernel with the draft tokens folded into
    the query heads: ``trtllm_mla_backend.py`` ``forward_extend`` (``is_target_verify()``: ``q.view(bs, -1,
    tp_q_head_num, head_dim)`` into ``trtllm_batch_decode_with_kv_cache_mla`` with one block table and
    ``seq_lens_k`` per request, ``max_seq_len = max_seq_len_k + draft_token_num``), ``flashmla_backend.py``
    (``get_mla_metadata(seq_lens, num_draft_tokens * num_q_heads, 1)``). So a verify pass reads each request's
    latent KV once and computes q_len × heads query rows against all of it: the MLA decode table at ``requests``
    rows of ``sum_kv / requests`` tokens and ``q_len × q_heads`` heads (interpolated over heads, log-log, as
    `simcore.perf.tables` does), with the weight-absorbed bmm kept at the priced ``requests × q_len`` tokens of
    ``q_heads`` heads (its weights are per head, read once). The roofline path is exact as it stands at the folded
    shape (the same KV bytes, q_len × the score FLOPs). Calibrated like every decode attention (profile
    ``generation_attention``)."""
    if q_len <= 1 or requests <= 0:
        return 0.0
    shapes = getattr(model, "shapes", None)
    costs = getattr(model, "costs", None)
    k_gen = getattr(model, "_k_gen", None)
    if shapes is None or costs is None or k_gen is None or not shapes.is_mla:
        return 0.0
    from simcore.perf.costs import TableCosts

    h, kvd, vd, kvb = shapes.q_heads, shapes.mla_kv_dim, shapes.mla_v_dim, model.kv_bytes
    rows = requests * q_len
    priced = costs.mla_generation_s(rows, max(1.0, sum_kv / rows), h, kvd, vd, kvb)
    folded = costs.mla_generation_s(requests, max(1.0, sum_kv / requests), h * q_len, kvd, vd, kvb)
    base = getattr(costs, "base", costs)  # a ParallelCosts wraps the table or roofline costs
    if isinstance(base, TableCosts) and base._attn_curve(base._mgen, base.tables.generation_mla, requests,
                                                         h * q_len, 1, "fp8" if kvb == 1 else "bf16", 128) is not None:
        # the table path adds the absorb bmm at the heads it is asked for: keep the priced rows' one
        folded += base.roof.mla_absorb_s(rows, h, kvd) - base.roof.mla_absorb_s(requests, h * q_len, kvd)
    return k_gen * shapes.num_layers * (folded - priced)


class DraftInputProjection:
    """The draft model's forwards with its input projection: ``inner`` prices the draft decoder layer and the LM
    head (`draft_model_spec`), this adds the GEMM that fuses the token embedding with the target's hidden state
    before the layer, over every token of every draft forward (extend after the target's prefill, each draft
    decode step, the draft extend after verify). SGLang 0.5.9: DeepSeek's NextN layer
    ``models/deepseek_nextn.py`` ``DeepseekModelNextN.__init__``: ``self.eh_proj = nn.Linear(2 * hidden_size,
    hidden_size, bias=False)``, applied in ``forward`` to ``cat(enorm(embeds), hnorm(spec_info.hidden_states))``
    whenever the batch has tokens; the EAGLE heads' ``fc`` (``models/llama_eagle.py``, ``models/qwen2_eagle.py``:
    ``torch.nn.Linear(hidden_size * 2, hidden_size)``). A plain ``nn.Linear``: bf16 (not quantized with the
    checkpoint) and replicated on every TP rank (not a parallel linear), so each rank computes the whole
    ``tokens × 2h → h`` GEMM (the GEMM table at n = h, k = 2h, bf16, scaled by the profile's gemm factor). A
    CUDA-graph step computes its padded rows. EAGLE3's ``fc`` (3h → h on the target's hidden states only,
    ``models/llama_eagle3.py``) is not priced here.

    Every other attribute is the inner model's (the DP-attention and live-shadow paths read them)."""

    def __init__(self, inner: LatencyModel, hidden: int, in_features: int, gemm_scale: float,
                 curve: Callable[[float], float]) -> None:
        self.inner = inner
        self.hidden = hidden
        self.in_features = in_features
        self.gemm_scale = gemm_scale
        self._curve = curve  # milliseconds at m tokens

    def projection_s(self, tokens: int) -> float:
        """Seconds of the input projection over ``tokens`` rows (0 for none)."""
        return self.gemm_scale * self._curve(tokens) * 1e-3 if tokens > 0 else 0.0

    def step_time(self, shape: BatchShape) -> StepTime:
        st = self.inner.step_time(shape)
        if shape.mode == "idle":
            return st
        graph = shape.cuda_graph_bs is not None and not shape.extend_lens
        rows = shape.cuda_graph_bs if graph else shape.num_decode
        return StepTime(st.gpu_s + self.projection_s(shape.num_extend_tokens + rows), st.cpu_s)

    def __getattr__(self, name: str):  # only reached for attributes this wrapper does not define
        # not for `inner` itself or dunders: copy/pickle look up __setstate__ on an instance whose __init__ has not
        # run, where reading self.inner would call this again without end
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def with_input_projection(draft: LatencyModel, target: "ModelSpec", algorithm: str) -> LatencyModel:
    """``draft`` with its `DraftInputProjection` where it is priced from GEMM tables or the roofline (a
    `simcore.perf.step.StepLatencyModel`: ``costs.gemm_curve``) and the draft is an EAGLE head or a NextN layer
    (2h → h on every forward); unchanged otherwise (EAGLE3, the live shadow's linear twins)."""
    costs = getattr(draft, "costs", None)
    profile = getattr(draft, "profile", None)
    if algorithm.upper() == "EAGLE3" or costs is None or not hasattr(costs, "gemm_curve") or profile is None:
        return draft
    h = target.hidden_size
    return DraftInputProjection(draft, h, 2 * h, profile.scale("gemm"), costs.gemm_curve(h, 2 * h, "bf16"))


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


DEFAULT_DRAFT_ACCEPT_PROB = 0.7  # per draft token, when --speculative-accept-length is not given (docs §3.11)


class SpeculativeDecoding:
    """A speculative server's decode iterations inside the simulated scheduler loop (`simcore.server.Server`).

    The server hands it each decode batch: `accept` draws every request's accepted length L ∈ [1, num_steps + 1]
    from the seeded acceptance distribution (the server caps it at the request's remaining tokens, as SGLang's
    verify stops at a finished request), and `step_time` prices the batch: a decode batch is one iteration
    (`SpeculativeConfig.iteration_time`), a prefill batch is the target's extend plus the draft model's extend
    over the same tokens (eagle_worker.py ``forward_target_extend`` then ``forward_draft_extend``).

    It is the server's latency model (``latency.step_time(shape)``); ``target`` is the target model's.
    ``accepted_tokens`` / ``verify_passes`` add up what the run accepted (SGLang's ``spec_num_accept_tokens`` /
    ``spec_num_forward_ct``: their ratio is the log's ``accept len``)."""

    pure_step_time = False  # decode prices depend on the draws: no decode runs (simcore.decode_run)

    def __init__(self, config: SpeculativeConfig, target: LatencyModel, draft: LatencyModel,
                 acceptance: AcceptanceModel, seed: int = 0) -> None:
        import numpy as np

        if acceptance.max_len != config.max_accept_len:
            raise UserError("--speculative-num-steps", f"acceptance up to {acceptance.max_len} tokens for "
                            f"{config.num_steps} draft steps", "build the acceptance with max_len = num_steps + 1")
        self.config = config
        self.target = target
        self.draft = draft
        self.acceptance = acceptance
        self.rng = np.random.default_rng(seed)
        self.name = f"{getattr(target, 'name', type(target).__name__)}+{config.algorithm.lower()}"
        self.profile_hash = getattr(target, "profile_hash", "")
        self.frontend_s = float(getattr(target, "frontend_s", 0.0))
        self.accepted_tokens = 0
        self.verify_passes = 0

    def accept(self, caps: list[int]) -> list[int]:
        """Accepted length of each request of a decode batch, ``caps[i]`` = its remaining output tokens."""
        import numpy as np

        a, n = self.acceptance.accept_prob, self.acceptance.max_len
        if n > 1:
            # row i accepts draft k while draws[i, 0..k] are all below a: L = 1 + the run of leading accepts
            draws = self.rng.random((len(caps), n - 1))
            lengths = 1 + np.cumprod(draws < a, axis=1).sum(axis=1)
            out = np.minimum(lengths, np.asarray(caps)).tolist()
        else:
            out = [1] * len(caps)
        self.accepted_tokens += sum(out)
        self.verify_passes += len(out)
        return out

    def set_acceptance(self, acceptance: AcceptanceModel) -> None:
        """Use another distribution from the next iteration on (the live shadow's learned one)."""
        if acceptance.max_len != self.config.max_accept_len:
            raise UserError("accept_len", f"acceptance up to {acceptance.max_len} tokens, the server verifies "
                            f"{self.config.max_accept_len}")
        self.acceptance = acceptance

    def step_time(self, shape: BatchShape) -> StepTime:
        mode = shape.mode
        if mode == "decode":
            return self.config.iteration_time(self.target, self.draft, shape.num_decode, shape.decode_sum_kv,
                                              cuda_graph_bs=shape.cuda_graph_bs)
        base = self.target.step_time(shape)
        if mode == "idle":
            return base
        extra = self.draft.step_time(BatchShape(extend_lens=shape.extend_lens, prefix_lens=shape.prefix_lens))
        return StepTime(base.gpu_s + extra.gpu_s, base.cpu_s)

    @property
    def mean_accept_length(self) -> float | None:
        """Accepted tokens per verify pass so far (the run's ``accept len``), None before any pass."""
        return self.accepted_tokens / self.verify_passes if self.verify_passes else None

    def to_state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "accept_prob": self.acceptance.accept_prob,
                "accepted_tokens": self.accepted_tokens, "verify_passes": self.verify_passes}

    def load_state(self, d: dict) -> None:
        self.rng.bit_generator.state = d["rng"]
        self.acceptance = AcceptanceModel(self.config.max_accept_len, float(d["accept_prob"]))
        self.accepted_tokens, self.verify_passes = int(d["accepted_tokens"]), int(d["verify_passes"])


def acceptance_for(config: SpeculativeConfig, accept_length: float | None) -> AcceptanceModel:
    """The acceptance distribution of a server: the chain with mean ``accept_length`` (the
    ``--speculative-accept-length`` assumption), or DEFAULT_DRAFT_ACCEPT_PROB per draft token."""
    if accept_length is None:
        return AcceptanceModel(config.max_accept_len, DEFAULT_DRAFT_ACCEPT_PROB)
    if accept_length > config.max_accept_len:
        raise UserError("--speculative-accept-length", f"{accept_length} is above the {config.max_accept_len} "
                        f"tokens {config.num_steps} draft steps can accept", "give a mean accepted length "
                        "between 1 and num-steps + 1")
    return AcceptanceModel.from_mean(accept_length, config.max_accept_len)


def build_speculative(settings: "ServerSettings", model: "ModelSpec", target: LatencyModel,
                      build_draft: "Callable[[ModelSpec], LatencyModel]", seed: int = 0) -> SpeculativeDecoding | None:
    """The `SpeculativeDecoding` of a server with ``--speculative-algorithm`` (None without): the config from
    the flags, the draft model (`draft_model_spec`) priced by ``build_draft`` (the target's latency builder, so
    the draft runs on the same GPUs, TP and precision) with its input projection (`with_input_projection`), the
    acceptance from ``--speculative-accept-length``."""
    config = SpeculativeConfig.from_settings(settings, model.architecture)
    if config is None:
        return None
    draft = with_input_projection(build_draft(draft_model_spec(model, config.algorithm)), model, config.algorithm)
    return SpeculativeDecoding(config, target, draft, acceptance_for(config, settings.speculative_accept_length),
                               seed)
