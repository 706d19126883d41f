"""The report's plots, each returned as an inline ``<svg>`` string (matplotlib's SVG backend, no files).

matplotlib is imported here only, so the core install stays lean; without it ``require_matplotlib`` raises a
one-line UserError naming the extra to install.
"""
from __future__ import annotations

import io
import math
from typing import Any, Callable, Sequence

from simcore.errors import UserError

GREY = "#b0b0b0"


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError("--report", "plots need matplotlib", "pip install 'shadowsim[report]'") from None


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; SVG is written by the backend-independent savefig
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                         "svg.hashsalt": "shadowsim"})  # fixed ids: the same result gives the same file
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML


def latency_cdfs(records: Sequence[Any], slo: dict[str, Any] | None, summary: dict[str, Any] | None = None) -> str:
    """Empirical CDFs of TTFT, TPOT and e2e; without records (a saved --json), the summary's p50/p90/p99."""
    import numpy as np

    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    series = (("TTFT", [r.ttft_s * 1e3 for r in records], (slo or {}).get("ttft_slo_ms")),
              ("TPOT", [r.tpot_s * 1e3 for r in records if r.tpot_s is not None and not math.isnan(r.tpot_s)],
               (slo or {}).get("tpot_slo_ms")),
              ("e2e", [r.e2e_s * 1e3 for r in records], None))
    for ax, (name, vals, limit) in zip(axes, series):
        if not vals and summary is not None:
            stats = summary[f"{name.lower()}_ms"]
            qs = [(stats[q], int(q[1:]) / 100) for q in ("p50", "p90", "p99") if stats[q] is not None]
            if qs:
                ax.plot([x for x, _ in qs], [y for _, y in qs], marker="o", color="#3465a4")
        if vals:
            v = np.sort(np.asarray(vals))
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color="#3465a4")
            for q, style in ((50, ":"), (90, "-."), (99, "--")):
                ax.axhline(q / 100, color=GREY, lw=0.6, ls=style)
        if limit:
            ax.axvline(limit, color="#cc0000", ls="--", lw=1, label=f"SLO {limit:g} ms")
            ax.legend(loc="lower right")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel("fraction of requests")
    return _svg(fig)


def sweep_latency_percentiles(points: Sequence[dict[str, Any]], label: dict[int, str], load_axis: str | None,
                              slo: dict[str, Any] | None) -> str:
    """Per sweep point, the latency distribution its p50/p90/p99 trace (TTFT, TPOT, e2e): a CDF at three
    quantiles, one line per configuration and load, the SLO as a red line."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    cmap = plt.get_cmap("viridis")
    shown = list(points)[:16]  # beyond that the lines cannot be told apart; the table lists every point
    for ax, (name, limit) in zip(axes, (("ttft", (slo or {}).get("ttft_ms")), ("tpot", (slo or {}).get("tpot_ms")),
                                        ("e2e", None))):
        for i, p in enumerate(shown):
            qs = [(p.get(f"{name}_{q}_ms"), int(q[1:]) / 100) for q in ("p50", "p90", "p99")]
            qs = [(x, y) for x, y in qs if x is not None and not math.isnan(x)]
            if not qs:
                continue
            load = f", {p.get(load_axis):g}" if load_axis and p.get(load_axis) is not None else ""
            ax.plot([x for x, _ in qs], [y for _, y in qs], marker="o", ms=3, lw=1,
                    color=cmap(i / max(1, len(shown) - 1)), label=f"{label.get(p['id'], p['id'])}{load}")
        if limit:
            ax.axvline(limit, color="#cc0000", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel(f"{name.upper()} (ms)")
        ax.set_ylim(0.45, 1.0)
    axes[0].set_ylabel("fraction of requests")
    axes[2].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return _svg(fig)


def replica_intervals(summaries: Sequence[dict[str, Any]]) -> str:
    import numpy as np

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3))
    keys = [(m, q) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for q in ("p50", "p90", "p99")]
    for i, (m, q) in enumerate(keys):
        vals = [s[m][q] for s in summaries if s[m][q] is not None]
        if not vals:
            continue
        ref = vals[0] or 1.0
        rel = np.asarray(vals) / ref
        ax.scatter([i] * len(rel), rel, s=10, color="#3465a4", alpha=0.6)
        ax.vlines(i, np.percentile(rel, 5), np.percentile(rel, 95), color="#cc0000", lw=3, alpha=0.6)
    ax.set_xticks(range(len(keys)), [f"{m[:-3].upper()} {q}" for m, q in keys], rotation=30)
    ax.set_ylabel("relative to replica 1")
    return _svg(fig)


def kv_timeline(steps: Sequence[Any]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 2.6))
    t = [s.end_s for s in steps]
    ax.plot(t, [100 * s.kv_used / max(1, s.kv_capacity) for s in steps], color="#3465a4", lw=0.8,
            label="KV pool used (%)")
    ax.set_ylabel("KV used (%)")
    ax.set_xlabel("simulated time (s)")
    ax2 = ax.twinx()
    ax2.plot(t, [s.num_waiting for s in steps], color="#f57900", lw=0.8, label="waiting requests")
    ax2.plot(t, [s.num_running for s in steps], color="#4e9a06", lw=0.8, label="running requests")
    ax2.set_ylabel("requests")
    ax2.grid(False)
    fig.legend(loc="upper right", fontsize=7)
    return _svg(fig)


def memory_breakdown(items: Sequence[tuple[str, dict[str, Any]]]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(items)))
    parts = (("weights_bytes", "weights", "#3465a4"), ("kv_pool_bytes", "KV pool", "#4e9a06"),
             ("activations_bytes", "activations + CUDA graphs", "#f57900"), ("other_bytes", "other", GREY))
    for row, (label, mem) in enumerate(items):
        left = 0.0
        for key, name, color in parts:
            gib = mem.get(key, 0) / 2**30
            ax.barh(row, gib, left=left, color=color, label=name if row == 0 else None)
            if gib > 3:
                ax.text(left + gib / 2, row, f"{gib:.1f}", ha="center", va="center", color="white", fontsize=7)
            left += gib
    ax.set_yticks(range(len(items)), [label for label, _ in items])
    ax.set_xlabel("GiB per GPU")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=7)
    return _svg(fig)


def throughput_latency(points: Sequence[dict[str, Any]], label: dict[int, str], load_axis: str | None) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault(label[p["id"]], []).append(p)
    for name, pts in groups.items():
        pts = sorted(pts, key=lambda p: (p.get(load_axis) or 0) if load_axis else p["id"])
        for ax, key in zip(axes, ("ttft_p90_ms", "tpot_p90_ms")):
            xs = [p["output_tokens_per_s_per_gpu"] for p in pts if p[key] is not None]
            ys = [p[key] for p in pts if p[key] is not None]
            line = ax.plot(xs, ys, marker="o", ms=3, label=name)[0]
            for p in pts:
                iv = (p.get("intervals_p5_p95") or {}).get(key)
                if iv:
                    ax.vlines(p["output_tokens_per_s_per_gpu"], iv["p5"], iv["p95"], color=line.get_color(), lw=1)
    for ax, key in zip(axes, ("TTFT p90 (ms)", "TPOT p90 (ms)")):
        ax.set_xlabel("output tokens/s per GPU")
        ax.set_ylabel(key)
        ax.set_yscale("log")
    if axes[1].get_legend_handles_labels()[0]:
        axes[1].legend(fontsize=7, loc="best")
    return _svg(fig)


def pareto_per_load(points: Sequence[dict[str, Any]], front: set[int], feasible: Callable[[dict[str, Any]], bool],
                    load_axis: str | None, objectives: dict[str, list[str]]) -> str:
    plt = _plt()
    loads = sorted({p.get(load_axis) for p in points}, key=lambda v: (v is None, v)) if load_axis else [None]
    cols = min(3, len(loads))
    rows = math.ceil(len(loads) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3 * rows), squeeze=False)
    x_key = objectives.get("maximize", ["output_tokens_per_s_per_gpu"])[0]
    y_key = (objectives.get("minimize") or ["ttft_p90_ms"])[0]
    for ax, load in zip(axes.flat, loads):
        pts = [p for p in points if not load_axis or p.get(load_axis) == load]
        for p in pts:
            if p[y_key] is None or p[x_key] is None:
                continue
            if p["id"] in front:
                ax.scatter(p[x_key], p[y_key], color="#cc0000", s=28, zorder=3)
                ax.annotate(str(p["id"]), (p[x_key], p[y_key]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
            elif feasible(p):
                ax.scatter(p[x_key], p[y_key], color=GREY, s=18)
            else:
                ax.scatter(p[x_key], p[y_key], facecolors="none", edgecolors=GREY, s=18)
        ax.set_title(f"{load_axis} = {load}" if load_axis else "all points", fontsize=9)
        ax.set_xlabel(x_key)
        ax.set_ylabel(y_key)
    for ax in list(axes.flat)[len(loads):]:
        ax.set_visible(False)
    fig.tight_layout()
    return _svg(fig)


def slo_heatmap(points: Sequence[dict[str, Any]], label: dict[int, str], load_axis: str | None) -> str:
    import numpy as np

    plt = _plt()
    configs = list(dict.fromkeys(label[p["id"]] for p in points))
    loads = sorted({p.get(load_axis) for p in points}, key=lambda v: (v is None, v)) if load_axis else [None]
    grid = np.full((len(configs), len(loads)), np.nan)
    for p in points:
        if p.get("slo_both_ok") is not None:
            grid[configs.index(label[p["id"]]), loads.index(p.get(load_axis) if load_axis else None)] = \
                100 * p["slo_both_ok"]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(loads), 0.8 + 0.4 * len(configs)))
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
    for i in range(len(configs)):
        for j in range(len(loads)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(loads)), [str(v) for v in loads])
    ax.set_yticks(range(len(configs)), configs)
    ax.set_xlabel(load_axis or "load")
    ax.grid(False)
    fig.colorbar(im, ax=ax, label="requests meeting the SLO (%)")
    return _svg(fig)


def max_rate_bars(items: Sequence[tuple[str, float | None, float | None]]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.45 * len(items)))
    for row, (label, rate, miss) in enumerate(items):
        ax.barh(row, rate or 0.0, color="#4e9a06")
        if miss is not None:
            ax.plot([miss, miss], [row - 0.35, row + 0.35], color="#cc0000", lw=2)
        ax.text((rate or 0.0), row, f" {rate:.2f}" if rate is not None else " none", va="center", fontsize=7)
    ax.set_yticks(range(len(items)), [label for label, _, _ in items])
    ax.set_xlabel("request rate (req/s)")
    return _svg(fig)


_METRICS = (("ttft", "TTFT (ms)", "ms"), ("tpot", "TPOT (ms)", "ms"), ("throughput", "throughput (req/s)", "rps"))


def predicted_vs_measured(rows: Sequence[dict[str, Any]]) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, (m, name, unit) in zip(axes, _METRICS):
        pairs = [(r[f"measured_{m}_{unit}"], r[f"predicted_{m}_{unit}"]) for r in rows
                 if r.get(f"measured_{m}_{unit}") and r.get(f"predicted_{m}_{unit}")
                 and not math.isnan(r[f"predicted_{m}_{unit}"])]
        if pairs:
            xs, ys = zip(*pairs)
            ax.scatter(xs, ys, s=12, color="#3465a4")
            bars = [(r[f"measured_{m}_{unit}"], iv) for r in rows if r.get(f"measured_{m}_{unit}")
                    and (iv := _row_interval(r, m, unit))]
            if bars:  # --replicas N: each row's p5-p95 over the replicas as a vertical error bar
                bx = [b[0] for b in bars]
                mid = [b[1]["p50"] for b in bars]
                ax.errorbar(bx, mid, yerr=[[mi - b[1]["p5"] for mi, b in zip(mid, bars)],
                                           [b[1]["p95"] - mi for mi, b in zip(mid, bars)]],
                            fmt="none", ecolor="#cc0000", elinewidth=1.2, capsize=2, alpha=0.8)
            lo, hi = min(min(xs), min(ys)) * 0.8, max(max(xs), max(ys)) * 1.2
            ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
            ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color=GREY, alpha=0.25)
            ax.set_xscale("log")
            ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color=GREY)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("measured")
    axes[0].set_ylabel("predicted")
    fig.tight_layout()
    return _svg(fig)


def _row_interval(row: dict[str, Any], metric: str, unit: str) -> dict[str, float] | None:
    """The row's p5/p50/p95 of a predicted figure over the replicas (validate --replicas N), when it has one."""
    iv = (row.get("intervals") or {}).get(f"predicted_{metric}_{unit}")
    if not iv or any(iv.get(k) is None or math.isnan(iv[k]) for k in ("p5", "p50", "p95")):
        return None
    return iv


def row_intervals(rows: Sequence[dict[str, Any]]) -> str:
    """Per row and metric: predicted / measured with the p5-p95 interval over the replicas as an error bar."""
    plt = _plt()
    ids = [str(r["id"]) for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(10, 0.8 + 0.28 * max(len(rows), 3)), sharey=True)
    for ax, (m, name, unit) in zip(axes, _METRICS):
        for i, r in enumerate(rows):
            meas, iv = r.get(f"measured_{m}_{unit}"), _row_interval(r, m, unit)
            if not meas or iv is None:
                continue
            lo, mid, hi = iv["p5"] / meas, iv["p50"] / meas, iv["p95"] / meas
            ax.errorbar([mid], [i], xerr=[[mid - lo], [hi - mid]], fmt="o", ms=3, color="#3465a4",
                        ecolor="#cc0000", elinewidth=1.5, capsize=2)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("predicted / measured")
    axes[0].set_yticks(range(len(ids)), [i[:40] for i in ids], fontsize=7)
    axes[0].invert_yaxis()
    fig.tight_layout()
    return _svg(fig)


def error_histogram(rows: Sequence[dict[str, Any]]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3))
    for m, name, unit in _METRICS:
        errs = [100 * (r[f"predicted_{m}_{unit}"] - r[f"measured_{m}_{unit}"]) / r[f"measured_{m}_{unit}"]
                for r in rows if r.get(f"measured_{m}_{unit}") and r.get(f"predicted_{m}_{unit}") is not None
                and not math.isnan(r[f"predicted_{m}_{unit}"])]
        if errs:
            ax.hist(errs, bins=20, alpha=0.5, label=f"{name.split(' ')[0]} (n={len(errs)})")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("signed error (%)")
    ax.set_ylabel("rows")
    ax.legend(fontsize=7)
    return _svg(fig)
