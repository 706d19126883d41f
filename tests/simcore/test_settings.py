"""Server settings: SGLang's own flag names, with the defaults each version family resolves (spec §2.12, §6.1).

Settings are a frozen model built once at the edge; ``resolve`` fills what SGLang derives from the GPU size.
"""
from __future__ import annotations

import pytest

from simcore.errors import UserError
from simcore.settings import (GiB, ServerSettings, cuda_graph_batch_sizes, default_chunked_prefill_size,
                              default_cuda_graph_max_bs, resolve, version_family)

H100 = 81559 * 1024**2
H200 = 143771 * 1024**2
A100_40 = 40 * GiB
L4 = 22 * GiB
T4 = 15 * GiB
B200 = 180 * GiB


@pytest.mark.parametrize("version,family", [
    ("0.4.0", "0.4"), ("v0.4.10.post2", "0.4"), ("0.5.0", "0.5"), ("0.5.8.post1", "0.5"), ("0.5.9", "0.5"),
    ("0.5.22", "0.5"), ("0.5.23", "0.5.23"), ("0.6.1", "0.5.23"), (" 0.5.4rc1 ", "0.5"),
])
def test_version_family(version: str, family: str) -> None:
    assert version_family(version) == family


def test_unreadable_version_names_the_field() -> None:
    with pytest.raises(UserError) as e:
        version_family("latest")
    assert str(e.value).startswith("sglang_version:")
    with pytest.raises(UserError, match="^sglang_version: cannot read version 'banana'"):
        ServerSettings(sglang_version="banana")


def test_defaults_are_sglangs() -> None:
    s = ServerSettings()
    assert s.sglang_version == "0.5.9" and s.family == "0.5"
    assert (s.max_prefill_tokens, s.page_size, s.schedule_conservativeness) == (16384, 1, 1.0)
    assert (s.init_new_token_ratio, s.clip_max_new_tokens_estimation, s.lpm_fallback_queue_len) == (0.7, 4096, 128)
    assert s.min_new_token_ratio == pytest.approx(0.098)
    assert s.new_token_ratio_decay == pytest.approx((0.7 - 0.098) / 600)
    assert not s.disable_overlap_schedule and not s.enable_mixed_chunk and not s.disable_radix_cache


def test_conservativeness_scales_the_whole_new_token_ratio_schedule() -> None:
    # §2.6: init = min(0.7 × 0.3, 1) = 0.21; floor = 0.21 × 0.14 = 0.0294; decay = (0.21 − 0.0294) / 600
    s = ServerSettings(schedule_conservativeness=0.3)
    assert s.initial_new_token_ratio == pytest.approx(0.21)
    assert s.min_new_token_ratio == pytest.approx(0.0294)
    assert s.new_token_ratio_decay == pytest.approx(0.1806 / 600)


@pytest.mark.parametrize("version,policy", [("0.4.0", "lpm"), ("0.4.3", "lpm"), ("0.4.5", "fcfs"),
                                            ("0.5.9", "fcfs"), ("0.5.23", "fcfs")])
def test_default_policy_by_version(version: str, policy: str) -> None:
    assert ServerSettings(sglang_version=version).policy == policy
    assert ServerSettings(sglang_version=version, schedule_policy="lof").policy == "lof"


def test_settings_are_frozen_and_strict() -> None:
    s = ServerSettings()
    with pytest.raises(AttributeError, match="frozen"):
        s.page_size = 16  # type: ignore[misc]
    with pytest.raises(UserError, match="^max_num_seqs: unknown field"):
        ServerSettings(max_num_seqs=4)  # a vLLM flag, not SGLang's
    with pytest.raises(UserError, match="^mem_fraction_static: should be less than 1, got 1.2"):
        ServerSettings(mem_fraction_static=1.2)
    with pytest.raises(UserError, match="^schedule_policy: should be 'fcfs' or"):
        ServerSettings(schedule_policy="sjf")


def test_dp_attention_ranks_are_model_runners_dp_size() -> None:
    # sglang 0.5.9 model_runner.py: "self.dp_size = server_args.dp_size if server_args.enable_dp_attention else 1";
    # and server_args.py _handle_data_parallelism turns DP attention off at dp_size 1
    assert ServerSettings(tp_size=8, dp_size=4, enable_dp_attention=True).dp_attention_ranks == 4
    assert ServerSettings(tp_size=8, dp_size=4).dp_attention_ranks == 1  # plain DP: whole servers, one rank each
    assert ServerSettings(tp_size=8, enable_dp_attention=True).dp_attention_ranks == 1


def test_inconsistent_flags_name_the_field() -> None:
    with pytest.raises(UserError, match="^chunked_prefill_size"):
        ServerSettings(page_size=64, chunked_prefill_size=32)
    with pytest.raises(UserError, match="^enable_mixed_chunk"):
        ServerSettings(enable_mixed_chunk=True, chunked_prefill_size=-1)


@pytest.mark.parametrize("mem,family,expected", [
    (T4, "0.5.23", 2048), (L4, "0.5.23", 4096), (L4, "0.5", 2048), (L4, "0.4", 2048),
    (A100_40, "0.5.23", 4096), (A100_40, "0.4", 8192), (H100, "0.5", 8192), (H200, "0.4", 8192),
    (B200, "0.5.23", 16384), (None, "0.5", 4096),
])
def test_chunked_prefill_size_table(mem: int | None, family: str, expected: int) -> None:
    assert default_chunked_prefill_size(mem, family) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("mem,family,tp,expected", [
    (T4, "0.5", 1, 8), (L4, "0.5.23", 1, 48), (L4, "0.5.23", 4, 160), (L4, "0.5", 1, 24), (L4, "0.5", 8, 80),
    (A100_40, "0.5", 1, 32), (A100_40, "0.5", 4, 160), (H100, "0.5", 1, 256), (H100, "0.5.23", 8, 512),
    (H100, "0.4", 1, 160), (H200, "0.4", 1, 256), (B200, "0.5", 1, 512), (None, "0.5", 1, 160),
])
def test_cuda_graph_max_bs_table(mem: int | None, family: str, tp: int, expected: int) -> None:
    assert default_cuda_graph_max_bs(mem, family, tp) == expected  # type: ignore[arg-type]


def test_capture_lists() -> None:
    bs = cuda_graph_batch_sizes(256, "0.5")
    assert bs[:6] == (1, 2, 4, 8, 12, 16) and bs[-1] == 256 and 24 in bs and 20 not in bs
    assert len(bs) == 5 + len(range(16, 257, 8))
    big = cuda_graph_batch_sizes(512, "0.5.23")
    assert (272 in big, 496 in big, 512 in big, 264 in big) == (True, True, True, False)
    assert cuda_graph_batch_sizes(100, "0.5")[-1] == 100  # max_bs itself is always captured
    old = cuda_graph_batch_sizes(256, "0.4", H200)
    assert old[:4] == (1, 2, 4, 8) and 12 not in old and old[-1] == 256 and 168 in old


def test_resolve_fills_gpu_defaults_and_is_idempotent() -> None:
    s = resolve(ServerSettings(sglang_version="0.5.23"), H100)
    assert (s.chunked_prefill_size, s.cuda_graph_max_bs, s.schedule_policy) == (8192, 256, "fcfs")
    assert s.cuda_graph_bs == cuda_graph_batch_sizes(256, "0.5.23")
    assert resolve(s, H100) == s
    # explicit flags win; a small --max-running-requests caps the captured sizes
    t = resolve(ServerSettings(chunked_prefill_size=-1, max_running_requests=48), H100)
    assert t.chunked_prefill_size == -1 and not t.chunking_enabled and t.cuda_graph_max_bs == 48
    u = resolve(ServerSettings(disable_cuda_graph_padding=True, cuda_graph_max_bs=10), H100)
    assert u.cuda_graph_bs == tuple(range(1, 11))


@pytest.mark.parametrize("version,mem,tp,chunk,max_bs,top_sizes", [
    # sglang-0.5.1.post1 / 0.5.2 srt/server_args.py ServerArgs.__post_init__: chunked_prefill_size 2048 under
    # 35 * 1024 MiB, 8192 under 160 * 1024 MiB; cuda_graph_max_bs only set under 35 * 1024 MiB (8 below TP4, else
    # 80); srt/model_executor/cuda_graph_runner.py get_batch_sizes_to_capture: [1, 2, 4, 8] + range(16, 161, 8),
    # + range(160, 257, 8) above 90 * 1024 MiB, used whole when cuda_graph_max_bs is None
    ("0.5.1.post1", H100, 2, 8192, 160, (144, 152, 160)),
    ("0.5.1.post1", H100, 8, 8192, 160, (144, 152, 160)),
    ("0.5.2", H200, 4, 8192, 256, (240, 248, 256)),
    ("0.5.0", A100_40, 1, 8192, 160, (144, 152, 160)),
    ("0.5.1.post1", L4, 1, 2048, 8, (2, 4, 8)),
    ("0.5.1.post1", L4, 4, 2048, 80, (64, 72, 80)),
    # 0.5.3 (srt/server_args.py _handle_gpu_memory_settings): the per-GPU table and _generate_cuda_graph_batch_sizes
    ("0.5.3", H100, 2, 8192, 256, (240, 248, 256)),
    ("0.5.3", H100, 8, 8192, 512, (480, 496, 512)),
])
def test_gpu_defaults_up_to_0_5_2_are_0_4s(version: str, mem: int, tp: int, chunk: int, max_bs: int,
                                           top_sizes: tuple[int, ...]) -> None:
    s = resolve(ServerSettings(sglang_version=version, tp_size=tp), mem)
    assert (s.chunked_prefill_size, s.cuda_graph_max_bs) == (chunk, max_bs)
    assert s.cuda_graph_bs is not None and s.cuda_graph_bs[-3:] == top_sizes
    # 0.5.1's list has no 12 (a decode batch of 9-12 pads to 16); 0.5.3's has it
    assert (12 in s.cuda_graph_bs) == (version == "0.5.3")
    assert s.family == "0.5"  # only the GPU defaults follow 0.4; the scheduler rules stay 0.5's
