"""The benchmark clients that produced the measurements, as they really run (docs/accuracy.md §3.1).

**aiperf, closed loop** (:class:`AiperfClosedLoop`; aiconfigurator's generated ``bench_run.sh``: ``aiperf profile
--concurrency C --warmup-request-count 2C --num-requests 20C``). aiperf runs its phases one after another
(ai-dynamo/aiperf ``src/aiperf/timing/phase_orchestrator.py``, ``PhaseOrchestrator._execute_phases``: "runner.run()
returns ... after all returns complete for non-seamless/final phases"); a phase is non-seamless unless configured
(``src/aiperf/timing/config.py``, ``CreditPhaseConfig.seamless = False``), and an excluded warm-up phase's grace
period is infinite "to ensure all in-flight requests complete before the next phase begins"
(``_build_credit_phase_config``). So: C clients send the warm-up requests back to back; when the last warm-up
response has arrived the server is idle, and then all C profiling clients fire together.

**SGLang's bench_serving, open loop** (:class:`BenchServingOpenLoop`; ``python -m sglang.bench_serving
--dataset-name random --request-rate R --num-prompts N --random-input-len I --random-output-len O
--random-range-ratio r --seed S``). Lengths come from numpy's global legacy generator seeded with ``--seed``
(``np.random.seed(args.seed)``), inputs first, then outputs (``sample_random_requests``):

- input: ``randint(max(int(I·r), 1), I + 1)`` in every version read (0.4.6, 0.4.10, 0.5.3, 0.5.6, 0.5.8, 0.5.9);
- output: ``randint(int(O·r), O + 1)`` up to 0.5.6 (an output of 0 tokens is possible: simulated as 1, the
  server still runs the prefill), ``randint(max(int(O·r), 1), O + 1)`` from 0.5.8 (``compute_random_lens``);
  0.5.7 was not read and follows the older rule;
- ``--random-range-ratio`` defaults to 0.0 (lengths uniform in [1, I]); ``--seed`` to 1;
- warm-up (optional, ``warmup_requests``): InferenceX's fork of vLLM's benchmark_serving
  (SemiAnalysisAI/InferenceX ``utils/bench_serving/benchmark_serving.py``, ``--num-warmups``, which its
  ``benchmark_lib.sh`` sets to 2 × max concurrency) sends that many copies of the first sampled request
  (``test_input = input_requests[0]``) under the ``--max-concurrency`` semaphore and awaits them all
  (``asyncio.gather``) before the measured run starts: a barrier, as aiperf's. SGLang's own bench_serving
  warms up with one request (not simulated: 0 by default);
- arrivals: the first request at once, then ``np.random.exponential(1 / R)`` seconds after each (``get_request``),
  from the same generator after the lengths (the same sequence as the real run when nothing else drew from it in
  between); ``R = inf`` sends everything at once; ``--max-concurrency`` limits requests in flight (a request
  waits for a slot after its arrival time).

Both number requests in sending order (``rid_prefix`` + index); aiperf's warm-up requests are the first ones.
"""
from __future__ import annotations

import math

import numpy as np
from simcore._simpy import simpy

from simcore.request import RequestSpec
from simcore.settings import _version_tuple
from simcore.workload import Lengths, _templates, _Workload


class AiperfClosedLoop(_Workload):
    """aiperf ``--concurrency C``: a warm-up phase of ``warmup_requests`` sent by C clients back to back, a
    barrier (every warm-up response received), then the profiling phase: ``num_requests`` sent by C clients that
    all start at the barrier. ``phase_start_s`` is when the profiling phase began (None until then)."""

    def __init__(self, concurrency: int, warmup_requests: int, num_requests: int, input_len: Lengths,
                 output_len: Lengths, seed: int = 0, *, ignore_eos: bool = True, rid_prefix: str = "req-") -> None:
        super().__init__(rid_prefix)
        if concurrency < 1 or warmup_requests < 0 or num_requests < 0:
            raise ValueError("concurrency must be >= 1, warmup_requests and num_requests >= 0")
        self.concurrency = concurrency
        self.warmup_requests = warmup_requests
        self.templates = _templates(warmup_requests + num_requests, input_len, output_len, seed, 0)
        self.ignore_eos = ignore_eos
        self.phase_start_s: float | None = None

    def _phase(self, env: simpy.Environment, server, first: int, end: int):  # type: ignore[no-untyped-def]
        nxt = [first]

        def client():  # type: ignore[no-untyped-def]
            while nxt[0] < end:
                i = nxt[0]
                nxt[0] += 1
                yield server.submit(self._spec(env, i, self.templates[i], None, self.ignore_eos))
                self.finished += 1

        return [env.process(client()) for _ in range(min(self.concurrency, end - first))]

    def _run(self, env: simpy.Environment, server):  # type: ignore[no-untyped-def]
        warm = self._phase(env, server, 0, self.warmup_requests)
        if warm:
            yield simpy.AllOf(env, warm)  # the barrier: every warm-up response is back
        self.phase_start_s = float(env.now)
        prof = self._phase(env, server, self.warmup_requests, len(self.templates))
        if prof:
            yield simpy.AllOf(env, prof)

    def start(self, env: simpy.Environment, server) -> simpy.Process:  # type: ignore[no-untyped-def]
        return env.process(self._run(env, server))


def bench_serving_lengths(input_len: int, output_len: int, num_requests: int, range_ratio: float,
                          rng: np.random.RandomState, sglang_version: str) -> tuple[list[int], list[int]]:
    """``sample_random_requests``' lengths for the version (module docstring), drawn from ``rng`` as
    bench_serving draws them (inputs, then outputs); outputs of 0 become 1."""
    ins = rng.randint(max(int(input_len * range_ratio), 1), input_len + 1, size=num_requests)
    lo_out = int(output_len * range_ratio)
    if _version_tuple(sglang_version) >= (0, 5, 8):
        lo_out = max(lo_out, 1)
    outs = rng.randint(lo_out, output_len + 1, size=num_requests)
    return [int(x) for x in ins], [max(1, int(x)) for x in outs]


class BenchServingOpenLoop(_Workload):
    """``sglang.bench_serving --dataset-name random`` (module docstring): version-faithful lengths, Poisson
    arrivals at ``request_rate`` (``inf``: all at once), optional ``max_concurrency``. ``prompt_overhead_tokens``
    are added to every prompt as the server sees it. ``server_tokens_per_prompt_token``: how many tokens the
    server's tokenizer makes of each token the client counted (1: client and server tokenize alike); each drawn
    prompt reaches the server as ``round(length × factor)`` tokens (a client whose tokenizer differs from the
    server's, docs/accuracy.md §3.12)."""

    def __init__(self, request_rate: float, num_requests: int, input_len: int, output_len: int, *,
                 range_ratio: float = 0.0, seed: int = 1, sglang_version: str = "0.5.9",
                 max_concurrency: int | None = None, prompt_overhead_tokens: int = 0, ignore_eos: bool = True,
                 rid_prefix: str = "req-", warmup_requests: int = 0,
                 server_tokens_per_prompt_token: float = 1.0) -> None:
        super().__init__(rid_prefix)
        if not request_rate > 0 or num_requests < 0 or not 0.0 <= range_ratio <= 1.0 or warmup_requests < 0:
            raise ValueError("request_rate must be > 0, num_requests >= 0, range_ratio in [0, 1], "
                             "warmup_requests >= 0")
        if not server_tokens_per_prompt_token > 0:
            raise ValueError("server_tokens_per_prompt_token must be > 0")
        if warmup_requests and num_requests < 1:
            raise ValueError("a warm-up copies the first request: num_requests must be >= 1")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        rng = np.random.RandomState(seed)
        ins, outs = bench_serving_lengths(input_len, output_len, num_requests, range_ratio, rng, sglang_version)
        f = server_tokens_per_prompt_token
        self.input_lens = [(i if f == 1.0 else max(1, round(i * f))) + prompt_overhead_tokens for i in ins]
        self.output_lens = outs
        if math.isinf(request_rate):
            self.offsets_s = [0.0] * num_requests
        else:
            gaps = [float(rng.exponential(1.0 / request_rate)) for _ in range(max(0, num_requests - 1))]
            self.offsets_s = [0.0] + [float(x) for x in np.cumsum(gaps)]
        self.max_concurrency = max_concurrency
        self.ignore_eos = ignore_eos
        # requests are numbered in sending order: the warm-up copies first (0 … W-1), then the measured ones
        self.warmup_requests = warmup_requests
        self.phase_start_s: float | None = None

    def _send(self, env: simpy.Environment, server, i: int, slots):  # type: ignore[no-untyped-def]
        if slots is not None:
            req = slots.request()
            yield req
        W = self.warmup_requests
        k = 0 if i < W else i - W  # a warm-up request is a copy of the first sampled one
        spec = RequestSpec(f"{self.rid_prefix}{i}", float(env.now), self.input_lens[k], self.output_lens[k],
                           self.output_lens[k], None, 1, self.ignore_eos)
        self.submitted.append(spec)
        yield server.submit(spec)
        self.finished += 1
        if slots is not None:
            slots.release(req)

    def _run(self, env: simpy.Environment, server):  # type: ignore[no-untyped-def]
        W = self.warmup_requests
        if W:
            slots = simpy.Resource(env, self.max_concurrency) if self.max_concurrency else None
            yield simpy.AllOf(env, [env.process(self._send(env, server, i, slots)) for i in range(W)])
        self.phase_start_s = float(env.now)
        slots = simpy.Resource(env, self.max_concurrency) if self.max_concurrency else None
        start = env.now
        for i in range(len(self.input_lens)):
            delay = start + self.offsets_s[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            env.process(self._send(env, server, W + i, slots))

    def start(self, env: simpy.Environment, server) -> simpy.Process:  # type: ignore[no-untyped-def]
        return env.process(self._run(env, server))


def lockstep_index(arrivals_s: list[float], concurrency: int, window_s: float) -> float:
    """How much a closed loop moves in waves: arrivals are grouped into bursts (consecutive arrivals less than
    ``window_s`` apart); the index is the request-weighted mean burst size over ``concurrency``,
    ``Σ size² / Σ size / C``. 1.0: every round is one burst of all C clients (perfect lockstep); 1/C: no two
    requests arrive together. ``window_s`` is about one scheduler step (arrivals that close land in the same
    scheduling pass)."""
    if not arrivals_s or concurrency < 1:
        return 0.0
    ts = sorted(arrivals_s)
    sizes = []
    run = 1
    for a, b in zip(ts, ts[1:]):
        if b - a < window_s:
            run += 1
        else:
            sizes.append(run)
            run = 1
    sizes.append(run)
    return float(sum(s * s for s in sizes) / sum(sizes) / concurrency)
