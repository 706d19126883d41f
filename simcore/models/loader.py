"""Read Hugging Face ``config.json`` files into `ModelSpec`s, from the shipped catalogue or a local path.

Supported families: dense Llama / Mistral / Qwen2 / Qwen3 / MiMo / Gemma 3, MoE Qwen3-MoE / Mixtral / GLM-4.5
(glm4_moe) / gpt-oss, MLA+MoE DeepSeek-V2/V3/R1/V3.1, DeepSeek-V3.2 (MLA with DeepSeek Sparse Attention) and
Kimi-K2, and the text backbone of Qwen3-VL and Gemma 3 (``text_config``). Sliding-window layers are read from
``layer_types`` (gpt-oss; ``sliding_attention`` entries) or Gemma 3's ``sliding_window_pattern`` (every sixth
layer global, transformers' ``Gemma3TextConfig``). Other architectures are refused with a message rather than
guessed at: a silently wrong layer count would poison every prediction.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from simcore.errors import UserError
from simcore.models.spec import ModelSpec

# simcore/models: configs/ and not_modelled.json (os.path, not pathlib: its import is ≈ 17 M instructions of start-up)
_PACKAGE = os.path.dirname(__file__)

DENSE = {"llama", "mistral", "qwen2", "qwen3", "mimo", "qwen3_vl_text", "qwen3_vl", "gemma3", "gemma3_text"}
MOE = {"qwen3_moe", "mixtral", "qwen2_moe", "qwen3_vl_moe", "qwen3_vl_moe_text", "gpt_oss", "glm4_moe"}
MLA = {"deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32"}
GEMMA3 = {"gemma3", "gemma3_text"}

# transformers' Gemma3TextConfig defaults (transformers 5.24 models/gemma3/configuration_gemma3.py): Gemma 3's
# published config.json files leave these out of ``text_config`` (4B sets no head counts at all).
GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "max_position_embeddings": 131_072, "sliding_window": 4096, "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
}

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16"}


def _quantization(cfg: dict[str, Any]) -> str | None:
    q = cfg.get("quantization_config")
    if not q:
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8_block" if q.get("weight_block_size") else "fp8"
    if method in ("awq", "gptq"):
        return "int4"
    if method == "mxfp4":
        return "mxfp4"
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        for g in groups.values():
            w = g.get("weights") or {}
            if w.get("num_bits") == 8 and w.get("type") == "float":
                return "fp8"
            if w.get("num_bits") == 4:
                return "int4"
    return None


def sliding_window_layers(cfg: dict[str, Any], mtype: str) -> tuple[int, int]:
    """(sliding window in tokens, number of sliding-window layers) of a text config; (0, 0) without any.

    ``layer_types`` is authoritative where present (gpt-oss; SGLang 0.5.9 ``configs/model_config.py:
    get_hybrid_layer_ids`` reads it for GptOssForCausalLM). Gemma 3 without it: layer i is local unless
    (i + 1) is a multiple of ``sliding_window_pattern`` (transformers ``Gemma3TextConfig.__post_init__``)."""
    layers = int(cfg["num_hidden_layers"])
    window = int(cfg.get("sliding_window") or 0)
    types = cfg.get("layer_types")
    if types:
        swa = sum(1 for t in types[:layers] if t == "sliding_attention")
    elif mtype in GEMMA3:
        pattern = int(cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or 6)
        swa = sum(1 for i in range(layers) if (i + 1) % pattern)
    else:
        swa = 0  # e.g. Mistral-7B-v0.1's sliding_window, which SGLang runs as full attention on every layer
    if not window or not swa:
        return 0, 0
    return window, swa


def spec_from_config(cfg: dict[str, Any], name: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json dict (see module docstring for supported families)."""
    top = cfg
    if "text_config" in cfg:  # VLM: the language backbone is what the scheduler and KV pool see
        text = cfg["text_config"]
        tie = top.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        if str(text.get("model_type", "")).lower() in GEMMA3:
            tie = text.get("tie_word_embeddings", True)  # Gemma3TextConfig ties the LM head by default
        cfg = {**text, "tie_word_embeddings": tie}
    mtype = str(cfg.get("model_type") or top.get("model_type") or "").lower()
    if mtype in GEMMA3:
        cfg = {**GEMMA3_TEXT_DEFAULTS, **cfg}
    arch = (top.get("architectures") or [""])[0]
    if mtype not in DENSE | MOE | MLA:
        raise UserError("--model", f"{name}: architecture {arch or mtype!r} is not modelled",
                        "supported: Llama, Mistral, Qwen2/3, Qwen3-MoE, Mixtral, Gemma 3, gpt-oss, GLM-4.5, "
                        "DeepSeek-V2/V3/V3.2, Kimi-K2")
    h = int(cfg["hidden_size"])
    nh = int(cfg["num_attention_heads"])
    dtype = _DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or "bfloat16"), "bf16")
    window, swa_layers = sliding_window_layers(cfg, mtype)
    common: dict[str, Any] = dict(
        name=name, architecture=arch, num_layers=int(cfg["num_hidden_layers"]), hidden_size=h, num_heads=nh,
        vocab_size=int(cfg["vocab_size"]), intermediate_size=int(cfg.get("intermediate_size") or 4 * h),
        context_length=int(cfg.get("max_position_embeddings") or 4096), dtype=dtype,
        quantization=_quantization(top) or _quantization(cfg),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        sliding_window=window, num_swa_layers=swa_layers,
    )
    if mtype in MLA:
        nope, rope = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"])
        moe_i = int(cfg["moe_intermediate_size"])
        return ModelSpec(
            **common, num_kv_heads=nh, head_dim=nope + rope, v_head_dim=int(cfg["v_head_dim"]),
            is_mla=True, kv_lora_rank=int(cfg["kv_lora_rank"]), q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            qk_rope_head_dim=rope, qk_nope_head_dim=nope,
            num_experts=int(cfg["n_routed_experts"]), top_k=int(cfg["num_experts_per_tok"]),
            moe_intermediate_size=moe_i, num_shared_experts=int(cfg.get("n_shared_experts") or 0),
            shared_expert_intermediate_size=moe_i, num_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
            index_head_dim=int(cfg.get("index_head_dim") or 0) if mtype == "deepseek_v32" else 0,
            index_topk=int(cfg.get("index_topk") or 0) if mtype == "deepseek_v32" else 0,
        )
    head_dim = int(cfg.get("head_dim") or h // nh)
    nkv = int(cfg.get("num_key_value_heads") or nh)
    if mtype == "glm4_moe":  # DeepSeek-style routed + shared experts after first_k_dense_replace dense layers
        moe_i = int(cfg["moe_intermediate_size"])
        shared = int(cfg.get("n_shared_experts") or 0)
        return ModelSpec(
            **common, num_kv_heads=nkv, head_dim=head_dim, v_head_dim=head_dim,
            num_experts=int(cfg["n_routed_experts"]), top_k=int(cfg["num_experts_per_tok"]),
            moe_intermediate_size=moe_i, num_shared_experts=shared,
            shared_expert_intermediate_size=moe_i if shared else 0,
            num_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
        )
    if mtype in MOE:
        experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
        # Mixtral names its expert width intermediate_size; Qwen uses moe_intermediate_size.
        moe_i = int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
        shared_i = int(cfg.get("shared_expert_intermediate_size") or 0)
        dense = len(cfg.get("mlp_only_layers") or [])
        return ModelSpec(
            **common, num_kv_heads=nkv, head_dim=head_dim, v_head_dim=head_dim, num_experts=experts,
            top_k=int(cfg["num_experts_per_tok"]), moe_intermediate_size=moe_i,
            num_shared_experts=1 if shared_i else 0, shared_expert_intermediate_size=shared_i,
            num_dense_layers=dense,
        )
    return ModelSpec(**common, num_kv_heads=nkv, head_dim=head_dim, v_head_dim=head_dim)


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, str]:
    """Lower-cased HF id → file name of every shipped config."""
    out: dict[str, str] = {}
    for name in os.listdir(os.path.join(_PACKAGE, "configs")):
        if name.endswith("_config.json"):
            out[name.removesuffix("_config.json").replace("--", "/").lower()] = name
    return out


def _aliases(hf_id: str) -> list[str]:
    """Spellings that should resolve to a catalogued id: without org, without -Instruct, Meta- prefix."""
    org, _, model = hf_id.partition("/")
    forms = {hf_id, model}
    for m in list(forms):
        for suffix in ("-instruct", "-chat", "-base", "-it"):
            if m.endswith(suffix):
                forms.add(m.removesuffix(suffix))
        forms.add(m.replace("-instruct-", "-"))  # Mixtral-8x7B-Instruct-v0.1 → Mixtral-8x7B-v0.1
    for m in list(forms):
        bare = m.split("/")[-1]
        if bare.startswith("meta-llama-"):
            forms.add(bare.removeprefix("meta-"))
    return sorted(forms)


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    idx: dict[str, str] = {}
    for hf_id in sorted(_catalogue()):
        for a in _aliases(hf_id):
            idx.setdefault(a, hf_id)
            idx.setdefault(a.split("/")[-1], hf_id)
    return idx


@lru_cache(maxsize=1)
def not_modelled() -> dict[str, str]:
    """Lower-cased HF id → why a widely served model is not in the catalogue (``not_modelled.json``)."""
    with open(os.path.join(_PACKAGE, "not_modelled.json")) as f:
        raw = json.loads(f.read())
    return dict(raw["models"])


def list_models() -> list[str]:
    """HF ids of every shipped config (lower case)."""
    return sorted(_catalogue())


def _canonical(hf_lower: str) -> str:
    return _catalogue()[hf_lower].removesuffix("_config.json").replace("--", "/")


@lru_cache(maxsize=256)
def _load_catalogued(hf_lower: str) -> ModelSpec:
    with open(os.path.join(_PACKAGE, "configs", _catalogue()[hf_lower])) as f:
        text = f.read()
    return spec_from_config(json.loads(text), _canonical(hf_lower))


def _load_config_path(name_or_path: str) -> ModelSpec | None:
    """The model of a local config.json (or a folder holding one); None when ``name_or_path`` names neither."""
    from pathlib import Path

    p = Path(name_or_path)
    if not (p.suffix == ".json" or p.is_dir()):
        return None
    path = p / "config.json" if p.is_dir() else p
    if not path.is_file():
        raise UserError("--model", f"no config.json at {path}", "give an HF id or the path of a config.json")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError("--model", f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    return spec_from_config(cfg, path.parent.name or path.stem)


def load_model(name_or_path: str) -> ModelSpec:
    """A ModelSpec from an HF id (case-insensitive; ``-Instruct``/org optional) or a local config.json path.

    Raises UserError("--model", …) with the closest catalogued names when nothing matches.
    """
    # a local path (pathlib's suffix ".json" or a folder) can only be a name with ".json" in it, a folder or ""
    # (pathlib's "."): only those are looked at with pathlib; a catalogued id skips its import (start-up)
    if not name_or_path or ".json" in name_or_path or os.path.isdir(name_or_path):
        spec = _load_config_path(name_or_path)
        if spec is not None:
            return spec
    key = name_or_path.strip().lower()
    if key in _catalogue():  # the exact id: no alias index to build (start-up)
        return _load_catalogued(key)
    idx = _alias_index()
    hit = None
    for a in _aliases(key):
        if a in idx:
            hit = idx[a]
            break
    if hit is None:
        reason = not_modelled().get(key)
        if reason is not None:
            raise UserError("--model", f"{name_or_path}: not in the catalogue: {reason}",
                            "`shadowsim models` lists the models that can be simulated")
        import difflib

        close = difflib.get_close_matches(key, list(idx), n=3, cutoff=0.5)
        hint = "did you mean " + ", ".join(_canonical(idx[c]) for c in close) + "?" if close else \
            "give a local config.json path; `shadowsim models` lists the catalogue"
        raise UserError("--model", f"unknown model {name_or_path!r}", hint)
    return _load_catalogued(hit)  # catalogued specs are immutable: cache them; local files are re-read
