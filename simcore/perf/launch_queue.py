"""When an eager forward's launch returns: the CUDA launch queue under overlap scheduling (docs/accuracy.md §3.4).

**SGLang's rule.** With overlap scheduling (the default) the scheduler processes the results of batch N — the
first tokens of the prompts it completed — only after batch N + 1 has been launched:

- 0.5.1.post1: ``Scheduler.event_loop_overlap`` (``managers/scheduler.py`` 795-829) calls ``run_batch(N + 1)``,
  then ``process_batch_result(N, ..., batch.launch_done)`` of the batch just launched;
  ``TpModelWorkerClient.resolve_last_batch_result`` (``managers/tp_worker_overlap_thread.py`` 207-217) waits on
  that ``launch_done`` before ``copy_done.synchronize()``; ``TpModelWorker.forward_batch_generation``
  (``managers/tp_worker.py`` 239-243) sets it when ``model_runner.forward`` has returned.
- 0.4.0: the same (``resolve_batch_result`` waits on ``self.launch_done``, set after ``model_runner.forward``).
- 0.5.8-0.5.23: one thread, same order (``event_loop_overlap``: ``run_batch(batch)``, then ``pop_and_process()``
  of the last batch), unless ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` (default False through 0.5.23,
  ``environ.py``) processes a last extend batch first.

A CUDA-graph decode launches one graph and returns at once. An eager forward (every extend or mixed batch)
issues its kernels one by one from Python, and CUDA lets only a bounded number of commands wait in a stream:
once about **1,024** are pending, the next launch blocks until the GPU retires one (public measurement: a
launch takes 4-5 µs for the first ~1,000 queued kernels and then the duration of one kernel, NVIDIA developer
forums t/68937 = stackoverflow.com/q/53970187). So when the GPU runs slower than the host launches — a prefill
chunk of thousands of tokens — the host stays ``PENDING_LAUNCH_LIMIT`` commands ahead of the GPU, and the launch
of batch N + 1 returns only when the GPU has run all but the last ``PENDING_LAUNCH_LIMIT`` commands of it. If
N + 1 issues more commands than that, the first tokens of batch N leave after the GPU has run the first
``launch_wait_fraction`` of N + 1's layers, not at N's GPU end.

**The command count** of one eager forward on the forward stream, read from SGLang 0.5.1.post1 for the dense
layer of ``models/qwen3.py`` / ``models/llama.py`` (``LayerCommunicator``, ``layers/layernorm.py``
``RMSNorm.forward_cuda``, ``layers/rotary_embedding.py`` ``forward_cuda``, ``mem_cache/memory_pool.py``
``MHATokenToKVPool.set_kv_buffer``, ``layers/attention/flashattention_backend.py`` ``forward_extend``):

- input RMSNorm (fused add) 1, QKV GEMM 1, RoPE 1 (``apply_rope_with_cos_sin_cache_inplace``), K and V stores 2
  (``k_buffer[layer][loc] = k``, ``v_buffer[...]``), attention 1, O GEMM 1, post-attention RMSNorm 1, gate-up
  GEMM 1, SiLU-and-mul 1, down GEMM 1: **11**;
- Qwen3's per-head q/k norm (``Qwen3Attention._apply_qk_norm``): ``q.reshape(-1, head_dim)`` of a slice of the
  QKV output cannot be a view (its row stride is q + 2 kv), so a copy and an RMSNorm each for q and k: **+4**;
- TP > 1, two all-reduces a layer, each **2** commands on the forward stream: prefill messages ≥ 8 MiB go to
  ``torch.distributed.all_reduce`` (``distributed/parallel_state.py`` ``_all_reduce_in_place``: PyNccl is
  disabled outside CUDA-graph capture, ``pynccl.py`` 121-124), whose ProcessGroupNCCL records an event on the
  forward stream and makes it wait for the NCCL stream's end event; smaller ones go to the custom all-reduce
  (a copy into its buffer and its kernel).

Per forward, outside the layers (``FIXED_COMMANDS``, TP > 1; an estimate from the same reading, ±10): the
future-token resolution and the stream wait of the forward thread (~7), ``ForwardBatch.init_new`` (positions,
the extend lengths' copies, ~6), the attention metadata (``init_forward_metadata``: cumsums, pads, page-table
gather, ~6), the vocab-parallel embedding with its all-reduce (~7), the final norm (1) and the logits of the
last tokens (index, LM-head GEMM, all-gather, ~8). TP = 1: no all-reduce, no all-gather (``FIXED_COMMANDS_TP1``).

Qwen3-32B (64 layers) at TP 2-8: 64 × 19 + 35 = 1,251 commands, so the launch returns after 1,251 − 1,024 − 35 =
192 layer commands have run, 192 / 1,216 = **0.158** of the layers; at TP 1 (64 × 15 + 25 = 985 < 1,024) it returns
before the GPU starts it. Llama-3.1-70B TP4: 80 × 15 + 35 = 1,235: 0.147; 405B TP8 (126 layers): 0.458.
The fixed part cancels out of the fraction (``launch_wait_fraction`` uses the layer count alone; ``FIXED_COMMANDS``
and ``forward_commands`` describe the whole forward and are checked by the tests, they move no result). Strictly,
the ~9 commands after the layers (final norm, logits) are queued behind them, so only ~26 precede the layers and
φ would be (1,251 − 1,024 − 26) / 1,216 = 0.165 rather than 0.158: inside the ±1 command a layer of docs/accuracy.md
§3.4's sensitivity (φ 0.111–0.200).

MoE and MLA layers (DeepSeek, Qwen3-MoE, Mixtral, gpt-oss ...) issue many more commands per layer (routing,
expert GEMMs, quantization, MLA's absorbed projections), which are not counted here: for them
``launch_wait_fraction`` is 0 (the wait is not modelled), as are architectures whose layer was not read.
"""
from __future__ import annotations

from typing import Any

from simcore.models.spec import ModelSpec

PENDING_LAUNCH_LIMIT = 1024  # commands a CUDA stream holds before a launch blocks (NVIDIA forums t/68937)
DENSE_LAYER_COMMANDS = 11    # norms, GEMMs, RoPE, K/V stores, attention, activation (module docstring)
QK_NORM_COMMANDS = 4         # Qwen3's q/k copies and RMSNorms
ALLREDUCE_COMMANDS = 2       # per all-reduce on the forward stream (event record + wait, or copy + kernel)
FIXED_COMMANDS = 35          # per forward outside the layers, TP > 1
FIXED_COMMANDS_TP1 = 25      # the same without the embedding's all-reduce and the logits' all-gather

# dense decoder layers whose op sequence was read in SGLang's source (module docstring)
_QK_NORM_ARCHITECTURES = frozenset({"Qwen3ForCausalLM"})
_PLAIN_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"})


def layer_commands(model: ModelSpec, tp: int) -> int | None:
    """Commands one eager forward issues per layer on the forward stream, or None where not counted (MoE, MLA,
    sliding-window and architectures whose layer was not read)."""
    if model.is_moe or model.is_mla or model.num_swa_layers:
        return None
    if model.architecture in _QK_NORM_ARCHITECTURES:
        n = DENSE_LAYER_COMMANDS + QK_NORM_COMMANDS
    elif model.architecture in _PLAIN_ARCHITECTURES:
        n = DENSE_LAYER_COMMANDS
    else:
        return None
    return n + (2 * ALLREDUCE_COMMANDS if tp > 1 else 0)


def forward_commands(model: ModelSpec, tp: int) -> int | None:
    """Commands of one eager forward (layers and the fixed part), or None where the layer is not counted."""
    per_layer = layer_commands(model, tp)
    if per_layer is None:
        return None
    return model.num_layers * per_layer + (FIXED_COMMANDS if tp > 1 else FIXED_COMMANDS_TP1)


def launch_wait_fraction(model: ModelSpec, tp: int, limit: int = PENDING_LAUNCH_LIMIT) -> float:
    """Fraction of an eager forward's layer time the GPU has run when its launch returns (0: the launch returns
    before the GPU starts it, or the command count is not modelled)."""
    per_layer = layer_commands(model, tp)
    if per_layer is None:
        return 0.0
    layer_total = model.num_layers * per_layer
    # the launch returns when the GPU reaches command (total - limit) of the forward; the fixed commands are
    # counted before the layers (most are: the embedding, metadata and input copies), so the layer commands run by
    # then are layer_total + fixed - limit - fixed
    return max(0.0, (layer_total - limit) / layer_total)


def step_model(latency: Any) -> Any:
    """The ``StepLatencyModel`` behind a latency model (calibration and layout wrappers expose ``base``), or
    None (speculative, DP-attention or test models without a ``model`` and ``tp``)."""
    seen = 0
    while latency is not None and seen < 8:
        if hasattr(latency, "model") and hasattr(latency, "tp") and isinstance(getattr(latency, "model"), ModelSpec):
            return latency
        latency = getattr(latency, "base", None)
        seen += 1
    return None
