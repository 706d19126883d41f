"""The Python API: ``shadowsim.predict``, ``shadowsim.sweep``, ``shadowsim.validate``, ``shadowsim.report``.

The command line is a thin layer over these functions: ``shadowsim predict`` parses its flags into the same
keyword arguments and prints the :class:`Prediction` this module returns. Keyword arguments are the CLI's long
option names with ``_`` for ``-`` (``--chunked-prefill-size`` → ``chunked_prefill_size=``); SGLang server flags
(``schedule_policy=``, ``max_total_tokens=``, ``disable_radix_cache=``, ...) pass through ``**sglang_flags``.
Units are in every name: ``*_ms`` milliseconds, ``*_s`` seconds, ``*_rps`` requests per second, ``*_bytes``.
See docs/api.md for examples (they run as tests).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from shadowsim.workloads import Workload
from simcore.errors import UserError

LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")
QUANTILES = ("mean", "p50", "p90", "p99")
# summary figures that get a p5–p95 interval over replicas
INTERVAL_KEYS = ("throughput_rps", "output_tokens_per_s", *(f"{m[:-3]}_{q}_ms" for m in LATENCY_METRICS[:4]
                                                            for q in QUANTILES))


# ---- defaults: one source of truth, the CLI's own parsers ------------------------------------------------------
@lru_cache(maxsize=2)
def _defaults(command: str) -> dict[str, Any]:
    p = argparse.ArgumentParser(add_help=False)
    if command == "sweep":
        from shadowsim.commands import sweep as mod
    else:
        from shadowsim.commands import predict as mod  # type: ignore[no-redef]
    mod.add_arguments(p)
    ns = p.parse_args(["--model", "m", "--gpu", "g"])
    out = vars(ns)
    out.pop("model"), out.pop("gpu")
    return out


def _namespace(command: str, model: Any, gpu: Any, kwargs: dict[str, Any]) -> argparse.Namespace:
    """A namespace like the CLI's from API keywords; an unknown keyword is a UserError naming it."""
    base = {**_defaults(command), "mix_classes": ()}
    unknown = sorted(k for k in kwargs if k not in base)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], base, n=3)
        raise UserError(unknown[0], "unknown keyword",
                        f"did you mean {', '.join(close)}?" if close else "see help(shadowsim.predict)")
    base.update(kwargs)
    base["model"], base["gpu"] = model, gpu
    return argparse.Namespace(**base)


def _apply_workload(kwargs: dict[str, Any], workload: Workload | None) -> dict[str, Any]:
    if workload is None:
        return kwargs
    if not isinstance(workload, Workload):
        raise UserError("workload", f"expected a shadowsim workload, got {type(workload).__name__}",
                        "build one with shadowsim.closed_loop/open_loop/from_trace/scenario")
    clash = sorted(k for k in workload.flags() if kwargs.get(k) is not None)
    if clash:
        raise UserError(clash[0], "given both as a keyword and by workload=", "use one of them")
    return {**kwargs, **{k: v for k, v in workload.flags().items() if v is not None},
            "mix_classes": workload.classes}


# ---- predict --------------------------------------------------------------------------------------------------
@dataclass
class Prediction:
    """One simulated server + workload (the first replica), with p5–p95 intervals when ``replicas`` > 1.

    ``summary`` is the ``shadowsim predict --json`` object; ``records`` the per-request
    :class:`simcore.results.RequestRecord`s (seconds), ``steps`` the per-step
    :class:`simcore.results.StepRecord`s, ``memory`` the GPU memory breakdown in bytes (per GPU),
    ``warnings`` the one-line warnings (overload, prompts beyond the context, skipped trace lines).
    """

    summary: dict[str, Any]
    records: list[Any]
    steps: list[Any] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    replica_summaries: list[dict[str, Any]] = field(default_factory=list)
    workload: str = ""

    # summary attributes with units
    @property
    def server(self) -> dict[str, Any]:
        return self.summary["server"]

    @property
    def num_requests(self) -> int:
        return int(self.summary["num_requests"])

    @property
    def throughput_rps(self) -> float:
        return float(self.summary["throughput_rps"])

    @property
    def output_tokens_per_s(self) -> float:
        return float(self.summary["output_tokens_per_s"])

    @property
    def cache_hit_rate(self) -> float:
        return float(self.summary["cache_hit_rate"])

    @property
    def kv_peak_usage(self) -> float:
        return float(self.summary["kv_peak_usage"])

    @property
    def ttft_ms(self) -> dict[str, float | None]:
        return self.summary["ttft_ms"]

    @property
    def tpot_ms(self) -> dict[str, float | None]:
        return self.summary["tpot_ms"]

    @property
    def itl_ms(self) -> dict[str, float | None]:
        return self.summary["itl_ms"]

    @property
    def e2e_ms(self) -> dict[str, float | None]:
        return self.summary["e2e_ms"]

    @property
    def slo(self) -> dict[str, Any] | None:
        return self.summary.get("slo")

    @property
    def intervals(self) -> dict[str, dict[str, float]] | None:
        """``{figure: {"p5", "p95"}}`` over the replicas (None for one replica)."""
        return self.summary.get("intervals_p5_p95")

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary, "memory": self.memory}

    def with_model_error(self, validation: "Validation") -> "Prediction":
        """Attach the model's own measured uncertainty: each TTFT, TPOT and throughput figure times
        (1 +- the P90 absolute percentage error that ``validation`` measured for that metric), as
        ``summary["model_error_band"] = {figure: {"low", "high", "p90_ape_pct", "rows"}}``."""
        self.summary["model_error_band"] = model_error_band(self.summary, validation.summary)
        return self

    @classmethod
    def from_dict(cls, summary: dict[str, Any]) -> "Prediction":
        """From a ``shadowsim predict --json`` object (no per-request records: plots use its percentiles)."""
        if "server" not in summary or "ttft_ms" not in summary:
            raise UserError("RESULT.json", "not a shadowsim predict --json result", "save one with --json")
        return cls(summary, [], [], summary.get("memory") or {}, list(summary.get("warnings") or []))

    def to_dataframe(self) -> Any:
        """Per-request records as a pandas DataFrame (needs pandas)."""
        return _dataframe([r.to_dict() for r in self.records])

    def steps_dataframe(self) -> Any:
        """Per-step records as a pandas DataFrame: start/end (s), batch shape, running, waiting, KV use."""
        rows = []
        for s in self.steps:
            rows.append({"start_s": s.start_s, "end_s": s.end_s, "num_running": s.num_running,
                         "num_waiting": s.num_waiting, "kv_used_tokens": s.kv_used,
                         "kv_capacity_tokens": s.kv_capacity, "num_retracted": len(s.retracted)})
        return _dataframe(rows)


def _dataframe(rows: list[dict[str, Any]]) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise UserError("pandas", "not installed", "pip install pandas (or use .records)") from None
    return pd.DataFrame(rows)


def predict(model: str, gpu: str, tp: int = 1, workload: Workload | None = None, *, replicas: int = 1,
            concurrency: int | None = None, request_rate: float | None = None, num_requests: int | None = None,
            input_len: int | None = None, output_len: int | None = None, trace: str | Path | None = None,
            keep_steps: bool = True, progress: Callable[[float, int], None] | None = None,
            **sglang_flags: Any) -> Prediction:
    """Simulate ``model`` served by SGLang on ``tp`` × ``gpu`` under a workload and return a :class:`Prediction`.

    The workload is ``workload=`` (from :func:`shadowsim.closed_loop`, :func:`open_loop`, :func:`from_trace`,
    :func:`scenario`) or the CLI's shortcuts as keywords. ``replicas`` > 1 repeats the run with seeds
    ``seed, seed+1, ...`` and adds p5–p95 intervals. Other keywords are the ``shadowsim predict`` options
    (``schedule_policy=``, ``max_total_tokens=``, ``slo_ttft_ms=``, ``seed=``, ``precision=``, ...).
    """
    kw = {k: v for k, v in dict(concurrency=concurrency, request_rate=request_rate, num_requests=num_requests,
                                 input_len=input_len, output_len=output_len,
                                 trace=None if trace is None else str(trace)).items() if v is not None}
    kw = _apply_workload({**kw, **sglang_flags}, workload)
    ns = _namespace("predict", model, gpu, {**kw, "tp": tp})
    return predict_namespace(ns, replicas=replicas, keep_steps=keep_steps, progress=progress,
                             workload_text=workload.describe() if workload is not None else "")


def predict_namespace(ns: argparse.Namespace, *, replicas: int = 1, keep_steps: bool = False,
                      progress: Callable[[float, int], None] | None = None,
                      workload_text: str = "") -> Prediction:
    """What :func:`predict` and ``shadowsim predict`` share: simulate ``ns`` ``replicas`` times."""
    from shadowsim.commands._workload_args import simulate_point

    from simcore.variability import replica_seeds

    if not isinstance(replicas, int):
        raise UserError("--replicas", f"must be an integer, got {replicas!r}", "give the number of repeated runs")
    seeds = replica_seeds(ns.seed, replicas)
    ns = argparse.Namespace(**{**vars(ns), "replicas": replicas})
    first = simulate_point(ns, progress=progress, keep_steps=keep_steps, warn=True)
    summaries = [first.summary]
    for seed in seeds[1:]:
        again = argparse.Namespace(**{**vars(ns), "seed": seed})
        summaries.append(simulate_point(again, warn=False).summary)
    summary = dict(first.summary)
    if replicas > 1:
        summary["replicas"] = replicas
        summary["replica_seeds"] = seeds
        summary["intervals_p5_p95"] = intervals(summaries)
    return Prediction(summary, first.records, first.steps, first.memory, first.warnings,
                      summaries if replicas > 1 else [], workload_text)


def model_error_band(summary: dict[str, Any], errors: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Figures of ``summary`` widened by the P90 absolute error of the same metric in a validation summary."""
    out: dict[str, dict[str, Any]] = {}
    for fig, value in flat_figures(summary).items():
        metric = "throughput" if fig.startswith(("throughput", "output_tokens")) else fig.split("_")[0]
        err = errors.get(metric) or {}
        if value is None or err.get("p90_ape") is None:
            continue
        band = err["p90_ape"] / 100.0
        out[fig] = {"low": value * (1 - band), "high": value * (1 + band), "p90_ape_pct": err["p90_ape"],
                    "rows": err.get("n")}
    return out


def flat_figures(summary: dict[str, Any]) -> dict[str, float | None]:
    """The figures of a summary that get intervals, flat: ``ttft_p90_ms``, ``throughput_rps``, ..."""
    out: dict[str, float | None] = {"throughput_rps": summary["throughput_rps"],
                                    "output_tokens_per_s": summary["output_tokens_per_s"]}
    for m in LATENCY_METRICS[:4]:
        for q in QUANTILES:
            out[f"{m[:-3]}_{q}_ms"] = summary[m][q]
    return out


def intervals(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p5, p50 and p95 of each figure over replica summaries (``simcore.variability.percentile_interval``)."""
    from simcore.variability import percentile_interval

    flats = [flat_figures(s) for s in summaries]
    out: dict[str, dict[str, float]] = {}
    for k in INTERVAL_KEYS:
        iv = percentile_interval([f[k] for f in flats if f[k] is not None])
        if iv:
            out[k] = iv
    return out


# ---- sweep ----------------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    """Every simulated point of a sweep. ``points``: one dict per point (axes, then figures with units:
    ``ttft_p90_ms``, ``output_tokens_per_s_per_gpu``, ``slo_both_ok`` (fraction), ...); ``skipped``: impossible
    points with the reason; ``slo``: the objectives given."""

    points: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    slo: dict[str, float | None]
    objectives: dict[str, list[str]]
    load_axis: str | None
    raw: dict[str, Any] = field(default_factory=dict)
    attainment_target: float = 0.9

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "SweepResult":
        """From a ``shadowsim sweep --json`` object."""
        if "points" not in raw or "skipped" not in raw:
            raise UserError("RESULT.json", "not a shadowsim sweep --json result", "save one with --json")
        obj = raw.get("objectives") or {"maximize": ["output_tokens_per_s_per_gpu"], "minimize": ["ttft_p90_ms"]}
        slo = raw.get("slo_ms") or {}
        load = (obj.get("per_load_axis") or [None])[0]
        return cls(raw["points"], raw["skipped"], {"ttft_ms": slo.get("ttft"), "tpot_ms": slo.get("tpot")}, obj,
                   load, raw, obj.get("slo_attainment") or 0.9)

    def to_dataframe(self) -> Any:
        return _dataframe(self.points)

    def feasible(self, point: dict[str, Any]) -> bool:
        """A point meets the SLO when at least ``attainment_target`` of its requests meet every objective
        (every point is feasible when no SLO was given)."""
        if self.slo.get("ttft_ms") is None and self.slo.get("tpot_ms") is None:
            return True
        return point.get("slo_both_ok") is not None and point["slo_both_ok"] >= self.attainment_target

    def pareto(self, maximize: str | None = None, minimize: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The Pareto-optimal points *per load level* among the SLO-feasible ones: no other feasible point of the
        same load is at least as good in every objective and better in one."""
        from simcore.analysis import pareto_front

        mx = maximize or self.objectives["maximize"][0]
        mn = list(minimize or self.objectives["minimize"])
        out: list[dict[str, Any]] = []
        for _, group in self.by_load().items():
            cand = [p for p in group if self.feasible(p)]
            front = pareto_front([[p[mx], *(p[k] for k in mn)] for p in cand], [True] + [False] * len(mn))
            out += [cand[j] for j in front]
        return sorted(out, key=lambda p: p["id"])

    def by_load(self) -> dict[Any, list[dict[str, Any]]]:
        groups: dict[Any, list[dict[str, Any]]] = {}
        for p in self.points:
            groups.setdefault(p.get(self.load_axis) if self.load_axis else None, []).append(p)
        return groups

    def best(self, slo: dict[str, float] | None = None, by: str = "output_tokens_per_s_per_gpu") -> dict[str, Any]:
        """The feasible point with the largest ``by`` (default output tokens/s per GPU). ``slo`` =
        ``{"ttft_p90_ms": 500, "tpot_p90_ms": 50}`` filters on the point's own percentiles instead of the
        sweep's SLO attainment. UserError when no point qualifies."""
        cands = [p for p in self.points if (self._meets(p, slo) if slo else self.feasible(p))]
        if not cands:
            raise UserError("slo", "no simulated point meets it", "relax the objective or add configurations")
        return max(cands, key=lambda p: (p[by] if p[by] is not None else -math.inf))

    @staticmethod
    def _meets(p: dict[str, Any], slo: dict[str, float]) -> bool:
        for k, limit in slo.items():
            if k not in p:
                raise UserError("slo", f"unknown figure {k!r}", "use names like ttft_p90_ms, tpot_p99_ms")
            if p[k] is None or p[k] > limit:
                return False
        return True

    def max_rate_under_slo(self, slo: dict[str, float] | None = None) -> list[dict[str, Any]]:
        """Per configuration, the largest swept request rate whose point meets ``slo`` (or the sweep's SLO):
        ``[{config axes..., "max_rate_rps": R or None}]``. For a finer answer than the grid use
        ``sweep(..., max_rate_under_slo=True)`` which bisects."""
        if self.raw.get("max_rate_under_slo") is not None:
            return self.raw["max_rate_under_slo"]
        if self.load_axis != "request_rate":
            raise UserError("max_rate_under_slo", "needs an open-loop sweep", "sweep request_rate=[...]")
        from shadowsim.commands.sweep import CONFIG_AXES

        configs: dict[tuple[Any, ...], dict[str, Any]] = {}
        for p in self.points:
            key = tuple(p[a] for a in CONFIG_AXES)
            entry = configs.setdefault(key, {**{a: p[a] for a in CONFIG_AXES}, "max_rate_rps": None})
            ok = self._meets(p, slo) if slo else self.feasible(p)
            if ok and (entry["max_rate_rps"] is None or p["request_rate"] > entry["max_rate_rps"]):
                entry["max_rate_rps"] = p["request_rate"]
        return list(configs.values())


def sweep(model: str | Sequence[str], gpu: str | Sequence[str], tp: int | Sequence[int] = 1,
          workload: Workload | None = None, *, replicas: int = 1, jobs: int = 1,
          max_rate_under_slo: bool = False, **options: Any) -> SweepResult:
    """Simulate the cartesian product of the list-valued axes (``model``, ``gpu``, ``tp``, ``precision``,
    ``schedule_policy``, ``chunked_prefill_size``, ``max_running_requests`` and the load ``request_rate`` or
    ``concurrency``) and return a :class:`SweepResult`. Other keywords are ``shadowsim sweep`` options."""
    from shadowsim.commands._workload_args import SWEEPABLE

    def as_list(v: Any) -> Any:
        return list(v) if isinstance(v, (list, tuple)) else [v]

    kw = _apply_workload(dict(options), workload)
    for axis in SWEEPABLE:
        if axis in kw and kw[axis] is not None:
            kw[axis] = as_list(kw[axis])
    kw.update(tp=as_list(tp), jobs=jobs, max_rate_under_slo=max_rate_under_slo, replicas=replicas)
    ns = _namespace("sweep", as_list(model), as_list(gpu), kw)
    return sweep_namespace(ns)


def sweep_namespace(ns: argparse.Namespace, tick: Callable[[int, int], None] | None = None) -> SweepResult:
    """What :func:`sweep` and ``shadowsim sweep`` share."""
    from shadowsim.commands import sweep as cmd

    raw = cmd.compute(ns, tick or (lambda done, total: None))
    load = "request_rate" if ns.request_rate is not None else ("concurrency" if ns.concurrency is not None
                                                               else None)
    return SweepResult(raw["points"], raw["skipped"], {"ttft_ms": ns.slo_ttft_ms, "tpot_ms": ns.slo_tpot_ms},
                       raw.get("objectives", {"maximize": [ns.pareto_max], "minimize": []}), load, raw,
                       getattr(ns, "slo_attainment", 0.9))


# ---- validate -------------------------------------------------------------------------------------------------
@dataclass
class Validation:
    """Predicted vs measured per row (``rows``: ``predicted_ttft_ms``, ``measured_ttft_ms``, ``ttft_ape_pct``,
    ...), the error summary per metric (``summary``: MAPE, median, P90 in percent) and skipped rows."""

    rows: list[dict[str, Any]]
    summary: dict[str, dict[str, Any]]
    skipped: list[dict[str, str]]
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "summary": self.summary, "skipped": self.skipped}

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "") -> "Validation":
        """From a ``shadowsim validate --json`` object."""
        if not {"rows", "summary", "skipped"} <= set(raw):
            raise UserError("RESULT.json", "not a shadowsim validate --json result", "save one with --json")
        return cls(raw["rows"], raw["summary"], raw["skipped"], source)

    def to_dataframe(self) -> Any:
        return _dataframe(self.rows)


def validate(measurements: str | Path, *, profile: str | Path | None = None, latency_backend: str = "auto",
             seed: int = 0, protocol: Any = None, replicas: int = 1, variability: str = "off",
             progress: Callable[[int, int, Any], None] | None = None) -> Validation:
    """Simulate every row of a measurement CSV (format in ``shadowsim validate --help``) and compare; the
    simulation is ``simcore.perf.validation.validate``, the same code as the command. ``replicas`` > 1 with
    ``variability="measured"`` adds p5/p50/p95 intervals per row (``shadowsim validate --replicas``)."""
    import dataclasses

    from shadowsim.commands.validate import read_rows
    from simcore.perf.profile import CalibrationProfile
    from simcore.perf.validation import Protocol
    from simcore.perf.validation import validate as run_rows
    from simcore.variability import Variability

    if variability not in ("off", "measured"):
        raise UserError("variability", f"unknown {variability!r}", "use off or measured")
    proto = protocol or Protocol()
    rows = read_rows(measurements, proto.deployment)
    prof = CalibrationProfile.load(profile) if profile else None
    if variability == "measured":
        proto = dataclasses.replace(proto, variability=Variability.measured())
    out = run_rows(rows, profile=prof, backend=latency_backend, seed=seed, protocol=proto, progress=progress,
                   replicas=replicas)
    return Validation(out["rows"], out["summary"], out["skipped"], str(measurements))


# ---- report ---------------------------------------------------------------------------------------------------
def report(*results: Any, path: str | Path = "report.html", title: str | None = None) -> Path:
    """Write one self-contained HTML report (inline SVG, nothing fetched) of predictions, sweeps and
    validations. Needs the plotting extra: ``pip install 'shadowsim[report]'``."""
    from shadowsim.html_report import write_report

    return write_report(list(results), Path(path), title=title)
