"""Expert parallelism, multi-node TP, FP4 dtypes and the Blackwell catalogue (simcore/perf/moe_parallel.py).

Sources: SGLang 0.5.23 ``layers/moe/token_dispatcher/standard.py:StandardDispatcher`` (EP without an all-to-all
backend: every rank keeps all tokens and computes its local experts), ``fused_moe_triton/layer.py`` (one
all-reduce when moe_tp or moe_ep > 1), ``arg_groups/overrides.py:_a2a_ep_size`` (DeepEP sets ep = tp); the
B200/B300 numbers are aiconfigurator's per-op tables as vendored in simcore/perf/data/tables.
"""
from __future__ import annotations

import numpy as np
import pytest

from simcore.errors import UserError
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.models.spec import ModelSpec
from simcore.perf import BatchShape, ParallelLayout, build_latency_model, default_profile
from simcore.perf.costs import RooflineCosts, TableCosts
from simcore.perf.moe_parallel import INTER_NODE_HOP_S, ParallelCosts, op_dtypes
from simcore.perf.tables import DTYPE_CODES, _load_npz, load_tables
from simcore.settings import ServerSettings


def test_layout_follows_sglang_rules() -> None:
    lay = ParallelLayout(tp_size=8, ep_size=4)
    assert (lay.moe_tp_size, lay.attn_tp_size, lay.num_nodes, lay.is_trivial) == (2, 8, 1, False)
    assert ParallelLayout(tp_size=16, gpus_per_node=8).num_nodes == 2
    assert ParallelLayout(tp_size=16, gpus_per_node=72).is_trivial  # one NVL72 domain
    assert ParallelLayout(tp_size=8, ep_size=2, moe_a2a_backend="deepep").ep_size == 8  # _a2a_ep_size
    dp = ParallelLayout(tp_size=8, dp_size=8, enable_dp_attention=True)
    assert dp.attn_tp_size == 1
    with pytest.raises(UserError, match="does not divide"):
        ParallelLayout(tp_size=8, ep_size=3)
    with pytest.raises(UserError, match="--ep-size"):
        ServerSettings(tp_size=8, ep_size=3)


def _table_value(gpu: str, dtype: str, tokens: int, tp: int, ep: int) -> float:
    """The vendored measurement itself (ms), DeepSeek's expert shape, power-law routing."""
    c = _load_npz(gpu, "moe")
    m = ((c["dtype"] == DTYPE_CODES[dtype]) & (c["hidden"] == 7168) & (c["inter"] == 2048) & (c["topk"] == 8)
         & (c["experts"] == 256) & (c["tp"] == tp) & (c["ep"] == ep) & (c["power_law"] == 1) & (c["tokens"] == tokens))
    assert m.sum() == 1
    return float(c["latency_ms"][m][0])


@pytest.mark.parametrize("gpu", ["b200_sxm", "b300_sxm"])
def test_ep_moe_is_the_table_at_moe_tp_and_ep(gpu) -> None:
    g = load_gpu(gpu)
    base = TableCosts(load_tables(gpu), RooflineCosts(g, dict(default_profile().roofline)))
    ds = load_model("deepseek-ai/DeepSeek-V3")
    # TP4/EP4: each rank computes 64 experts at full width (moe_tp 1) for all 16 tokens
    costs = ParallelCosts(base, ParallelLayout(tp_size=4, ep_size=4), g, ds)
    per_rank_inter = 2048 // 4  # what rank_shapes passes at tp 4
    got = costs.moe_s(16, 7168, per_rank_inter, 8, 256, "nvfp4", tp=4)
    assert got == pytest.approx(_table_value(gpu, "nvfp4", 16, tp=1, ep=4) * 1e-3, rel=1e-6)
    # plain TP4 (ep 1) is a different measurement: each rank holds all 256 experts at 1/4 width
    tp_only = base.moe_s(16, 7168, per_rank_inter, 8, 256, "nvfp4", tp=4)
    assert tp_only == pytest.approx(_table_value(gpu, "nvfp4", 16, tp=4, ep=1) * 1e-3, rel=1e-6)
    assert tp_only != pytest.approx(got, rel=0.01)


def test_multinode_allreduce_is_hierarchical() -> None:
    g = load_gpu("b200_sxm")  # 8 GPUs per node, 100 GB/s per GPU between nodes
    prof = default_profile()
    base = TableCosts(load_tables("b200_sxm"), RooflineCosts(g, dict(prof.roofline)))
    costs = ParallelCosts(base, ParallelLayout(tp_size=16), g, load_model("deepseek-ai/DeepSeek-V3"))
    msg = 2**20  # 1 MiB of bf16 hidden states
    intra = base.allreduce_s(msg, 8, True)
    # 2 nodes: each GPU ring-reduces its 1/8 share once across: 2·(2−1)/2 · 131072 B over 100 GB/s at the
    # fitted comm efficiency, plus 2·(2−1) network hops of 10 µs
    eff = prof.roofline["comm_eff"]
    hand = 131072 / (1.0e11 * eff) + 2 * INTER_NODE_HOP_S
    assert costs.allreduce_s(msg, 16, True) == pytest.approx(intra + hand, rel=1e-9)
    assert hand == pytest.approx(1.738e-6 + 2e-5, rel=1e-3)
    # inside one node the measured custom all-reduce is untouched
    assert costs.allreduce_s(msg, 8, True) == intra


def test_dp_attention_narrows_the_step_allreduce_but_not_the_tp_group_one() -> None:
    # TP16 over two b200 nodes with DP attention 16: the all-reduce after the attention runs inside each rank's
    # attention TP group (tp / dp = 1 GPU: nothing to reduce, the base cost at 1 GPU), while the DP gather /
    # scatter (simcore/dp_attention.py) spans the whole TP group: NCCL's hierarchical all-reduce over 2 nodes
    g = load_gpu("b200_sxm")
    prof = default_profile()
    base = TableCosts(load_tables("b200_sxm"), RooflineCosts(g, dict(prof.roofline)))
    lay = ParallelLayout(tp_size=16, dp_size=16, enable_dp_attention=True)
    costs = ParallelCosts(base, lay, g, load_model("deepseek-ai/DeepSeek-V3"))
    msg = 2**20
    assert costs.allreduce_s(msg, 16, True) == base.allreduce_s(msg, 1, True)
    hand = 131072 / (1.0e11 * prof.roofline["comm_eff"]) + 2 * INTER_NODE_HOP_S
    assert costs.tp_allreduce_s(msg, 16, True) == pytest.approx(base.allreduce_s(msg, 8, True) + hand, rel=1e-9)
    assert costs.tp_allreduce_s(msg, 8, False) == base.allreduce_s(msg, 8, False)  # one node: the measured one
    assert costs.tp_allreduce_s(msg, 16, True) > 10 * costs.allreduce_s(msg, 16, True)


def test_op_dtypes_per_precision() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")  # ships fp8_block (128×128 block scales)
    qwen = load_model("Qwen/Qwen3-32B")
    assert op_dtypes("nvfp4", ds) == op_dtypes("nvfp4") and op_dtypes("nvfp4").attention == "bf16"
    assert (op_dtypes("nvfp4").mlp, op_dtypes("nvfp4").moe) == ("nvfp4", "nvfp4")
    assert op_dtypes("fp8", ds).moe == "fp8_block"  # the checkpoint's block kernels (the table has no fp8 MoE)
    assert op_dtypes("fp8", qwen).attention == "fp8"
    assert op_dtypes("bf16", qwen).mlp == "bf16"


def test_nvfp4_weight_bytes_keep_attention_in_16_bits() -> None:
    tiny = ModelSpec(name="tiny", num_layers=1, hidden_size=16, num_heads=2, num_kv_heads=2, head_dim=8,
                     v_head_dim=8, intermediate_size=32, vocab_size=10)
    # attention 16·(2·8 + 2·16) + 2·8·16 = 1024, MLP 3·16·32 = 1536, embed + head 320, norms 48: 2928 in all
    assert tiny.num_params() == 2928
    # MLP at 4.5 bits per element (fp8 scale per 16), the rest at 2 bytes: 1536·0.5625 + (1024 + 320 + 48)·2
    assert tiny.weight_bytes("nvfp4") == 864 + 2784
    assert tiny.weight_bytes("modelopt_fp4") == tiny.weight_bytes("nvfp4")


def test_blackwell_catalogue() -> None:
    b300 = load_gpu("B300")
    assert (b300.name, b300.memory_bytes, b300.flops("nvfp4")) == ("b300_sxm", 288400343040, 1.4e16)
    assert (b300.gpus_per_node, b300.inter_node_bytes_per_s) == (8, 1.0e11)
    gb200 = load_gpu("gb200")
    assert gb200.gpus_per_node == 72 and gb200.flops("nvfp4") == 1.0e16
    h100 = load_gpu("h100")
    assert h100.flops("nvfp4") == h100.peak_flops["fp8"]  # no FP4 tensor cores: runs as fp8
    assert h100.inter_node_bytes_per_s == 5.0e10


def test_step_model_with_ep_and_fp4_is_table_backed() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")
    g = load_gpu("b200_sxm")
    ep = build_latency_model(ds, g, 8, "nvfp4", parallel=ParallelLayout(tp_size=8, ep_size=8))
    assert ep.name == "table:b200_sxm:tp8:ep8:nvfp4"
    assert ep.profile_hash == build_latency_model(ds, g, 8, "nvfp4").profile_hash  # same tables, same profile
    shape = BatchShape(num_decode=4, decode_sum_kv=4 * 2000, cuda_graph_bs=4)
    # the difference between EP8 and TP8 is exactly the MoE layers' table values at (1, 8) vs (8, 1)
    tp = build_latency_model(ds, g, 8, "nvfp4")
    diff = ep.step_time(shape).gpu_s - tp.step_time(shape).gpu_s
    hand = 58 * (_table_value("b200_sxm", "nvfp4", 4, tp=1, ep=8) - _table_value("b200_sxm", "nvfp4", 4, tp=8, ep=1))
    assert diff == pytest.approx(hand * 1e-3, rel=1e-6)
    assert np.isfinite(ep.step_time(BatchShape(extend_lens=(2532,), prefix_lens=(0,))).gpu_s)
