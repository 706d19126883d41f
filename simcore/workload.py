"""Workloads as SimPy processes: closed loop, open loop (Poisson/gamma) and trace replay.

A workload submits :class:`RequestSpec` objects to a *server*: any object with ``submit(req) -> simpy.Event``
whose event succeeds when the request finishes. ``arrival_s`` of each submitted spec is the simulation time at
submission. Randomness comes only from the injected seed (a ``numpy.random.Generator`` is built from it), and
all lengths are drawn up front in a fixed order, so the same seed gives the same requests whatever the timing.
Request ids are ``<prefix><index>``.

Also here: :func:`prefix_reuse_ceiling`, the best cache hit rate any cache could reach on a request list.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Protocol, Sequence, Union

from simcore._simpy import simpy

from simcore.errors import UserError
from simcore.request import RequestSpec
from simcore.values import FrozenValue

if TYPE_CHECKING:
    import numpy as np


class Server(Protocol):
    def submit(self, req: RequestSpec) -> simpy.Event: ...


# ---- length distributions ------------------------------------------------------------------------------------
class Uniform(FrozenValue):
    """Integers uniform in ``[low, high]`` (both inclusive)."""

    __slots__ = ("low", "high")
    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"Uniform needs 1 <= low <= high, got {self.low}, {self.high}")

    def sample(self, rng: np.random.Generator, n: int) -> list[int]:
        return [int(x) for x in rng.integers(self.low, self.high + 1, size=n)]


class Empirical(FrozenValue):
    """Draw with replacement from observed values (e.g. a trace's lengths)."""

    __slots__ = ("values",)
    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values or min(self.values) < 1:
            raise ValueError("Empirical needs a non-empty list of lengths >= 1")

    def sample(self, rng: np.random.Generator, n: int) -> list[int]:
        idx = rng.integers(0, len(self.values), size=n)
        return [self.values[int(i)] for i in idx]


Lengths = Union[int, Uniform, Empirical]


def bench_random(length: int, range_ratio: float) -> Lengths:
    """bench_serving's ``--random-input-len/--random-output-len`` with ``--random-range-ratio``."""
    if range_ratio >= 1.0:
        return length
    return Uniform(max(1, int(length * range_ratio)), length)


def _draw(spec: Lengths, rng: np.random.Generator, n: int) -> list[int]:
    if isinstance(spec, int):
        if spec < 1:
            raise ValueError(f"length must be >= 1, got {spec}")
        return [spec] * n
    return spec.sample(rng, n)


class _Template:
    """One synthetic request's drawn lengths and key (a plain class: start-up, see simcore/values.py)."""

    __slots__ = ("input_len", "output_len", "key")

    def __init__(self, input_len: int, output_len: int, key: tuple[int, ...] | None) -> None:
        self.input_len = input_len
        self.output_len = output_len
        self.key = key


def _templates(num_requests: int, input_len: Lengths, output_len: Lengths, seed: int,
               shared_prefix_len: int) -> list[_Template]:
    """Draw every request's lengths (inputs first, then outputs) and build keys.

    With ``shared_prefix_len`` > 0 every prompt starts with the same ``shared_prefix_len`` token ids (a system
    prompt) followed by ids unique to the request; otherwise prompts are random (key None, nothing matches).
    """
    import numpy as np  # start-up: only synthetic workloads draw
    rng = np.random.default_rng(seed)
    ins = _draw(input_len, rng, num_requests)
    outs = _draw(output_len, rng, num_requests)
    out: list[_Template] = []
    next_id = 1 << 30  # unique ids live far above any shared-prefix id
    for i, o in zip(ins, outs):
        key = None
        if shared_prefix_len > 0:
            shared = min(shared_prefix_len, i)
            key = tuple(range(shared)) + tuple(range(next_id, next_id + i - shared))
            next_id += i - shared
        out.append(_Template(i, o, key))
    return out


# ---- workloads ------------------------------------------------------------------------------------------------
class _Workload:
    def __init__(self, rid_prefix: str) -> None:
        self.rid_prefix = rid_prefix
        self.submitted: list[RequestSpec] = []
        self.finished = 0

    def _spec(self, env: simpy.Environment, i: int, t: _Template, max_new: int | None,
              ignore_eos: bool) -> RequestSpec:
        spec = RequestSpec(f"{self.rid_prefix}{i}", float(env.now), t.input_len, t.output_len,
                           t.output_len if max_new is None else max_new, t.key, 1, ignore_eos)
        self.submitted.append(spec)
        return spec

    def _done(self, _event: simpy.Event) -> None:
        self.finished += 1

    def _watch(self, ev: simpy.Event) -> None:
        if ev.callbacks is None:  # already processed by the server
            self.finished += 1
        else:
            ev.callbacks.append(self._done)


class ClosedLoop(_Workload):
    """``concurrency`` clients; each sends its next request when the previous one finishes (bench_serving
    ``--max-concurrency`` with ``--request-rate inf``). All clients start at once.

    ``max_new_tokens`` None means "= output_len" (bench_serving sets ``max_tokens`` to the drawn output length);
    ``ignore_eos`` True as bench_serving's default.
    """

    def __init__(self, concurrency: int, num_requests: int, input_len: Lengths, output_len: Lengths, seed: int = 0,
                 *, max_new_tokens: int | None = None, ignore_eos: bool = True, shared_prefix_len: int = 0,
                 rid_prefix: str = "req-") -> None:
        super().__init__(rid_prefix)
        if concurrency < 1 or num_requests < 0:
            raise ValueError("concurrency must be >= 1 and num_requests >= 0")
        self.concurrency = concurrency
        self.templates = _templates(num_requests, input_len, output_len, seed, shared_prefix_len)
        self.max_new_tokens = max_new_tokens
        self.ignore_eos = ignore_eos
        self._next = 0

    def _client(self, env: simpy.Environment, server: Server):  # type: ignore[no-untyped-def]
        while self._next < len(self.templates):
            i = self._next
            self._next += 1
            ev = server.submit(self._spec(env, i, self.templates[i], self.max_new_tokens, self.ignore_eos))
            yield ev
            self.finished += 1

    def start(self, env: simpy.Environment, server: Server) -> list[simpy.Process]:
        return [env.process(self._client(env, server)) for _ in range(min(self.concurrency, len(self.templates)))]


class OpenLoop(_Workload):
    """Requests at ``rate_per_s`` with gamma inter-arrival times (``burstiness`` 1.0 = Poisson), as bench_serving:
    the first request goes out at start, then one after each drawn interval. Arrivals never wait for completions.
    """

    def __init__(self, rate_per_s: float, num_requests: int, input_len: Lengths, output_len: Lengths,
                 seed: int = 0, *, burstiness: float = 1.0, max_new_tokens: int | None = None,
                 ignore_eos: bool = True, shared_prefix_len: int = 0, rid_prefix: str = "req-") -> None:
        super().__init__(rid_prefix)
        if not rate_per_s > 0 or not burstiness > 0:
            raise ValueError("rate_per_s and burstiness must be > 0")
        self.templates = _templates(num_requests, input_len, output_len, seed, shared_prefix_len)
        # intervals come from their own stream so lengths do not depend on the rate
        import numpy as np
        rng = np.random.default_rng([seed, 1])
        gaps = rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), size=max(0, num_requests - 1))
        self.offsets_s = [0.0] + [float(x) for x in np.cumsum(gaps)]
        self.max_new_tokens = max_new_tokens
        self.ignore_eos = ignore_eos

    def _run(self, env: simpy.Environment, server: Server):  # type: ignore[no-untyped-def]
        start = env.now
        for i, t in enumerate(self.templates):
            delay = start + self.offsets_s[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            self._watch(server.submit(self._spec(env, i, t, self.max_new_tokens, self.ignore_eos)))

    def planned_arrivals(self, start_s: float) -> list[tuple[float, RequestSpec]]:
        """(submission time, spec) of everything :meth:`start` would submit, at the very float times it would
        (arrivals do not depend on completions), so a caller may hand them to the server up front
        (``simcore.engine.simulate``)."""
        out, now = [], start_s
        for i, t in enumerate(self.templates):
            delay = start_s + self.offsets_s[i] - now
            if delay > 0:
                now = now + delay  # what env.timeout(delay) advances the clock to
            out.append((now, RequestSpec(f"{self.rid_prefix}{i}", float(now), t.input_len, t.output_len,
                                         t.output_len if self.max_new_tokens is None else self.max_new_tokens,
                                         t.key, 1, self.ignore_eos)))
        return out

    def start(self, env: simpy.Environment, server: Server) -> simpy.Process:
        return env.process(self._run(env, server))


class TraceReplay(_Workload):
    """Replay requests at their recorded times. ``time_scale`` = simulated seconds per trace second (2.0 plays
    the trace at half speed). The first request goes out at start; specs keep their rid, key and lengths."""

    def __init__(self, requests: Sequence[RequestSpec], time_scale: float = 1.0) -> None:
        super().__init__("")
        if not time_scale > 0:
            raise ValueError("time_scale must be > 0")
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        self.time_scale = time_scale

    def _run(self, env: simpy.Environment, server: Server):  # type: ignore[no-untyped-def]
        if not self.requests:
            return
        start, t0 = env.now, self.requests[0].arrival_s
        for r in self.requests:
            delay = start + (r.arrival_s - t0) * self.time_scale - env.now
            if delay > 0:
                yield env.timeout(delay)
            spec = r.with_arrival(float(env.now))  # = dataclasses.replace(r, arrival_s=...)
            self.submitted.append(spec)
            self._watch(server.submit(spec))

    def planned_arrivals(self, start_s: float) -> list[tuple[float, RequestSpec]]:
        """(submission time, spec) of everything :meth:`start` would submit (see OpenLoop)."""
        if not self.requests:
            return []
        out, now, t0 = [], start_s, self.requests[0].arrival_s
        for r in self.requests:
            delay = start_s + (r.arrival_s - t0) * self.time_scale - now
            if delay > 0:
                now = now + delay
            at = float(now)
            out.append((at, r if r.arrival_s == at else r.with_arrival(at)))
        return out

    def start(self, env: simpy.Environment, server: Server) -> simpy.Process:
        return env.process(self._run(env, server))


# ---- analysis -----------------------------------------------------------------------------------------------
def common_key_unit(requests: Iterable[RequestSpec]) -> int:
    """The ``key_unit`` every keyed request shares (1 when none has a key): what to build the KVCache with.

    Raises UserError when a workload mixes block sizes (one cache cannot match both).
    """
    units = {r.key_unit for r in requests if r.key is not None}
    if len(units) > 1:
        raise UserError("key_unit", f"requests mix prefix-key block sizes {sorted(units)}",
                        "use one block size (or token ids) for the whole workload")
    return units.pop() if units else 1


def prefix_reuse_ceiling(requests: Iterable[RequestSpec]) -> float:
    """Prefix-reuse ceiling: the hit rate an infinite cache would report, in [0, 1].

    In arrival order, each request's reusable prefix is its leading key elements already seen in earlier
    requests, × ``key_unit`` tokens, capped at ``input_len - 1`` (SGLang always recomputes one token); the sum
    over all prompt tokens. Block keys use the set of seen block hashes (a hash names its whole prefix, so a
    leading run of seen hashes is a cached path); token-id keys use exact longest-prefix matching. Requests
    without a key reuse nothing.
    """
    from simcore.radix_cache import RadixCache  # local: only token-id keys need a tree

    seen: set[int] = set()
    tree = RadixCache()
    reused = total = 0
    for r in sorted(requests, key=lambda q: q.arrival_s):
        total += r.input_len
        if r.key is None:
            continue
        if r.key_unit > 1:
            k = 0
            for h in r.key:
                if h not in seen:
                    break
                k += 1
            reused += min(k * r.key_unit, r.input_len - 1)
            seen.update(r.key)
        else:
            reused += tree.match_prefix(r.key, r.input_len - 1, 0.0).prefix_len
            tree.insert(r.key, len(r.key), 0.0)
    return reused / total if total else 0.0
