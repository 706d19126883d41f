"""Sliding-window attention (gpt-oss, Gemma 3): what one sliding-window layer attends to in a step.

SGLang runs a sliding-window layer with the same attention kernels as a global layer, given the layer's
``sliding_window_size`` (SGLang 0.5.9: ``RadixAttention(sliding_window_size=…)`` for the ``sliding_attention``
layers of ``models/gpt_oss.py`` and the local layers of ``models/gemma3_causal.py``, both
``get_attention_sliding_window_size(config) = config.sliding_window − 1``, the keys left of the query; the
FlashAttention-3 backend passes it as ``window_size=(sliding_window_size, 0)``, the Triton backend masks the keys
outside it). With ``W = config.sliding_window`` a query at position ``j`` (0-based) attends to keys
``max(0, j − W + 1) … j`` (at most ``W`` keys, itself included) instead of ``0 … j``:

- **prefill / extend**: a request with ``e`` new tokens over a cached prefix of ``p`` computes
  ``∫ₚ^{p+e} min(x, W) dx`` query-key pairs (the continuous form of the full layers' ``e·p + e²/2``, which it
  equals whenever ``p + e ≤ W``): ``e·p + e²/2`` if ``p + e ≤ W``, ``e·W`` if ``p ≥ W``, and
  ``(W² − p²)/2 + (p + e − W)·W`` in between;
- **decode**: a row with ``kv`` cached tokens reads ``min(kv, W)`` of them.

The step model prices the full layers as before and the sliding-window layers on these capped amounts
(`simcore.perf.step.StepLatencyModel`). When a decode shape gives only ``Σkv`` (the decode-run fast path), the
window's share is ``min(Σkv, n·W)``: exact when every row is past the window or none is, an upper bound on
``Σ min(kvᵢ, W)`` otherwise.
"""
from __future__ import annotations


def window_pairs(extend: int, prefix: int, window: int) -> float:
    """Query-key pairs of ``extend`` new tokens over ``prefix`` cached ones in a layer of window ``window``."""
    e, p, w = float(extend), float(prefix), float(window)
    if p + e <= w:
        return e * p + e * e / 2.0
    if p >= w:
        return e * w
    return (w * w - p * p) / 2.0 + (p + e - w) * w


def window_extend_sq(extend_lens: tuple[int, ...], prefix_lens: tuple[int, ...], window: int) -> float:
    """Σ over requests of (equivalent causal length)² for a sliding-window layer: 2 × its query-key pairs.

    The full layers' lookup uses Σ e·(e + 2p) = Σ 2·(e·p + e²/2); this is the same quantity with the window."""
    prefixes = prefix_lens if prefix_lens else (0,) * len(extend_lens)
    return sum(2.0 * window_pairs(e, p, window) for e, p in zip(extend_lens, prefixes))


def window_decode_kv(num_decode: int, sum_kv: int, kv_lens: tuple[int, ...], window: int) -> int:
    """KV tokens the decode rows read in a sliding-window layer: Σ min(kvᵢ, W), or min(Σkv, n·W) from the sum."""
    if kv_lens:
        return sum(min(kv, window) for kv in kv_lens)
    return min(sum_kv, num_decode * window)
