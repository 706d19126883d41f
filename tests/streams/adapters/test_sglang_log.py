"""Log-line adapter on the formats of sglang-internals section 5.1, version by version, and on the prefixes that
containers and log collectors add. Each test feeds one line and checks the event fields, the skip, or the
dead-letter reason."""
from __future__ import annotations

import calendar

import pytest

from streams.adapters.base import ParseContext
from streams.adapters.sglang_log import parse_line

T0 = float(calendar.timegm((2026, 10, 30, 12, 0, 1, 0, 0, 0)))


def one(line: str, ctx: ParseContext | None = None):
    ctx = ctx or ParseContext(source="t.log", line_no=7)
    res = parse_line(line, ctx)
    assert isinstance(res, list) and len(res) == 1, res
    return res[0]


def test_0_4_10_prefill_with_trailing_comma():
    e = one("[2026-10-30 12:00:01 TP0] Prefill batch. #new-seq: 2, #new-token: 4992, #cached-token: 128, "
            "token usage: 0.81, #running-req: 61, #queue-req: 3, ")
    assert (e.kind, e.ts, e.tp_rank) == ("prefill_batch", T0, 0)
    assert (e.new_seqs, e.new_tokens, e.cached_tokens, e.token_usage, e.running_reqs, e.queue_reqs) == (
        2, 4992, 128, 0.81, 61, 3)
    assert e.event_id == "t.log:7" and e.source == "t.log"


def test_0_5_4_iteration_counter_and_cpu_graph():
    e = one("[2026-10-30 12:00:01] Decode batch [1234], #running-req: 8, #token: 9000, token usage: 0.10, "
            "cpu graph: False, gen throughput (token/s): 321.50, #queue-req: 0, ")
    assert (e.forward_iter, e.running_reqs, e.kv_tokens, e.cuda_graph, e.gen_throughput_tok_s) == (
        1234, 8, 9000, False, 321.5)


def test_0_5_9_prefill_after_forward_no_trailing_comma():
    e = one("[2026-10-30 12:00:01] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
            "#running-req: 0, #queue-req: 0, input throughput (token/s): 10240.00, cuda graph: True")
    assert (e.new_tokens, e.input_throughput_tok_s, e.cuda_graph, e.pending_tokens) == (512, 10240.0, True, None)


def test_0_5_23_pending_tokens_ms_timestamps_and_all_rank_tags():
    e = one("[2026-10-30 12:00:01.250 DP1 PP2 ATTN_CP0 MOE_DP3 TP4 EP5] Prefill batch, #new-seq: 3, #new-token: 3000, "
            "#cached-token: 1000, token usage: 0.20, #running-req: 5, #queue-req: 7, #pending-token: 9000, "
            "cuda graph: False, input throughput (token/s): 1234.50, est. prefill TFLOPS/s (per GPU): 123.4")
    assert e.ts == T0 + 0.25
    assert (e.dp_rank, e.pp_rank, e.tp_rank, e.ep_rank) == (1, 2, 4, 5)
    assert (e.pending_tokens, e.cached_tokens, e.input_throughput_tok_s) == (9000, 1000, 1234.5)


def test_hybrid_swa_and_ssm_usage_fields():
    e = one("[2026-10-30 12:00:01] Decode batch, #running-req: 4, #full token: 1000, full token usage: 0.30, "
            "mamba num: 4, mamba usage: 0.05, cuda graph: True, gen throughput (token/s): 88.00, #queue-req: 1")
    assert (e.kv_tokens, e.token_usage, e.queue_reqs) == (1000, 0.3, 1)
    p = one("[2026-10-30 12:00:01] Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, full token usage: 0.30, "
            "mamba usage: 0.05, #running-req: 0, #queue-req: 0")
    assert (p.token_usage, p.mamba_usage) == (0.3, 0.05)


def test_pd_decode_group_label_fields():
    e = one("[2026-10-30 12:00:01 DP0 TP0] Decode batch, #running-req: 3, #token: 77, token usage: 0.01, "
            "PD-decode: pre-allocated usage: 0.02, #prealloc-req: 1, #transfer-req: 0, #retracted-req: 2, "
            "cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0")
    assert (e.retracted_reqs, e.kv_tokens, e.dp_rank) == (2, 77, 0)


def test_new_retraction_wording_with_tokens_gained():
    e = one("[2026-10-30 12:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
            "#new_tokens_gained: 4096, #new_token_ratio: 0.7000 -> 0.3512")
    assert (e.kind, e.num_retracted, e.new_tokens_gained, e.old_new_token_ratio, e.new_token_ratio) == (
        "retraction", 3, 4096, 0.7, 0.3512)


@pytest.mark.parametrize("prefix", [
    "sglang  | ",                                           # docker-compose
    "2026-10-30T12:00:05.123456789Z stdout F ",             # CRI (containerd) log file
    "sglang-0 sglang ",                                     # stern / kubectl logs --prefix style
    "\x1b[36msglang-1  |\x1b[0m ",                          # docker-compose with colours
])
def test_collector_prefixes_before_the_header(prefix: str):
    e = one(prefix + "[2026-10-30 12:00:01 TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
                     "gen throughput (token/s): 33.38, #queue-req: 0\r\n")
    assert (e.ts, e.running_reqs, e.kv_tokens, e.gen_throughput_tok_s) == (T0, 2, 27373, 33.38)


def test_lines_without_timestamp_inherit_the_last_one_and_time_only_rolls_over_midnight():
    ctx = ParseContext()
    one("[2026-10-30 23:59:59 TP0] Decode batch. #running-req: 1, #token: 5, token usage: 0.00, "
        "gen throughput (token/s): 1.00, #queue-req: 0", ctx)
    e = one("[gpu=0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, #running-req: 0, #queue-req: 0", ctx)
    assert e.ts == calendar.timegm((2026, 10, 30, 23, 59, 59, 0, 0, 0))  # inherited
    assert e.tp_rank == 0
    late = one("[23:59:58 TP0] Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, #running-req: 0, "
               "#queue-req: 0", ctx)
    after = one("[00:00:03 TP0] Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, #running-req: 0, "
                "#queue-req: 0", ctx)
    assert after.ts - late.ts == 5.0


@pytest.mark.parametrize("line", [
    "Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1999, in run_scheduler_process',
    'INFO:     127.0.0.1:45678 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-10-30 12:00:01 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.1 GB",
    "[2026-10-30 12:00:01] The server is fired up and ready to roll!",
    "    self.draft_worker.finish_request(retracted_reqs)",
    "",
    "\r",
])
def test_other_lines_are_skipped_quietly(line: str):
    assert not parse_line(line, ParseContext())


@pytest.mark.parametrize(("line", "reason"), [
    ("[2026-10-30 12:00:01 TP0] Prefill batch. #new-seq: x, #new-token: 7, #cached-token: 0, #running-req: 0, "
     "#queue-req: 0", "prefill_batch.new_seqs: Input should be a valid integer, unable to parse string as an integer, "
                    "got 'x'"),
    ("[2026-10-30 12:00:01 TP0] Prefill batch. #new-token: 7, #cached-token: 0", "prefill_batch: missing new_seqs"),
    ("[2026-10-30 12:00:01 TP0] Decode batch. #token: 5", "decode_batch: missing running_reqs"),
    ("[2026-10-30 12:00:01 TP0] Decode batch. #running-req: -3, #token: 5", "decode_batch.running_reqs: Input should be greater than or equal to 0, got '-3'"),
    ("[2026-10-30 12:00:01 TP0] Decode batch. #running-req: 3, gen throughput (token/s): nan",
     "decode_batch.gen_throughput_tok_s: Input should be a finite number, got 'nan'"),
    ("[2026-10-30 12:00:01 TP0] max_total_num_tokens=lots, max_prefill_tokens=1",
     "server_config: cannot read 'max_total_num_tokens' value 'lots'"),
    ("[2026-10-30 12:00:01 TP0] Decode out of memory happened. #retracted_reqs: many, #new_token_ratio: 1 -> 2",
     "retraction: not an integer: 'many'"),
])
def test_sglang_looking_lines_that_do_not_parse_give_a_reason(line: str, reason: str):
    res = parse_line(line, ParseContext())
    assert isinstance(res, str)
    assert res.startswith(reason), res


def test_startup_lines_of_each_era():
    e = one("[gpu_id=2] max_total_num_tokens=405784, max_prefill_tokens=65536, context_len=8192,")
    assert (e.tp_rank, e.max_total_num_tokens, e.max_prefill_tokens, e.context_len) == (2, 405784, 65536, 8192)
    e = one("[2026-10-30 12:00:01 TP1] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB")
    assert e.kv_cache_size_gb == pytest.approx(2.84) and e.tp_rank == 1
    e = one("[2026-10-30 12:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=2, dp_size=1, "
            "page_size=16, chunked_prefill_size=-1, schedule_policy='fcfs', mem_fraction_static=0.85, "
            "kv_cache_dtype='auto', disable_radix_cache=True, enable_mixed_chunk=False, cuda_graph_max_bs=None, "
            "json_model_override_args='{}', max_total_tokens=None)")
    assert (e.model, e.tp_size, e.page_size, e.chunked_prefill_size, e.schedule_policy) == (
        "Qwen/Qwen3-8B", 2, 16, -1, "fcfs")
    assert (e.mem_fraction_static, e.disable_radix_cache, e.enable_mixed_chunk, e.cuda_graph_max_bs) == (
        0.85, True, False, None)
    assert e.max_total_num_tokens is None


@pytest.mark.parametrize("text,fraction", [("12.50%", 0.125), ("0.35", 0.35)])
def test_cache_hit_rate_printed_as_a_percentage_becomes_a_fraction(text: str, fraction: float):
    # 0.1.x–0.3.x print "cache hit rate: 12.50%"; the event field is always a 0..1 fraction
    e = one(f"[gpu_id=0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 1, cache hit rate: {text}, "
            "#running-req: 0, #queue-req: 0")
    assert e.cache_hit_rate == pytest.approx(fraction)


def test_unreadable_cache_hit_rate_is_dead_lettered_with_the_value():
    res = parse_line("[gpu_id=0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 1, cache hit rate: lots%",
                     ParseContext())
    assert isinstance(res, str) and "cache hit rate" in res and "lots%" in res


# A collector that stamps each line with its own bracketed time in front of SGLang's header (issue 11): the
# second header is SGLang's (log_prefix.split_header), so its time and rank tags win over the collector's.
@pytest.mark.parametrize("prefix", ["[2026-10-30 12:00:09] ", "[2026-10-30 12:00:09.500] ", "sglang  | [2026-10-30 12:00:09] "])
def test_collector_double_timestamp_prefix(prefix):
    e = one(prefix + "[2026-10-30 12:00:01 TP3] Prefill batch. #new-seq: 2, #new-token: 4992, #cached-token: 128, "
            "token usage: 0.81, #running-req: 61, #queue-req: 3, ")
    assert (e.kind, e.ts, e.tp_rank) == ("prefill_batch", T0, 3)
    assert (e.new_seqs, e.new_tokens, e.running_reqs) == (2, 4992, 61)


def test_collector_double_timestamp_prefix_with_time_only_sglang_header():
    # 0.3-era SGLang header (time only) behind a dated collector stamp: the day comes from the collector's.
    e = one("[2026-10-30 12:00:09] [12:00:01 TP1] Decode batch. #running-req: 8, #token: 9000, token usage: 0.10, "
            "gen throughput (token/s): 321.50, #queue-req: 0, ")
    assert (e.kind, e.ts, e.tp_rank, e.running_reqs) == ("decode_batch", T0, 1, 8)


def test_collector_stamp_alone_still_times_the_line():
    e = one("[2026-10-30 12:00:01] Decode batch. #running-req: 8, #token: 9000, token usage: 0.10, "
            "gen throughput (token/s): 321.50, #queue-req: 0, ")
    assert (e.kind, e.ts) == ("decode_batch", T0)


@pytest.mark.parametrize("tags, dp_rank, tp_rank", [("DP5 TP²", 5, None), ("DP5 TP5", 5, 5), ("DP²5 TP1", None, 1)])
def test_rank_tags_with_a_superscript_digit_are_ignored_not_an_internal_error(tags, dp_rank, tp_rank):
    # '²'.isdigit() is True but int('²') raises: the tag reader stops at digits int() can read (str.isdecimal)
    e = one(f"[2026-10-30 12:00:01 {tags}] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
            "gen throughput (token/s): 1.0, #queue-req: 0, ")
    assert (e.kind, e.ts, e.dp_rank, e.tp_rank) == ("decode_batch", T0, dp_rank, tp_rank)


@pytest.mark.parametrize("stamp", ["12:00:01.²²²", "12:00:01,²", "12:00:01.x"])
def test_a_fraction_of_a_second_that_int_cannot_read_is_skipped_like_any_unreadable_header(stamp):
    # '²'.isdigit() is True but int('²') raises (an internal error before): the header reader takes str.isdecimal
    line = (f"[2026-10-30 {stamp} TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
            "gen throughput (token/s): 1.0, #queue-req: 0, ")
    assert not parse_line(line, ParseContext())
