"""The KV pool of SGLang 0.5.8.post1 serving Qwen3-32B bf16 on one H100-80GB, by SGLang's own rules.

The six TP1 rows of ../shared/data/validation/sglang_qwen3_32b_h100.csv behave like a pool of ~7.5k tokens
(docs/accuracy.md §3.4); these tests pin what SGLang 0.5.8.post1's source gives instead, so a change to the sizing
that would "explain" those rows has to contradict a cited line:

- sglang-0.5.8.post1 srt/server_args.py ``ServerArgs._handle_gpu_memory_settings``: gpu_mem = nvidia-smi
  ``memory.total`` (81559 MiB, ``get_nvgpu_memory_capacity``: the minimum over the node's GPUs); 60-90 GiB and
  TP < 4 -> chunked_prefill_size 8192, cuda_graph_max_bs 256; reserved = 512 + 1.5 x 8192 + 2 x 256 +
  TP·PP/8 x 1024 MiB (piecewise CUDA graphs off by default: ``enable_piecewise_cuda_graph: bool = False``; no
  speculative, DP-attention or VLM term), at least 10 GiB -> mem_fraction_static = round((81559 - 13440) / 81559,
  3) = 0.835;
- srt/model_executor/model_runner_kv_cache_mixin.py ``profile_max_num_token``: tokens = (A - P x (1 - f)) / cell,
  A the free memory after the weights, P the free memory read in ``ModelRunner.init_torch_distributed``;
  cell = 8 KV heads x (128 + 128) x 64 layers x 2 bytes = 256 KiB.
"""
from __future__ import annotations

from simcore.gpus import load_gpu
from simcore.memory import (DEFAULT_CONTEXT_BYTES, DEFAULT_LOAD_OVERHEAD_BYTES, GiB, MiB,
                            default_mem_fraction_static, size_kv_pool)
from simcore.models import load_model
from simcore.settings import ServerSettings

QWEN3_32B = load_model("Qwen/Qwen3-32B")
H100 = load_gpu("h100_sxm")


def _hand_counted_weight_bytes() -> int:
    # Qwen3-32B config.json: hidden 5120, 64 layers, 64 q heads and 8 KV heads of 128, intermediate 25600,
    # vocab 151936, tie_word_embeddings false (embedding and LM head are two matrices)
    h, layers, q, kv, inter, vocab = 5120, 64, 64 * 128, 8 * 128, 25600, 151936
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * inter + 2 * h + 2 * 128  # + the RMSNorms and q/k norms
    return 2 * (layers * per_layer + 2 * vocab * h + h)


def test_weights_are_61_gib_including_the_untied_embedding_and_lm_head() -> None:
    w = QWEN3_32B.weight_bytes("bf16")
    assert abs(w - _hand_counted_weight_bytes()) < MiB  # the catalogue leaves out only the q/k-norm vectors
    assert 61.0 < w / GiB < 61.1


def test_0_5_8_default_fraction_and_pool_on_one_h100() -> None:
    assert H100.memory_bytes == 81559 * MiB
    reserved_mib = 512 + 1.5 * 8192 + 2 * 256 + 1 / 8 * 1024
    assert reserved_mib == 13440
    assert default_mem_fraction_static(H100.memory_bytes, "0.5", 1, 8192, 256) == round((81559 - 13440) / 81559, 3)
    pool = size_kv_pool(QWEN3_32B, H100, ServerSettings(sglang_version="0.5.8.post1", tp_size=1))
    assert pool.mem_fraction_static == 0.835
    assert pool.cell_bytes_per_token == 8 * (128 + 128) * 64 * 2
    p = H100.memory_bytes - DEFAULT_CONTEXT_BYTES
    a = p - QWEN3_32B.weight_bytes("bf16") - DEFAULT_LOAD_OVERHEAD_BYTES
    assert pool.max_total_num_tokens == int((a - p * (1 - 0.835)) // (256 * 1024)) == 18383
    # the six rows fit a pool of ~7.5k tokens; SGLang's rules reach it only with a fraction given by hand
    pinned = size_kv_pool(QWEN3_32B, H100, ServerSettings(sglang_version="0.5.8.post1", tp_size=1,
                                                          mem_fraction_static=0.80))
    assert 7000 < pinned.max_total_num_tokens < 7200
