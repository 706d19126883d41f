"""Workload builders of the Python API: closed and open loops, trace files and named scenario mixes.

Each builder returns a small frozen description (picklable, so sweeps can ship it to worker processes); the
simulation draws the actual requests from it with the run's seed, so ``replicas=`` re-draws them with
successive seeds. A description is plain data: ``shadowsim.predict(model=..., gpu=..., workload=w)``.

>>> w = closed_loop(concurrency=8, num_requests=64, input_len=512, output_len=64)
>>> w.flags()["concurrency"]
8
>>> sorted(SCENARIOS)[:2]
['chat', 'code-completion']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcore.errors import UserError


@dataclass(frozen=True, slots=True)
class RequestClass:
    """One kind of request in a scenario mix: its share of the requests and its token-length ranges (uniform,
    both ends inclusive)."""

    name: str
    fraction: float
    input_len: tuple[int, int]
    output_len: tuple[int, int]

    def __post_init__(self) -> None:
        for what, (low, high) in (("input_len", self.input_len), ("output_len", self.output_len)):
            if not 1 <= low <= high:
                raise UserError(f"scenario class {self.name!r}", f"{what} range {low}-{high} is empty or < 1",
                                "give (low, high) with 1 <= low <= high")
        if not 0 < self.fraction <= 1:
            raise UserError(f"scenario class {self.name!r}", f"fraction {self.fraction} is not in (0, 1]",
                            "give the share of requests, e.g. 0.8")


# Named mixes (lengths in tokens). Ranges follow the public workload studies the project reads: ShareGPT-like
# chat turns (a few hundred tokens each way), Azure's 2023 code trace (long prompts, short completions) and
# long-form generation (short prompt, thousands of output tokens).
SCENARIOS: dict[str, tuple[RequestClass, ...]] = {
    "chat": (RequestClass("question", 1.0, (64, 1024), (32, 512)),),
    "qa-80-longgen-20": (RequestClass("short question", 0.8, (64, 512), (32, 256)),
                         RequestClass("long generation", 0.2, (256, 1024), (1024, 4096))),
    "rag": (RequestClass("retrieval-augmented question", 1.0, (2048, 8192), (64, 512)),),
    "code-completion": (RequestClass("completion", 0.9, (1024, 4096), (8, 128)),
                        RequestClass("chat about code", 0.1, (512, 2048), (256, 1024))),
}


@dataclass(frozen=True, slots=True)
class Workload:
    """What to simulate: the CLI's workload flags (``concurrency``, ``request_rate``, ``num_requests``,
    ``input_len``, ``output_len``, ``trace``, ...) and, for scenarios, the request classes of the mix."""

    settings: tuple[tuple[str, Any], ...]
    classes: tuple[RequestClass, ...] = field(default=())
    mix_name: str | None = None

    def flags(self) -> dict[str, Any]:
        return dict(self.settings)

    def describe(self) -> str:
        f = self.flags()
        if f.get("trace"):
            return f"trace {Path(str(f['trace'])).name}"
        load = (f"{f['concurrency']} clients" if f.get("concurrency") is not None
                else f"{f['request_rate']} req/s")
        what = f"mix {self.mix_name}" if self.mix_name else f"{f.get('input_len')}/{f.get('output_len')} tokens"
        return f"{load}, {what}"


def _positive(name: str, value: float | int | None) -> None:
    if value is not None and not value > 0:
        raise UserError(name, f"must be > 0, got {value}", "give a positive number")


def closed_loop(concurrency: int, num_requests: int | None = None, input_len: int = 1024, output_len: int = 128,
                *, random_range_ratio: float = 1.0, shared_prefix_len: int = 0) -> Workload:
    """``concurrency`` clients sending back-to-back requests (bench_serving ``--max-concurrency``).
    ``num_requests`` defaults to 10 × concurrency."""
    for n, v in (("concurrency", concurrency), ("num_requests", num_requests), ("input_len", input_len),
                 ("output_len", output_len)):
        _positive(n, v)
    return Workload((("concurrency", concurrency), ("num_requests", num_requests), ("input_len", input_len),
                     ("output_len", output_len), ("random_range_ratio", random_range_ratio),
                     ("shared_prefix_len", shared_prefix_len)))


def open_loop(request_rate: float, num_requests: int = 200, input_len: int = 1024, output_len: int = 128,
              *, random_range_ratio: float = 1.0, shared_prefix_len: int = 0) -> Workload:
    """Poisson arrivals at ``request_rate`` requests/s (bench_serving ``--request-rate``)."""
    for n, v in (("request_rate", request_rate), ("num_requests", num_requests), ("input_len", input_len),
                 ("output_len", output_len)):
        _positive(n, v)
    return Workload((("request_rate", request_rate), ("num_requests", num_requests), ("input_len", input_len),
                     ("output_len", output_len), ("random_range_ratio", random_range_ratio),
                     ("shared_prefix_len", shared_prefix_len)))


def from_trace(path: str | Path, trace_format: str = "auto", *, limit: int | None = None,
               time_scale: float = 1.0) -> Workload:
    """Replay a trace file (Mooncake, Azure, ShareGPT-style or shadowsim's native JSONL) at its own times;
    ``time_scale`` = simulated seconds per trace second."""
    _positive("time_scale", time_scale)
    _positive("limit", limit)
    return Workload((("trace", str(path)), ("trace_format", trace_format), ("trace_limit", limit),
                     ("time_scale", time_scale)))


def scenario(mix: str | dict[str, tuple[float, tuple[int, int], tuple[int, int]]], *,
             request_rate: float | None = None, concurrency: int | None = None,
             num_requests: int = 200) -> Workload:
    """A named mix from ``SCENARIOS`` (e.g. ``"qa-80-longgen-20"``: 80 % short questions, 20 % long
    generations), or your own ``{class name: (fraction, (in_low, in_high), (out_low, out_high))}``; open loop at
    ``request_rate`` or closed loop with ``concurrency`` clients. Classes are drawn per request in proportion
    to their fractions (which must add up to 1)."""
    if isinstance(mix, str):
        if mix not in SCENARIOS:
            raise UserError("--scenario", f"unknown mix {mix!r}", f"use one of {', '.join(sorted(SCENARIOS))}")
        classes, name = SCENARIOS[mix], mix
    else:
        classes = tuple(RequestClass(k, float(fr), tuple(i), tuple(o)) for k, (fr, i, o) in mix.items())  # type: ignore[arg-type]
        name = "custom"
    if not classes or abs(sum(c.fraction for c in classes) - 1.0) > 1e-6:
        raise UserError("--scenario", "class fractions must add up to 1", "e.g. 0.8 and 0.2")
    if (request_rate is None) == (concurrency is None):
        raise UserError("--scenario", "give exactly one of request_rate or concurrency",
                        "open loop: request_rate=R; closed loop: concurrency=N")
    _positive("request_rate", request_rate)
    _positive("concurrency", concurrency)
    _positive("num_requests", num_requests)
    return Workload((("request_rate", request_rate), ("concurrency", concurrency), ("num_requests", num_requests)),
                    classes, name)


def mix_templates(classes: tuple[RequestClass, ...], num_requests: int, seed: int) -> list[Any]:
    """The per-request (input, output) lengths of a mix, drawn with ``seed``: class first, then lengths."""
    import numpy as np

    from simcore.workload import _Template  # the loops' own request template (lengths + cache key)

    rng = np.random.default_rng([seed, 7])
    fractions = np.array([c.fraction for c in classes])
    picks = rng.choice(len(classes), size=num_requests, p=fractions / fractions.sum())
    out = []
    for k in picks:
        c = classes[int(k)]
        out.append(_Template(int(rng.integers(c.input_len[0], c.input_len[1] + 1)),
                             int(rng.integers(c.output_len[0], c.output_len[1] + 1)), None))
    return out
