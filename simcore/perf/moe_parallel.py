"""How a deployment splits the model over GPUs, and what that costs: expert parallelism, DeepEP all-to-all,
multi-node tensor parallelism, and the per-op dtypes of a serving precision.

`ParallelLayout` is the data (SGLang's own flags: ``--tp-size``, ``--ep-size``, ``--moe-a2a-backend``,
``--enable-dp-attention``/``--dp-size``) plus the GPU's NVLink domain. `ParallelCosts` wraps the per-op costs of
`simcore.perf.costs` (table or roofline) and changes only the two ops a layout changes:

- **MoE** (``moe_s``). SGLang's standard dispatcher (``--moe-a2a-backend none``, the default;
  ``layers/moe/token_dispatcher/standard.py:StandardDispatcher.dispatch``) keeps every token on every rank and
  maps the top-k ids to the rank's local experts; each rank computes its ``experts / ep`` experts at
  ``moe_intermediate / moe_tp`` width for all tokens, and one all-reduce over the whole TP group follows
  (``fused_moe_triton/layer.py``: ``reduce_results and (moe_tp_size > 1 or moe_ep_size > 1)``). That is exactly
  what aiconfigurator's MoE tables measured at (``moe_tp_size``, ``moe_ep_size``), looked up here with
  ``moe_tp = tp / ep``. With ``--moe-a2a-backend deepep`` SGLang sets ``ep_size = tp_size``
  (``arg_groups/overrides.py:_a2a_ep_size``); tokens are dispatched to their experts' ranks and combined back by
  DeepEP, priced from the measured DeepEP tables (low-latency kernels for CUDA-graph decode steps, normal
  kernels otherwise), and the MoE all-reduce disappears.
- **All-reduce across nodes** (``allreduce_s``). Inside one NVLink domain the measured custom all-reduce
  applies. A TP group larger than the domain (``tp > gpus_per_node``: TP16 on two 8-GPU nodes) runs NCCL's
  hierarchical all-reduce: reduce-scatter inside each node, a ring all-reduce of each GPU's 1/g share between
  the N nodes over the GPU's own NIC (``2(N−1)/N · bytes/g`` at ``inter_node_bytes_per_s``, ``2(N−1)`` network
  hops of ``INTER_NODE_HOP_S``), all-gather inside the node. The two intra-node halves together cost one
  measured intra-node all-reduce of the same message.

**Autotuned FP4 MoE** (``fp4_moe_autotuned_tokens``). SGLang tunes flashinfer's TRT-LLM MoE once at start-up, over
every token count up to ``max_running_requests`` (``model_executor/model_runner.py`` ``_flashinfer_autotune``: a
dummy decode batch of ``req_to_token_pool.size`` tokens under ``autotune()``); a later call uses a tuned tactic only
if its shapes hit the tuning cache, else the kernel's default ("fallback") tactic. aiconfigurator's MoE tables were
collected without ``autotune()`` (``collector/sglang/collect_moe.py``), so they time the fallback tactic. The FP4
call hits the cache from SGLang 0.5.10 on: 0.5.9 passes the hidden-state scales flattened
(``layers/moe/moe_runner/flashinfer_trtllm.py`` ``hidden_states_scale=….flatten()``, sgl-project/sglang PR #19189
"Fix fallback to default tactic") and flashinfer 0.6.3 maps only the first linked dimension to its bucket, while
0.5.10.post1 reshapes them to ``(tokens, hidden / 16)`` and flashinfer 0.6.7.post3 maps every linked dimension
(``autotuner.py`` ``_find_nearest_profile``). The fp8 block-scale call passes its scales transposed
(``a_sf.t()``: tokens in dimension 1) in both and keeps missing. So only nvfp4 MoE calls of at most
``fp4_moe_autotuned_tokens`` tokens (0 = none: SGLang < 0.5.10, a GPU before SM100) run tuned tactics; they cost
the table's time × the profile's ``fp4_moe_autotuned_scale`` (docs/accuracy.md §3.12, "The autotuned FP4 MoE").

**Block-fp8 MoE above its memory floor** (`fp8_moe_prefill_s`, the profile's ``fp8_moe_prefill_scale``). With the
launch flags and client of the InferenceX runs, every DeepSeek-R1 fp8 prefill on B200 and B300 is priced ~1.2–1.9×
too fast while the nvfp4 rows of the same client, flags and GPUs fit and fp8 decode (TPOT) fits; of the op classes
only the fused MoE is large enough to hold the gap (docs/accuracy.md §3.12, §3.14, §3.16). A fused-MoE call costs
at least its memory floor: the kernel's fixed latency (routing, launches, tile scheduling: the largest excess of
the priced time over the HBM time among decode-size calls, `DECODE_SIZE_TOKENS`) plus the HBM time of the experts
it touches (E·(1 − (1 − k/E)^m) of this rank's experts, 3·hidden·inter weights each at the checkpoint's bytes)
and of its routed activations (4·hidden bytes a route: bf16 in and out), at the GPU catalogue's HBM bandwidth ×
the roofline's streaming efficiency ``mem_eff`` (the fraction of it streaming kernels reach, fitted on the tables:
0.73). Decode-size calls (≤ 256 tokens) sit at or under that floor by construction; above it the time is the
grouped GEMMs' work on the routed tokens, which is what a kernel build's tiles and efficiency change. So for
``fp8_block`` MoE calls on GPUs with fp8 tensor cores from Hopper on (`FP8_MOE_PREFILL_MIN_SM`) the time above the
floor is multiplied by the profile's factor: t' = floor + s·max(0, t − floor), in steps that run eagerly (prefill,
mixed, decode above the captured sizes); a call replayed from a CUDA graph (decode, speculative verify and draft
steps: `moe_graph_s`) keeps the table, because the EAGLE rows' verify calls of 200–1,500 tokens, which run in graphs,
price within ~10% at the table (docs/accuracy.md §3.13) while the eager prefills are the slow ones. A roofline ridge would not do:
counting the weights alone, a TP8 DeepSeek rank's call reaches the B200 ridge only at ~9.4k tokens, and counting the
routed activations never (1.5·inter = 384 FLOP a byte against 584), yet the 8k prefills are the short ones.

Routing distribution: the MoE tables measured ``balanced`` routing and power-law skew (``power_law_1.01``); real
traffic is skewed, so ``power_law`` is the default (as before this module), ``balanced`` the ideal.

`op_dtypes` says which GEMM dtype each op class runs in for a precision: ``nvfp4`` (NVIDIA ModelOpt FP4
checkpoints) runs the MLP and expert GEMMs in NVFP4 (the FlashInfer CuteDSL/TRT-LLM kernels the B200/B300 tables
measured) and keeps attention projections in bf16; ``fp8`` on a block-quantized checkpoint (DeepSeek-V3/R1 ship
``fp8_block``) runs the checkpoint's block-fp8 kernels.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from simcore.errors import UserError
from simcore.perf.costs import _DT_BYTES
from simcore.perf.interp import Curve
from simcore.values import FrozenValue

if TYPE_CHECKING:
    import numpy as np

    from simcore.gpus import GpuSpec
    from simcore.models.spec import ModelSpec
    from simcore.settings import ServerSettings

# One network hop of NCCL's inter-node ring (NIC + switch + protocol), aiconfigurator's ``p2p_latency`` (10 µs).
INTER_NODE_HOP_S = 1.0e-5
Routing = Literal["power_law", "balanced"]
A2A_BACKENDS = ("none", "deepep")


class ParallelLayout(FrozenValue):
    """One server's split over GPUs (SGLang's flag names). ``gpus_per_node``: the GPU's NVLink domain."""

    __slots__ = ("tp_size", "ep_size", "dp_size", "enable_dp_attention", "moe_a2a_backend", "gpus_per_node",
                 "routing", "fp4_moe_autotuned_tokens")
    _defaults = {"tp_size": 1, "ep_size": 1, "dp_size": 1, "enable_dp_attention": False, "moe_a2a_backend": "none",
                 "gpus_per_node": 8, "routing": "power_law", "fp4_moe_autotuned_tokens": 0}
    tp_size: int
    ep_size: int
    dp_size: int
    enable_dp_attention: bool
    moe_a2a_backend: str
    gpus_per_node: int
    routing: Routing
    fp4_moe_autotuned_tokens: int  # nvfp4 MoE calls of at most this many tokens run tuned tactics (module docstring)

    def __post_init__(self) -> None:
        if self.moe_a2a_backend not in A2A_BACKENDS:
            raise UserError("--moe-a2a-backend", f"unknown backend {self.moe_a2a_backend!r}",
                            f"use one of {', '.join(A2A_BACKENDS)}")
        if self.moe_a2a_backend == "deepep" and self.ep_size != self.tp_size:
            # SGLang adjusts ep_size to tp_size for the all-to-all backends (overrides.py:_a2a_ep_size)
            object.__setattr__(self, "ep_size", self.tp_size)
        if self.tp_size < 1 or self.ep_size < 1 or self.tp_size % self.ep_size:
            raise UserError("--ep-size", f"--ep-size {self.ep_size} does not divide --tp-size {self.tp_size}",
                            "use an --ep-size that divides --tp-size")
        if self.enable_dp_attention and self.tp_size % self.dp_size:
            raise UserError("--dp-size", f"--dp-size {self.dp_size} does not divide --tp-size {self.tp_size}",
                            "use a --dp-size that divides --tp-size")
        if self.routing not in ("power_law", "balanced"):
            raise UserError("routing", f"unknown routing distribution {self.routing!r}", "use power_law or balanced")

    @classmethod
    def from_settings(cls, settings: "ServerSettings", gpu: "GpuSpec", routing: Routing = "power_law"
                      ) -> "ParallelLayout":
        return cls(tp_size=settings.tp_size, ep_size=settings.ep_size, dp_size=settings.dp_size,
                   enable_dp_attention=settings.enable_dp_attention, moe_a2a_backend=settings.moe_a2a_backend,
                   gpus_per_node=gpu.gpus_per_node, routing=routing,
                   fp4_moe_autotuned_tokens=fp4_moe_autotuned_tokens(settings, gpu))

    @property
    def moe_tp_size(self) -> int:
        """Tensor-parallel width of each expert (SGLang's ``moe_tp_size = tp_size / ep_size``)."""
        return self.tp_size // self.ep_size

    @property
    def attn_tp_size(self) -> int:
        """Attention TP group: the whole TP group, or tp / dp with DP attention (``dp_attention.py``)."""
        return self.tp_size // self.dp_size if self.enable_dp_attention else self.tp_size

    @property
    def num_nodes(self) -> int:
        """NVLink domains the TP group spans."""
        return math.ceil(self.tp_size / self.gpus_per_node)

    @property
    def is_trivial(self) -> bool:
        """Plain single-domain TP: nothing here changes the costs."""
        return self.ep_size == 1 and self.moe_a2a_backend == "none" and self.num_nodes == 1 \
            and not self.enable_dp_attention


# The block-fp8 MoE whose prefill-size calls the profile's ``fp8_moe_prefill_scale`` slows: Hopper (SM90) and later,
# the GPUs whose fp8 tensor cores run it (module docstring; docs/accuracy.md §3.16 for the evidence per GPU).
FP8_MOE_PREFILL_MIN_SM = 90
# Decode-size MoE calls (powers of two up to SGLang's default largest CUDA-graph batch, 256): their largest time above
# their HBM time is the kernel's fixed latency (routing, launches, tile scheduling), part of the memory floor.
DECODE_SIZE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# HBM bytes a route moves besides the weights: its hidden state in and its expert output out, bf16 (2 + 2 per element).
ROUTED_ACTIVATION_BYTES_PER_HIDDEN = 4.0


def moe_memory_s(tokens: float, hidden: int, inter: int, routes: float, experts: int, weight_bytes: float,
                 hbm_bytes_per_s: float) -> float:
    """HBM time of one fused-MoE call on one rank at ``hbm_bytes_per_s``: the ``experts`` local experts' weights
    (three ``hidden × inter`` matrices of ``weight_bytes`` an element) of those that ``tokens`` tokens touch when
    each sends ``routes`` routes here uniformly (E·(1 − (1 − routes/E)^tokens)), plus the routed activations."""
    active = experts * (1.0 - (1.0 - routes / experts) ** tokens) if experts else 0.0
    byts = active * 3.0 * hidden * inter * weight_bytes + tokens * routes * hidden * ROUTED_ACTIVATION_BYTES_PER_HIDDEN
    return byts / hbm_bytes_per_s


def fp8_moe_prefill_s(call_s: float, floor_s: float, scale: float) -> float:
    """A block-fp8 MoE call of ``call_s`` seconds (the table's) whose memory floor is ``floor_s``: the floor as it
    is and the time above it × ``scale`` (module docstring). A call at or below its floor is unchanged."""
    return floor_s + scale * (call_s - floor_s) if call_s > floor_s else call_s


# The first SGLang version whose FP4 TRT-LLM MoE call hits flashinfer's tuning cache (module docstring).
FP4_MOE_AUTOTUNE_HIT_VERSION = (0, 5, 10)


def fp4_moe_autotuned_tokens(settings: "ServerSettings", gpu: "GpuSpec") -> int:
    """How many tokens an nvfp4 MoE call may have and still run a tuned tactic: SGLang's start-up autotune covers
    every count up to ``max_running_requests`` (the request pool; the CUDA-graph sizes when it is not given) on
    Blackwell (SM100+, where the DeepSeek FP4 MoE runs flashinfer's TRT-LLM kernel) from SGLang 0.5.10 on; else 0.
    With an all-to-all backend (``--moe-a2a-backend deepep``) SGLang does not pick the TRT-LLM MoE runner (0.5.9
    ``server_args.py`` 1302-1307: only when ``moe_a2a_backend == "none"``) and so runs no autotune
    (``model_runner.py`` ``_should_run_flashinfer_autotune``, 1829-1857: only for the ``flashinfer_trtllm`` /
    ``flashinfer_mxfp4`` runners): 0."""
    from simcore.settings import _version_tuple

    if gpu.sm_version < 100 or _version_tuple(settings.sglang_version) < FP4_MOE_AUTOTUNE_HIT_VERSION:
        return 0
    if settings.moe_a2a_backend != "none":
        return 0
    return int(settings.max_running_requests or settings.cuda_graph_max_bs or 0)


class OpDtypes(FrozenValue):
    """GEMM dtype (a table key of `simcore.perf.tables.DTYPE_CODES`) per op class."""

    __slots__ = ("attention", "mlp", "moe")
    attention: str
    mlp: str
    moe: str


def op_dtypes(precision: str, model: "ModelSpec | None" = None) -> OpDtypes:
    """Which kernels each op class runs for a (normalized) serving precision; see the module docstring."""
    if precision == "nvfp4":
        return OpDtypes("bf16", "nvfp4", "nvfp4")
    if precision == "mxfp4":  # gpt-oss: MXFP4 experts (bf16 compute on Hopper's triton kernels), bf16 elsewhere
        return OpDtypes("bf16", "bf16", "mxfp4")
    if precision == "fp8" and model is not None and model.quantization == "fp8_block":
        return OpDtypes("fp8_block", "fp8_block", "fp8_block")
    gdt = precision if precision in ("fp8", "fp8_block") else ("int4" if precision == "int4" else "bf16")
    return OpDtypes(gdt, gdt, gdt)


class DeepEpTable:
    """DeepEP dispatch + combine latency (ms per layer call) by tokens per rank, for one expert configuration.

    Columns of ``tables/<gpu>/deepep.npz``: ``normal`` (0 = low-latency kernels, 1 = normal kernels), ``hidden``,
    ``tokens``, ``topk``, ``experts``, ``dispatch_ms``, ``combine_ms`` (aiconfigurator's one-node DeepEP tables)."""

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        self.cols = cols
        self._curves: dict[tuple[int, int, int, int], Curve | None] = {}

    def curve(self, *, normal: bool, hidden: int, topk: int, experts: int) -> Curve | None:
        key = (int(normal), hidden, topk, experts)
        if key in self._curves:
            return self._curves[key]
        c = self.cols
        m = (c["normal"] == int(normal)) & (c["hidden"] == hidden) & (c["topk"] == topk) & (c["experts"] == experts)
        out = Curve(c["tokens"][m], c["dispatch_ms"][m] + c["combine_ms"][m]) if m.any() else None
        self._curves[key] = out
        return out


def load_deepep(gpu_name: str) -> DeepEpTable | None:
    """The GPU's vendored DeepEP table, or None."""
    from simcore.perf.tables import _load_npz

    cols = _load_npz(gpu_name, "deepep")
    return DeepEpTable(cols) if cols is not None else None


class ParallelCosts:
    """Per-op costs of a layout: `moe_s` and `allreduce_s` changed as the module docstring says; every other op
    is the wrapped costs' own (``__getattr__``)."""

    def __init__(self, base: Any, layout: ParallelLayout, gpu: "GpuSpec", model: "ModelSpec",
                 fp4_moe_autotuned_scale: float = 1.0, fp8_moe_prefill_scale: float = 1.0) -> None:
        self.base = base
        self.layout = layout
        self.fp4_moe_autotuned_scale = fp4_moe_autotuned_scale
        # the block-fp8 MoE's time above its memory floor × this, from SM90 on (module docstring)
        self.fp8_moe_prefill_scale = fp8_moe_prefill_scale if gpu.sm_version >= FP8_MOE_PREFILL_MIN_SM else 1.0
        self._moe_latency: dict[tuple, float] = {}
        self.gpu = gpu
        self.model = model
        self.roof = getattr(base, "roof", base)
        self.tables = getattr(base, "tables", None)
        self.deepep = load_deepep(gpu.name) if layout.moe_a2a_backend == "deepep" else None

    def __getattr__(self, name: str) -> Any:
        # copy/pickle look up dunders on an instance whose __init__ has not run: no ``base`` yet, do not recurse
        if name == "base" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(self.base, name)

    # ---- MoE ----------------------------------------------------------------------------------------------------
    def moe_s(self, tokens: float, hidden: int, inter: int, top_k: int, experts: int, dtype: str,
              tp: int = 1) -> float:
        """One MoE layer on one rank in an eager step. ``inter`` is the caller's per-rank width at TP ``tp``
        (``rank_shapes``); the layout's own split (moe_tp × ep) replaces it."""
        return self._moe_s(tokens, hidden, inter, top_k, experts, dtype, tp, self.fp8_moe_prefill_scale)

    def moe_graph_s(self, tokens: float, hidden: int, inter: int, top_k: int, experts: int, dtype: str,
                    tp: int = 1) -> float:
        """`moe_s` for a call replayed from a CUDA graph (decode, speculative verify / draft steps): the table's
        time, without the fp8 prefill factor (module docstring; docs/accuracy.md §3.16)."""
        return self._moe_s(tokens, hidden, inter, top_k, experts, dtype, tp, 1.0)

    def _moe_s(self, tokens: float, hidden: int, inter: int, top_k: int, experts: int, dtype: str, tp: int,
               fp8_scale: float) -> float:
        lay = self.layout
        full_inter = inter * tp
        if lay.moe_a2a_backend == "deepep":
            # with DP attention each rank holds tokens/dp of the batch the step model priced; the experts see the
            # whole batch's routed tokens, the all-to-all moves each rank's share
            local = tokens / lay.dp_size if lay.enable_dp_attention else tokens
            return self._expert_compute_s(tokens, hidden, full_inter, top_k, experts, dtype, fp8_scale) \
                + self.a2a_s(local, hidden, top_k, experts, graph=tokens <= 256)
        return self._expert_compute_s(tokens, hidden, full_inter, top_k, experts, dtype, fp8_scale)

    def _expert_compute_s(self, tokens: float, hidden: int, full_inter: int, top_k: int, experts: int,
                          dtype: str, fp8_scale: float = 1.0) -> float:
        t = self._expert_table_s(tokens, hidden, full_inter, top_k, experts, dtype)
        if dtype == "fp8_block" and fp8_scale != 1.0:
            t = fp8_moe_prefill_s(t, self.moe_floor_s(tokens, hidden, full_inter, top_k, experts, dtype), fp8_scale)
        return t

    def moe_floor_s(self, tokens: float, hidden: int, full_inter: int, top_k: int, experts: int,
                    dtype: str) -> float:
        """The memory floor of one MoE call on this rank (module docstring): the kernel's fixed latency (the largest
        priced time minus HBM time of a decode-size call, `DECODE_SIZE_TOKENS`) + the HBM time of ``tokens``
        tokens' call (`moe_memory_s`)."""
        lay = self.layout
        inter, routes, local = max(1, full_inter // lay.moe_tp_size), top_k / lay.ep_size, max(1, experts // lay.ep_size)
        wbytes, bw = _DT_BYTES.get(dtype, 2.0), self.gpu.hbm_bytes_per_s * self.roof.p("mem_eff")
        key = (hidden, full_inter, top_k, experts, dtype)
        latency = self._moe_latency.get(key)
        if latency is None:
            latency = self._moe_latency[key] = max(0.0, max([
                self._expert_table_s(m, hidden, full_inter, top_k, experts, dtype)
                - moe_memory_s(m, hidden, inter, routes, local, wbytes, bw) for m in DECODE_SIZE_TOKENS]))
        return latency + moe_memory_s(tokens, hidden, inter, routes, local, wbytes, bw)

    def _expert_table_s(self, tokens: float, hidden: int, full_inter: int, top_k: int, experts: int,
                        dtype: str) -> float:
        lay = self.layout
        mt = getattr(self.tables, "moe", None) if self.tables is not None else None
        if mt is not None:
            c = mt.curve(dtype=dtype, hidden=hidden, inter=full_inter, topk=top_k, experts=experts,
                         tp=lay.moe_tp_size, ep=lay.ep_size, power_law=lay.routing == "power_law")
            if c is not None:
                t = c(tokens) * 1e-3  # the fallback tactic the collector timed
                if dtype == "nvfp4" and tokens <= lay.fp4_moe_autotuned_tokens:
                    t *= self.fp4_moe_autotuned_scale  # a tuned tactic (module docstring)
                return t
        # roofline: this rank's experts/ep experts at full_inter/moe_tp width, receiving top_k/ep of the routes
        return self.roof.moe_s(tokens, hidden, max(1, full_inter // lay.moe_tp_size), top_k / lay.ep_size,
                               max(1, experts // lay.ep_size), dtype)

    def a2a_s(self, tokens_per_rank: float, hidden: int, top_k: int, experts: int, graph: bool) -> float:
        """DeepEP dispatch + combine for one layer: measured when the table has the shape, else roofline (each
        token's hidden state to its top-k experts' ranks and back, bf16, over NVLink or the NIC)."""
        if self.deepep is not None:
            c = self.deepep.curve(normal=not graph, hidden=hidden, topk=top_k, experts=experts)
            if c is not None:
                return c(max(1.0, tokens_per_rank)) * 1e-3
        lay = self.layout
        remote = (lay.ep_size - 1) / lay.ep_size
        byts = 2.0 * tokens_per_rank * top_k * hidden * 2.0 * remote  # dispatch + combine
        bw = self.gpu.nvlink_bytes_per_s if lay.num_nodes == 1 else self.gpu.inter_node_bytes_per_s
        return byts / (bw * self.roof.p("comm_eff")) + 2 * self.roof.p("comm_floor_s")

    # ---- all-reduce ---------------------------------------------------------------------------------------------
    def allreduce_s(self, message_bytes: float, num_gpus: int, graph: bool) -> float:
        """An all-reduce of the step model's (after the attention / the MLP): with DeepEP or DP attention only the
        attention TP group reduces, so it is narrowed to that group; then `tp_allreduce_s`."""
        lay = self.layout
        if lay.moe_a2a_backend == "deepep" or lay.enable_dp_attention:
            num_gpus = min(num_gpus, lay.attn_tp_size)  # only the attention TP group reduces
        return self.tp_allreduce_s(message_bytes, num_gpus, graph)

    def tp_allreduce_s(self, message_bytes: float, num_gpus: int, graph: bool) -> float:
        """An all-reduce over ``num_gpus`` GPUs as they are (not narrowed to the attention group: the DP-attention
        gather/scatter over the whole TP group, simcore/dp_attention.py): the measured intra-node all-reduce inside
        one NVLink domain, `multinode_allreduce_s` across nodes."""
        if num_gpus <= self.gpu.gpus_per_node:
            return self.base.allreduce_s(message_bytes, num_gpus, graph)
        return self.multinode_allreduce_s(message_bytes, num_gpus, graph)

    def multinode_allreduce_s(self, message_bytes: float, num_gpus: int, graph: bool) -> float:
        """NCCL's hierarchical all-reduce over ``num_gpus / gpus_per_node`` nodes (module docstring)."""
        g = self.gpu.gpus_per_node
        nodes = math.ceil(num_gpus / g)
        intra = self.base.allreduce_s(message_bytes, g, graph)
        wire = 2.0 * (nodes - 1) / nodes * message_bytes / g
        inter = wire / (self.gpu.inter_node_bytes_per_s * self.roof.p("comm_eff")) + 2 * (nodes - 1) * INTER_NODE_HOP_S
        return intra + inter
