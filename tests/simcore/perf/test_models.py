"""The model catalogue: Hugging Face config.json files read into ModelSpec, with the sizes SGLang derives.

Parameter counts are checked against the published model sizes; KV bytes per token against the worked
example of sglang-internals.md §4.3–4.4.
"""
from __future__ import annotations

import json

import pytest

from simcore.errors import UserError
from simcore.models import list_models, load_model


def test_catalogue_ships_the_common_families() -> None:
    ids = set(list_models())
    for hf in ("qwen/qwen3-32b", "meta-llama/meta-llama-3.1-8b", "qwen/qwen3-30b-a3b", "deepseek-ai/deepseek-v3",
               "mistralai/mixtral-8x7b-v0.1", "qwen/qwen2.5-7b-instruct", "mistralai/mistral-7b-instruct-v0.3"):
        assert hf in ids


@pytest.mark.parametrize("name, billions", [
    ("meta-llama/Llama-3.1-8B-Instruct", 8.03),
    ("Qwen/Qwen3-32B", 32.76),
    ("meta-llama/Llama-3.1-70B-Instruct", 70.55),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.70),
    ("Qwen/Qwen3-30B-A3B", 30.53),
    ("deepseek-ai/DeepSeek-V3", 671.03),
])
def test_parameter_counts_match_published_sizes(name: str, billions: float) -> None:
    assert load_model(name).num_params() / 1e9 == pytest.approx(billions, abs=0.01)


def test_moe_active_parameters() -> None:
    assert load_model("Qwen/Qwen3-30B-A3B").num_active_params() / 1e9 == pytest.approx(3.35, abs=0.01)
    assert load_model("deepseek-ai/DeepSeek-V3").num_active_params() / 1e9 == pytest.approx(37.55, abs=0.01)


def test_architecture_fields() -> None:
    q = load_model("qwen/qwen3-32b")  # case-insensitive
    assert (q.num_layers, q.hidden_size, q.num_heads, q.num_kv_heads, q.head_dim) == (64, 5120, 64, 8, 128)
    assert (q.intermediate_size, q.vocab_size, q.context_length, q.dtype) == (25600, 151936, 40960, "bf16")
    d = load_model("deepseek-ai/DeepSeek-V3")
    assert d.is_mla and (d.kv_lora_rank, d.qk_rope_head_dim, d.v_head_dim) == (512, 64, 128)
    assert (d.num_experts, d.top_k, d.moe_intermediate_size, d.num_dense_layers) == (256, 8, 2048, 3)
    assert d.quantization == "fp8_block" and d.default_precision == "fp8_block"
    m = load_model("mistralai/Mixtral-8x7B-v0.1")
    assert (m.num_experts, m.top_k, m.moe_intermediate_size) == (8, 2, 14336)


def test_kv_cell_bytes_follow_sglang_cell_size() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert llama.kv_cell_bytes(1) == 131072  # §4.4: 8·(128+128)·32·2
    assert llama.kv_cell_bytes(2) == 65536
    assert llama.kv_cell_bytes(16) == 16384  # 8 KV heads over 16 ranks: replicated, one per GPU
    assert llama.kv_cell_bytes(1, kv_dtype_bytes=1) == 65536
    dsv3 = load_model("deepseek-ai/DeepSeek-V3")
    assert dsv3.kv_cell_bytes(1) == dsv3.kv_cell_bytes(8) == (512 + 64) * 61 * 2


def test_weight_bytes_per_precision() -> None:
    q = load_model("Qwen/Qwen3-32B")
    bf16, fp8, int4 = q.weight_bytes("bf16"), q.weight_bytes("fp8"), q.weight_bytes("int4")
    assert bf16 == pytest.approx(2 * q.num_params(), rel=1e-9)
    embed = 2 * q.vocab_size * q.hidden_size * 2  # untied embedding + LM head stay 16-bit
    assert fp8 == pytest.approx((bf16 - embed) / 2 + embed, rel=1e-3)
    assert int4 < fp8 < q.weight_bytes("fp8_block") < bf16
    with pytest.raises(UserError, match="--precision"):
        q.weight_bytes("fp3")


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UserError) as exc:
        load_model("Qwen/Qwen3-33B")
    assert exc.value.field == "--model"
    assert "Qwen/Qwen3-32B" in str(exc.value)


def test_local_config_path_and_unsupported_architecture(tmp_path) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
           "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(d / "config.json"))
    assert (m.name, m.head_dim, m.num_layers) == ("tiny", 64, 16)
    assert load_model(str(d)).num_params() == m.num_params()  # a directory holding config.json works too
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "mamba", "architectures": ["Mamba"]}))
    with pytest.raises(UserError, match="not modelled"):
        load_model(str(d / "config.json"))
    with pytest.raises(UserError, match="no config.json"):
        load_model(str(tmp_path / "missing.json"))
