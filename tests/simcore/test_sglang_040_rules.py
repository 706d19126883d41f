"""SGLang 0.4.0.post1's own defaults (read in the sglang-0.4.0.post1 wheel), used for the DataCrunch H200 runs.

- ``srt/server_args.py`` ``ServerArgs.__post_init__``: ``mem_fraction_static`` by TP only (0.79 / 0.81 / 0.85 /
  0.87 / 0.88 at TP >= 16 / 8 / 4 / 2 / 1); ``chunked_prefill_size`` 2048 under 25,000 MB, else 8192;
  ``cuda_graph_max_bs`` 160 (8 / 80 under 25,000 MB);
- ``srt/model_executor/cuda_graph_runner.py`` ``CudaGraphRunner.__init__``: capture ``[1, 2, 4] + [8, 16, …, 160]``.
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.memory import GiB, size_kv_pool, tp_table_mem_fraction
from simcore.models.loader import load_model
from simcore.server_flags import parse_server_args
from simcore.settings import ServerSettings, resolve


@pytest.mark.parametrize("tp,frac", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_tp_table(tp: int, frac: float) -> None:
    assert tp_table_mem_fraction(tp) == frac


def test_llama_70b_tp4_h200_pool_by_hand() -> None:
    # H200: 143771 MiB = 150,754,820,096 B. P = that - 0.95 GiB of context (1,020,054,732 B) = 149,734,765,364 B.
    # Llama-3.3-70B bf16: 141,107,412,992 B of weights, 35,276,853,248 B per rank at TP4; KV cell per rank:
    # 2 KV heads x 128 x 2 (K, V) x 80 layers x 2 B = 81,920 B. rest = 0.85 P - W - 0.2 GiB (load slack)
    # = 127,274,550,559 - 35,276,853,248 - 214,748,364 = 91,782,948,947 B -> 1,120,397 tokens.
    pool = size_kv_pool(load_model("meta-llama/Llama-3.3-70B-Instruct"), load_gpu("h200_sxm"),
                        ServerSettings(sglang_version="0.4.0.post1", tp_size=4), "bf16")
    assert pool.mem_fraction_static == 0.85
    assert pool.cell_bytes_per_token == 81920
    assert pool.max_total_num_tokens == 1_120_397
    # 0.4.10 sizes by GPU memory instead: (143771 - (12 + 4/2) x 1024) / 143771 = 0.900
    later = size_kv_pool(load_model("meta-llama/Llama-3.3-70B-Instruct"), load_gpu("h200_sxm"),
                         ServerSettings(sglang_version="0.4.10", tp_size=4), "bf16")
    assert later.mem_fraction_static == 0.9


def test_cuda_graphs_and_chunk_of_0_4_0() -> None:
    h200 = load_gpu("h200_sxm").memory_bytes
    s = resolve(ServerSettings(sglang_version="0.4.0.post1", tp_size=4), h200)
    assert s.cuda_graph_max_bs == 160
    assert s.cuda_graph_bs == (1, 2, 4) + tuple(range(8, 161, 8))
    assert s.chunked_prefill_size == 8192
    # a B200 (>= 160 GiB) still gets 8192 and 160 in 0.4.0 (0.5.x: 16384 and 512)
    b200 = load_gpu("b200_sxm").memory_bytes
    assert b200 > 160 * GiB
    sb = resolve(ServerSettings(sglang_version="0.4.0", tp_size=8), b200)
    assert (sb.chunked_prefill_size, sb.cuda_graph_max_bs) == (8192, 160)
    # a 24 GB GPU: 2048-token chunks, 8 graphs below TP4 and 80 at TP4
    small = 24_000 * 1024**2
    assert resolve(ServerSettings(sglang_version="0.4.0", tp_size=1), small).cuda_graph_max_bs == 8
    assert resolve(ServerSettings(sglang_version="0.4.0", tp_size=4), small).cuda_graph_max_bs == 80
    assert resolve(ServerSettings(sglang_version="0.4.0", tp_size=4), small).chunked_prefill_size == 2048
    # an explicit list wins
    assert resolve(ServerSettings(sglang_version="0.4.0", cuda_graph_bs=(1, 2)), h200).cuda_graph_bs == (1, 2)


def test_launch_flags_of_the_datacrunch_405b_run() -> None:
    # typed as in datacrunch-research/h200-benchmarks sglang/experiments/docker_dev_commands.txt; --mem-frac is
    # argparse's unique-prefix form of --mem-fraction-static (SGLang's parser keeps allow_abbrev=True)
    flags = parse_server_args("--model-path meta-llama/Llama-3.1-405B-Instruct --tp-size 8 --host 0.0.0.0 "
                              "--port 30000 --disable-radix-cache --enable-torch-compile  --mem-frac 0.87", tp=8)
    assert flags == {"mem_fraction_static": 0.87, "disable_radix_cache": True}
    assert parse_server_args("--mem-frac=0.8 --torch-compile-max-bs 16") == {"mem_fraction_static": 0.8}
