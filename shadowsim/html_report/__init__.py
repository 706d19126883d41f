"""One self-contained HTML report of predictions, sweeps and validations: inline SVG plots, nothing fetched.

``write_report(results, path)`` takes :class:`shadowsim.api.Prediction`, :class:`~shadowsim.api.SweepResult`
and :class:`~shadowsim.api.Validation` objects (or their ``--json`` dicts, see ``shadowsim report``) and writes
one HTML file readable offline and printable to PDF. Plots use matplotlib (the optional extra
``shadowsim[report]``); every figure is a ``<figure class="plot" id=...>`` holding an inline ``<svg>``.
"""
from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path
from typing import Any

from shadowsim.html_report import figures
from simcore.errors import UserError

CSS = """
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { border-bottom: 3px solid #3465a4; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .8em 0; font-size: 90%; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #eef2f7; } td.l, th.l { text-align: left; }
figure.plot { margin: 1em 0; page-break-inside: avoid; }
figure.plot svg { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 85%; color: #555; }
.cover { background: #f6f8fb; padding: 1em 1.5em; border-radius: 6px; }
.warn { color: #a40000; }
@media print { body { margin: 0; max-width: none; } h2 { page-break-before: auto; } }
"""


def write_report(results: list[Any], path: Path, title: str | None = None) -> Path:
    """Render ``results`` into ``path`` (.html); returns the path."""
    if not results:
        raise UserError("report", "nothing to report", "give at least one prediction, sweep or validation")
    if path.suffix.lower() not in (".html", ".htm"):
        raise UserError("--report", f"unknown extension {path.suffix!r}", "use FILE.html")
    figures.require_matplotlib()
    sections = []
    cover_rows: list[tuple[str, str]] = []
    for i, res in enumerate(results):
        kind = _kind(res)
        if kind == "prediction":
            cover_rows += _prediction_cover(res)
            sections.append(_prediction_section(res, f"p{i}"))
        elif kind == "sweep":
            cover_rows += _sweep_cover(res)
            sections.append(_sweep_section(res, f"s{i}"))
        else:
            cover_rows += _validation_cover(res)
            sections.append(_validation_section(res, f"v{i}"))
    from shadowsim import __version__

    head = title or "shadowsim report"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cover = "".join(f"<tr><th class='l'>{html.escape(k)}</th><td class='l'>{html.escape(v)}</td></tr>"
                    for k, v in cover_rows)
    doc = (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(head)}</title>"
           f"<style>{CSS}</style></head><body>\n<h1>{html.escape(head)}</h1>\n"
           f"<div class='cover'><table>{cover}</table><p>shadowsim {html.escape(__version__)}, {stamp}. "
           "Simulated with SGLang's scheduler rules and measured per-op GPU tables; see docs/accuracy.md for "
           "how accurate the model is.</p></div>\n" + "\n".join(sections) + "\n</body></html>\n")
    try:
        path.write_text(doc, encoding="utf-8")
    except OSError as exc:
        raise UserError("--report", f"cannot write {path}: {exc.strerror}", "check the directory exists") from None
    return path


def _kind(res: Any) -> str:
    from shadowsim.api import Prediction, SweepResult, Validation

    if isinstance(res, Prediction):
        return "prediction"
    if isinstance(res, SweepResult):
        return "sweep"
    if isinstance(res, Validation):
        return "validation"
    raise UserError("report", f"cannot report a {type(res).__name__}",
                    "give results of shadowsim.predict, sweep or validate")


def _fmt(v: Any, spec: str = ",.1f") -> str:
    if v is None:
        return "-"
    return format(v, spec) if isinstance(v, float) else str(v)


def _table(head: list[str], rows: list[list[str]], left: int = 0) -> str:
    th = "".join(f"<th{' class=l' if j < left else ''}>{html.escape(h)}</th>" for j, h in enumerate(head))
    body = "".join("<tr>" + "".join(f"<td{' class=l' if j < left else ''}>{html.escape(c)}</td>"
                                    for j, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _figure(fig_id: str, svg: str, caption: str) -> str:
    return f"<figure class='plot' id='{fig_id}'>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"


def _slo_text(slo: dict[str, Any] | None) -> str:
    if not slo:
        return "none given"
    parts = [f"{k.upper()} <= {slo[f'{k}_slo_ms']:g} ms" for k in ("ttft", "tpot") if slo.get(f"{k}_slo_ms")]
    return " and ".join(parts) or "none given"


# ---- prediction -----------------------------------------------------------------------------------------------
def _prediction_cover(p: Any) -> list[tuple[str, str]]:
    srv = p.server
    rows = [("model", str(srv["model"])), ("GPU", f"{srv['tp']} x {srv['gpu']} ({srv['precision']})"),
            ("workload", p.workload or f"{p.num_requests} requests"), ("SLO", _slo_text(p.slo))]
    if p.slo:
        rows.append(("SLO attainment", f"{100 * p.slo['both_ok']:.1f} % of requests meet every objective "
                                       f"(goodput {p.slo['goodput_rps']:.2f} req/s)"))
    return rows


def _prediction_section(p: Any, key: str) -> str:
    srv = p.server
    out = [f"<h2>Prediction: {html.escape(str(srv['model']))} on {srv['tp']} x {html.escape(srv['gpu'])}</h2>"]
    out += [f"<p class='warn'>warning: {html.escape(w)}</p>" for w in p.warnings]
    iv = p.intervals or {}
    head = ["latency (ms)", "mean", "p50", "p90", "p99"] + (["p90 interval (p5-p95)"] if iv else [])
    rows = []
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        v = p.summary[m]
        cells = [m[:-3].upper()] + [_fmt(v[q]) for q in ("mean", "p50", "p90", "p99")]
        if iv:
            k = f"{m[:-3]}_p90_ms"
            cells.append(f"{iv[k]['p5']:,.1f} - {iv[k]['p95']:,.1f}" if k in iv else "-")
        rows.append(cells)
    out.append(_table(head, rows, left=1))
    tput = f"{p.throughput_rps:.3f} req/s, {p.output_tokens_per_s:,.0f} output tokens/s"
    if iv and "throughput_rps" in iv:
        tput += f" (p5-p95 over {p.summary['replicas']} replicas: {iv['throughput_rps']['p5']:.3f} - " \
                f"{iv['throughput_rps']['p95']:.3f} req/s)"
    out.append(f"<p>Throughput {html.escape(tput)}; prefix-cache hit rate {100 * p.cache_hit_rate:.1f} %; "
               f"peak KV use {100 * p.kv_peak_usage:.1f} % of {srv['max_total_num_tokens']:,} tokens.</p>")
    out.append(_figure(f"{key}-latency-cdf", figures.latency_cdfs(p.records, p.slo, p.summary),
                       "Latency CDFs of the simulated requests (dashed: the SLO)."))
    if p.replica_summaries:
        out.append(_figure(f"{key}-intervals", figures.replica_intervals(p.replica_summaries),
                           "Percentiles per replica (dots) and their p5-p95 interval (bar)."))
    if p.steps:
        out.append(_figure(f"{key}-kv-timeline", figures.kv_timeline(p.steps),
                           "KV pool use and queue length over simulated time."))
    if p.memory:
        out.append(_figure(f"{key}-memory", figures.memory_breakdown([(f"{srv['tp']}x {srv['gpu']}", p.memory)]),
                           "GPU memory per rank: weights, KV pool, activations/CUDA graphs, other."))
    return "\n".join(out)


# ---- sweep ----------------------------------------------------------------------------------------------------
def _config_label(point: dict[str, Any], varying: list[str]) -> str:
    return " ".join(f"{a}={point[a]}" for a in varying) or f"{point['gpu']} tp{point['tp']}"


def _sweep_cover(s: Any) -> list[tuple[str, str]]:
    models = sorted({str(p["model"]) for p in s.points}) or ["-"]
    gpus = sorted({f"{p['gpu']}" for p in s.points}) or ["-"]
    slo = {"ttft_slo_ms": s.slo.get("ttft_ms"), "tpot_slo_ms": s.slo.get("tpot_ms")}
    searched = s.raw.get("max_rate_under_slo")
    if searched:
        models = sorted({str(f["point"]["model"]) for f in searched})
        gpus = sorted({str(f["point"]["gpu"]) for f in searched})
        slo = {"ttft_slo_ms": (s.raw.get("slo") or {}).get("ttft_p90_ms"),
               "tpot_slo_ms": (s.raw.get("slo") or {}).get("tpot_p90_ms")}
        return [("model", ", ".join(models)), ("GPU", ", ".join(gpus)),
                ("search", f"max request rate of {len(searched)} configurations"), ("SLO (p90)", _slo_text(slo))]
    rows = [("model", ", ".join(models)), ("GPU", ", ".join(gpus)),
            ("sweep", f"{len(s.points)} points simulated, {len(s.skipped)} skipped"), ("SLO", _slo_text(slo))]
    if s.slo.get("ttft_ms") or s.slo.get("tpot_ms"):
        ok = sum(1 for p in s.points if s.feasible(p))
        rows.append(("SLO attainment", f"{ok} of {len(s.points)} points have >= {100 * s.attainment_target:g} % "
                                       "of requests meeting every objective"))
    return rows


def _sweep_section(s: Any, key: str) -> str:
    from shadowsim.commands.sweep import CONFIG_AXES

    searched = s.raw.get("max_rate_under_slo")
    if searched is not None:
        return _rate_search_section(s, searched, key)
    if not s.points:
        return "<h2>Sweep</h2><p class='warn'>No point could be simulated: " + "; ".join(
            html.escape(f"{k['point']['id']}: {k['reason']}") for k in s.skipped) + "</p>"
    varying = [a for a in CONFIG_AXES if len({str(p[a]) for p in s.points}) > 1] or ["gpu", "tp"]
    out = ["<h2>Sweep</h2>"]
    front = {p["id"] for p in s.pareto()}
    rows = []
    for p in s.points:
        rows.append([str(p["id"]), _config_label(p, varying), _fmt(p.get(s.load_axis)) if s.load_axis else "-",
                     _fmt(p["throughput_rps"], ".2f"), _fmt(p["output_tokens_per_s_per_gpu"], ",.0f"),
                     _fmt(p["ttft_p90_ms"]), _fmt(p["tpot_p90_ms"]),
                     _fmt(100 * p["slo_both_ok"]) if p.get("slo_both_ok") is not None else "-",
                     "*" if p["id"] in front else ""])
    out.append(_table(["id", "configuration", s.load_axis or "load", "req/s", "tok/s/GPU", "TTFT p90 ms",
                       "TPOT p90 ms", "SLO ok %", "pareto"], rows, left=2))
    if s.skipped:
        out.append("<p>Skipped: " + "; ".join(html.escape(f"{k['point']['id']}: {k['reason']}")
                                              for k in s.skipped) + "</p>")
    label = {p["id"]: _config_label(p, varying) for p in s.points}
    out.append(_figure(f"{key}-latency-percentiles",
                       figures.sweep_latency_percentiles(s.points, label, s.load_axis, s.slo),
                       "Latency percentiles per point (p50, p90, p99: the CDF at three quantiles) for TTFT, TPOT "
                       "and e2e; red: the SLO."))
    out.append(_figure(f"{key}-throughput-latency", figures.throughput_latency(s.points, label, s.load_axis),
                       "Throughput per GPU against p90 TTFT and p90 TPOT, one line per configuration across load."))
    out.append(_figure(f"{key}-pareto", figures.pareto_per_load(s.points, front, s.feasible, s.load_axis,
                                                                s.objectives),
                       "Pareto front per load level among SLO-feasible points (filled); dominated feasible points "
                       "grey; points missing the SLO hollow."))
    if s.slo.get("ttft_ms") or s.slo.get("tpot_ms"):
        out.append(_figure(f"{key}-slo-heatmap", figures.slo_heatmap(s.points, label, s.load_axis),
                           "SLO attainment (share of requests meeting every objective) over load x configuration."))
    mem = [(label[p["id"]], p["memory"]) for p in s.points if p.get("memory")]
    seen: set[str] = set()
    mem = [(k, m) for k, m in mem if not (k in seen or seen.add(k))]  # type: ignore[func-returns-value]
    if mem:
        out.append(_figure(f"{key}-memory", figures.memory_breakdown(mem),
                           "GPU memory per rank for each configuration."))
    return "\n".join(out)


def _rate_search_section(s: Any, found: list[dict[str, Any]], key: str) -> str:
    from shadowsim.commands.sweep import CONFIG_AXES

    pts = [f["point"] for f in found]
    varying = [a for a in CONFIG_AXES if len({str(p[a]) for p in pts}) > 1] or ["gpu", "tp"]
    lo, hi = s.raw.get("bracket_rps", [None, None])
    out = [f"<h2>Max request rate under the SLO (searched {lo:g}-{hi:g} req/s)</h2>"]
    rows = [[_config_label(f["point"], varying), _fmt(f["max_rate_rps"], ".3f"),
             _fmt(f["max_rate_rps_per_gpu"], ".3f"), _fmt(f["first_miss_rps"], ".3f"),
             str(len(f["evaluations_rps"]))] for f in found]
    out.append(_table(["configuration", "max req/s", "req/s per GPU", "first miss", "simulations"], rows, left=1))
    if found:
        out.append(_figure(f"{key}-max-rate", figures.max_rate_bars(
            [(_config_label(f["point"], varying), f["max_rate_rps"], f["first_miss_rps"]) for f in found]),
            "Largest open-loop rate whose p90 TTFT and p90 TPOT meet the SLO (bar), first rate that misses (tick)."))
    if s.skipped:
        out.append("<p>Skipped: " + "; ".join(html.escape(f"{k['point']['id']}: {k['reason']}")
                                              for k in s.skipped) + "</p>")
    return "\n".join(out)


# ---- validation -----------------------------------------------------------------------------------------------
def _validation_cover(v: Any) -> list[tuple[str, str]]:
    models = sorted({str(r["model"]) for r in v.rows}) or ["-"]
    parts = [f"{m}: MAPE {s['mape']:.1f} %" for m, s in v.summary.items() if s.get("mape") is not None]
    return [("validation", f"{Path(v.source).name}: {len(v.rows)} rows simulated, {len(v.skipped)} skipped"),
            ("models", ", ".join(models)), ("error", "; ".join(parts) or "-")]


def _validation_section(v: Any, key: str) -> str:
    out = [f"<h2>Validation: {html.escape(Path(v.source).name)}</h2>"]
    rows = [[m, str(s["n"]), _fmt(s["mape"]), _fmt(s["median_ape"]), _fmt(s["p90_ape"])]
            for m, s in v.summary.items()]
    out.append(_table(["metric", "rows", "MAPE %", "median %", "P90 %"], rows, left=1))
    with_iv = any(r.get("intervals") for r in v.rows)
    out.append(_figure(f"{key}-scatter", figures.predicted_vs_measured(v.rows),
                       "Predicted against measured per row (diagonal: perfect; band: +-20 %)"
                       + ("; red bars: p5-p95 over the replicas." if with_iv else ".")))
    if with_iv:
        out.append(_figure(f"{key}-row-intervals", figures.row_intervals(v.rows),
                           "Per row: predicted / measured, the dot the median replica and the bar the p5-p95 "
                           "interval over the replicas (--replicas)."))
    out.append(_figure(f"{key}-error-histogram", figures.error_histogram(v.rows),
                       "Signed error (predicted - measured) / measured per row and metric."))
    if v.skipped:
        out.append(f"<p>{len(v.skipped)} rows skipped: "
                   + "; ".join(html.escape(f"{k['id']}: {k['reason']}") for k in v.skipped[:10]) + "</p>")
    return "\n".join(out)
