"""SGLang's launch flags that shape the simulated server, as data: one table for every place that reads them.

``shadowsim predict`` / ``sweep`` build their "server flags" option group from :data:`SERVER_FLAGS`
(:func:`add_server_flags`), and a measurement file's ``server_args`` column (the flags exactly as typed on the
real server's command line, ``--enable-mixed-chunk --max-prefill-tokens 2524``) is parsed by
:func:`parse_server_args` with a parser built from the same table, so both accept the same flags with the same
types and turn them into the same :class:`simcore.settings.ServerSettings` fields (:func:`settings_fields`).

A few SGLang flags that do not change what is simulated (``--host``, ``--port``, ``--trust-remote-code``, ...)
are accepted in ``server_args`` and ignored (:data:`NO_EFFECT_FLAGS`); the TP flags must agree with the row's
``tp`` column. Any other flag, a missing or malformed value is a :class:`UserError` naming the flag.
"""
from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from simcore.errors import UserError
from simcore.settings import POLICIES


def _on_off_auto(value: str) -> bool | None:
    return {"on": True, "off": False}.get(value)


@dataclass(frozen=True)
class ServerFlag:
    """One command-line flag: its name, the ServerSettings field it sets, and how argparse reads it.

    ``kind``: ``int``/``float``/``str`` (one value), ``"switch"`` (store_true), ``"ints"`` (one or more ints →
    tuple). ``sglang``: False for shadowsim's own options that are not SGLang launch flags (environment knobs,
    the version), which ``server_args`` refuses. ``convert`` maps the parsed value to the field's value.
    """

    flag: str
    field: str
    kind: Any
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    sglang: bool = True
    convert: Callable[[Any], Any] | None = None
    # a modelling assumption of ours that a measurement file's server_args may state next to the real flags
    # (what the real server's behaviour was, e.g. its acceptance length), although SGLang has no such flag
    assumption: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


SERVER_FLAGS: tuple[ServerFlag, ...] = (
    ServerFlag("--sglang-version", "sglang_version", str, "version whose scheduler rules apply (default 0.5.9)",
               "0.5.9", sglang=False),
    ServerFlag("--schedule-policy", "schedule_policy", str, "queue policy (default: fcfs)", choices=POLICIES),
    ServerFlag("--schedule-conservativeness", "schedule_conservativeness", float,
               "scale of the new-token reservation ratio (default 1.0)", 1.0),
    ServerFlag("--chunked-prefill-size", "chunked_prefill_size", int,
               "tokens per prefill chunk; -1 disables chunking (default: by GPU memory)"),
    ServerFlag("--max-prefill-tokens", "max_prefill_tokens", int, "prefill token budget per batch", 16384),
    ServerFlag("--max-running-requests", "max_running_requests", int, "cap on running requests"),
    ServerFlag("--max-total-tokens", "max_total_tokens", int,
               "KV pool size in tokens; overrides the sizing from GPU memory (1000000000 = unlimited cache)"),
    ServerFlag("--mem-fraction-static", "mem_fraction_static", float, "weights+KV share of GPU memory"),
    ServerFlag("--ep-size", "ep_size", int,
               "expert parallelism: MoE experts split over this many of the TP ranks, each expert tp/ep-way "
               "tensor parallel (default 1; docs/accuracy.md 3.10)", 1),
    ServerFlag("--moe-a2a-backend", "moe_a2a_backend", str,
               "MoE all-to-all: none (all-reduce after the experts) or deepep (dispatch/combine; sets ep = tp)",
               "none", choices=("none", "deepep")),
    ServerFlag("--dp-size", "dp_size", int,
               "data-parallel size; with --enable-dp-attention the number of attention-DP ranks inside the server, "
               "each a scheduler with its own KV pool, stepping in lockstep (simcore/dp_attention.py)", 1),
    ServerFlag("--enable-dp-attention", "enable_dp_attention", "switch",
               "attention data-parallel over --dp-size ranks (tp/dp-way attention TP each), MLP/MoE over the whole "
               "TP group on the tokens of every rank; needs --dp-size > 1 dividing the TP size (SGLang turns it "
               "off at --dp-size 1)", False),
    ServerFlag("--load-balance-method", "load_balance_method", str,
               "how the data-parallel controller spreads requests over the DP ranks (default round_robin, as "
               "SGLang 0.5.9's auto)", "round_robin", choices=("round_robin", "total_requests", "total_tokens")),
    ServerFlag("--speculative-algorithm", "speculative_algorithm", str,
               "speculative decoding: EAGLE, EAGLE3 or NEXTN (DeepSeek's MTP layer; MTP is an alias): draft steps "
               "+ one verify pass per decode iteration, several tokens per request per step; forces the overlap "
               "scheduler and mixed chunk off and max running requests 48 unless given (SGLang 0.5.9; "
               "simcore/speculative.py)", choices=("EAGLE", "EAGLE3", "NEXTN", "MTP")),
    ServerFlag("--speculative-num-steps", "speculative_num_steps", int,
               "draft steps per iteration (default: 3, Llama 5, as SGLang's auto choice)"),
    ServerFlag("--speculative-eagle-topk", "speculative_eagle_topk", int,
               "draft branches per step (default 1; Llama 4)"),
    ServerFlag("--speculative-num-draft-tokens", "speculative_num_draft_tokens", int,
               "tokens verified per request per iteration (num-steps + 1 when topk is 1)"),
    ServerFlag("--speculative-draft-model-path", "speculative_draft_model_path", str,
               "the draft model (priced as one decoder layer of the target's shape with its LM head)"),
    ServerFlag("--speculative-accept-length", "speculative_accept_length", float,
               "shadowsim's assumption, not an SGLang flag: mean accepted tokens per request per verify pass, "
               "bonus token included (SGLang's logged 'accept len'); drawn per request and step from the chain "
               "distribution with this mean (default: each draft token accepted with probability 0.7)",
               sglang=False, assumption=True),
    ServerFlag("--page-size", "page_size", int, "KV page size in tokens (default 1)", 1),
    ServerFlag("--kv-cache-dtype", "kv_cache_dtype", str, "auto (model dtype), fp8_e4m3, fp8_e5m2", "auto"),
    ServerFlag("--swa-full-tokens-ratio", "swa_full_tokens_ratio", float,
               "SWA-layer KV tokens per full-layer KV token, hybrid sliding-window models (default 0.8)", 0.8),
    ServerFlag("--disable-hybrid-swa-memory", "disable_hybrid_swa_memory", "switch",
               "one KV pool for every layer of a sliding-window model", False),
    ServerFlag("--context-length", "context_length", int, "model context length override"),
    ServerFlag("--disable-overlap-schedule", "disable_overlap_schedule", "switch", "CPU and GPU work in series", False),
    ServerFlag("--enable-mixed-chunk", "enable_mixed_chunk", "switch", "decode rows ride along prefill chunks", False),
    ServerFlag("--disable-radix-cache", "disable_radix_cache", "switch", "no prefix caching", False),
    ServerFlag("--disable-cuda-graph", "disable_cuda_graph", "switch", "decode runs eagerly", False),
    ServerFlag("--cuda-graph-max-bs", "cuda_graph_max_bs", int, "largest captured decode batch"),
    ServerFlag("--cuda-graph-bs", "cuda_graph_bs", "ints",
               "the captured decode batch sizes, e.g. 1 2 4 8 (default: SGLang's list up to --cuda-graph-max-bs)",
               convert=lambda v: None if v is None else tuple(sorted(set(v)))),
    ServerFlag("--disable-cuda-graph-padding", "disable_cuda_graph_padding", "switch",
               "capture every batch size up to the largest (no padding)", False),
    ServerFlag("--scheduler-recv-interval", "scheduler_recv_interval", int,
               "poll for new requests every N decode steps (any other step: at the next pass; default 1)", 1),
    ServerFlag("--stream-interval", "stream_interval", int, "decode steps per streamed chunk (default 1)", 1),
    ServerFlag("--prefill-max-requests", "prefill_max_requests", int,
               "cap on requests admitted into one prefill batch (default: none)"),
    ServerFlag("--enable-priority-scheduling", "enable_priority_scheduling", "switch",
               "order the queue by request priority (trace field 'priority'; fcfs or lof only); by default a "
               "running request is preempted by a waiting one more than "
               "--priority-scheduling-preemption-threshold more urgent when the batch is full", False),
    ServerFlag("--schedule-low-priority-values-first", "schedule_low_priority_values_first", "switch",
               "with priority scheduling: smaller priority values are more urgent (default: larger)", False),
    ServerFlag("--priority-scheduling-preemption-threshold", "priority_scheduling_preemption_threshold", int,
               "priority difference a waiting request needs to preempt a running one (default 10)", 10),
    ServerFlag("--disable-priority-preemption", "disable_priority_preemption", "switch",
               "with priority scheduling: reorder the queue only, never preempt", False),
    ServerFlag("--waiting-prefix-refresh", "enable_waiting_prefix_refresh", str,
               "SGLANG_ENABLE_WAITING_PREFIX_REFRESH: under fcfs/lof/random, refresh the LRU stamps of the waiting "
               "requests' cached prefixes every 32 passes (auto: as the version does, i.e. on for 0.5.23, absent "
               "in 0.5.9 and 0.4)", "auto", choices=("auto", "on", "off"), sglang=False, convert=_on_off_auto),
)
BY_DEST: dict[str, ServerFlag] = {f.dest: f for f in SERVER_FLAGS}

# SGLang launch flags accepted in ``server_args`` that change nothing the simulator models (where the server
# listens, how it loads and names the model, logging, metrics). Value-taking ones consume one value.
NO_EFFECT_FLAGS: dict[str, bool] = {  # flag -> takes a value
    "--host": True, "--port": True, "--model-path": True, "--model": True, "--tokenizer-path": True,
    "--served-model-name": True, "--log-level": True, "--trust-remote-code": False, "--enable-metrics": False,
    "--skip-server-warmup": False, "--random-seed": True, "--download-dir": True, "--revision": True,
}
# SGLang launch flags accepted in ``server_args`` whose effect the simulator does NOT price (documented, not
# hidden: docs/accuracy.md §3.11). ``--enable-torch-compile`` compiles the decode CUDA graphs of batch sizes up to
# ``--torch-compile-max-bs`` (32; sglang 0.4.0.post1 model_executor/cuda_graph_runner.py ``compile_bs``): fused
# element-wise kernels at small decode batches, nothing else.
UNPRICED_FLAGS: dict[str, bool] = {"--enable-torch-compile": False, "--torch-compile-max-bs": True}
# SGLang parses its flags with argparse's default ``allow_abbrev=True``, so a unique prefix is the flag (typed in
# public launch commands, e.g. ``--mem-frac 0.87``). Only prefixes seen in measurement files are listed: shadowsim
# knows a subset of SGLang's flags and cannot check that any other prefix is unique among all of them.
SGLANG_ABBREVIATIONS: dict[str, str] = {"--mem-frac": "--mem-fraction-static", "--dp": "--dp-size"}
# TP flags: must agree with the measurement row's ``tp`` column (the simulator takes TP from there)
TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")


def add_server_flags(group: Any, add: Callable[..., None] | None = None, *, defaults: bool = True,
                     sglang_only: bool = False) -> None:
    """Add the table's flags to an argparse parser or group. ``add(group, flag, **kw)`` (optional) replaces
    ``group.add_argument`` (``sweep`` turns some options into lists); ``defaults=False`` leaves flags that are not
    given out of the namespace; ``sglang_only`` leaves out shadowsim's own options."""
    for f in SERVER_FLAGS:
        if sglang_only and not f.sglang and not f.assumption:
            continue
        kw: dict[str, Any] = {"help": f.help}
        if f.default not in (None, False) and "default" not in f.help.lower():
            kw["help"] = f"{f.help} (default {f.default})"
        if f.kind == "switch":
            kw["action"] = "store_true"
        elif f.kind == "ints":
            kw.update(type=int, nargs="+", metavar="BS")
        else:
            kw["type"] = f.kind
        if f.choices is not None:
            kw["choices"] = f.choices
        if defaults:
            kw["default"] = f.default
        else:
            kw["default"] = argparse.SUPPRESS
        if add is not None and f.kind != "switch" and f.kind != "ints":
            add(group, f.flag, **kw)
        else:
            group.add_argument(f.flag, **kw)


def settings_fields(namespace: Any, *, skip: Sequence[str] = ()) -> dict[str, Any]:
    """ServerSettings keyword arguments from a namespace (or mapping) holding the table's dests: one entry per
    flag present (a namespace built with ``defaults=False`` holds only the given ones), converted."""
    values = namespace if isinstance(namespace, Mapping) else vars(namespace)
    out: dict[str, Any] = {}
    for dest, f in BY_DEST.items():
        if dest in values and f.field not in skip:
            v = values[dest]
            out[f.field] = f.convert(v) if f.convert is not None else v
    return out


class _RaisingParser(argparse.ArgumentParser):
    def __init__(self, source: str) -> None:
        super().__init__(prog="server_args", add_help=False, allow_abbrev=False, exit_on_error=False)
        self.source = source

    def error(self, message: str) -> Any:  # argparse would print and exit
        raise UserError("server_args", f"{self.source}: {message}",
                        "use SGLang's flag names; `shadowsim predict --help` lists the ones shadowsim models")


def parse_server_args(text: str | None, source: str = "server_args", *, tp: int | None = None) -> dict[str, Any]:
    """ServerSettings keyword arguments for SGLang launch flags as typed (``--enable-mixed-chunk
    --max-prefill-tokens 2524``): only the flags given. ``source`` names the row in errors; ``tp`` (the row's
    column) is checked against a TP flag. Blank text → {}."""
    if text is None or not text.strip():
        return {}
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise UserError("server_args", f"{source}: cannot split {text!r} into flags ({exc})",
                        "quote values as on a shell command line") from None
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, has_eq, value = tok.partition("=")
        if name in SGLANG_ABBREVIATIONS:
            name = SGLANG_ABBREVIATIONS[name]
            tok = name + (("=" + value) if has_eq else "")
        if name in NO_EFFECT_FLAGS or name in UNPRICED_FLAGS or name in TP_FLAGS:
            takes = NO_EFFECT_FLAGS.get(name, UNPRICED_FLAGS.get(name, True))
            if takes and not has_eq:
                if i + 1 >= len(tokens) or tokens[i + 1].startswith("--"):
                    raise UserError("server_args", f"{source}: argument {name}: expected one argument")
                value = tokens[i + 1]
                i += 1
            if name in TP_FLAGS:
                try:
                    given = int(value)
                except ValueError:
                    raise UserError("server_args", f"{source}: argument {name}: invalid int value: {value!r}") \
                        from None
                if tp is not None and given != tp:
                    raise UserError("server_args", f"{source}: {name} {given} disagrees with the row's tp {tp}",
                                    "make the tp column and the flag the same")
            i += 1
            continue
        flag = BY_DEST.get(name.lstrip("-").replace("-", "_"))
        if name.startswith("--") and flag is not None and not flag.sglang and not flag.assumption:
            raise UserError("server_args", f"{source}: {name} is not an SGLang launch flag",
                            "give the version in the sglang_version column; environment knobs are not flags")
        kept.append(tok)
        i += 1
    parser = _RaisingParser(source)
    add_server_flags(parser, defaults=False, sglang_only=True)
    try:
        ns, extra = parser.parse_known_args(kept)
    except argparse.ArgumentError as exc:
        raise UserError("server_args", f"{source}: {exc}",
                        "use SGLang's flag names; `shadowsim predict --help` lists the ones shadowsim models") \
            from None
    if extra:
        what = "unknown flag" if extra[0].startswith("-") else "unexpected value"
        raise UserError("server_args", f"{source}: {what} {extra[0]!r}",
                        "use SGLang's flag names; `shadowsim predict --help` lists the ones shadowsim models")
    return settings_fields(ns)
