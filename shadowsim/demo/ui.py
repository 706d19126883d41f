"""Terminal output of the demo: a live per-instance table (ANSI, on a TTY), one-line status, final summary."""
from __future__ import annotations

from typing import Any

from exporters.view import InstanceView, ShadowView

CLEAR = "\x1b[H\x1b[2J"
RED, GREEN, YELLOW, BOLD, RESET = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[1m", "\x1b[0m"


def _mean(h: Any) -> float | None:
    n = h.count
    return h.total / n if n else None


def _ms(x: float | None) -> str:
    return "   -   " if x is None else f"{x * 1000:7.1f}"


def _pct(x: float) -> str:
    return f"{x * 100:5.1f}%"


def instance_row(v: InstanceView, color: bool) -> str:
    lat = v.latency
    drift = [k for k, on in v.drift.items() if on]
    flag = ",".join(drift) if drift else "ok"
    if color:
        flag = (RED if drift else GREEN) + flag + RESET
    return (f"{v.instance:<18} {v.counters['requests_finished']['actual']:>6} "
            f"{_ms(_mean(lat['ttft']['predicted']))} {_ms(_mean(lat['ttft']['actual']))} "
            f"{_ms(_mean(lat['tpot']['predicted']))} {_ms(_mean(lat['tpot']['actual']))}  "
            f"{_pct(v.mape['free']['ttft'])} {_pct(v.mape['free']['tpot'])} {_pct(v.mape['anchored']['tpot'])}  "
            f"×{v.factors.get('decode', 1.0):4.2f} {(v.shadow_lag_s or 0):5.1f}s  {flag}")


HEADER = (f"{'instance (EMULATED)':<18} {'reqs':>6} {'TTFT ms':>7} {'(act)':>7} {'TPOT ms':>7} {'(act)':>7}  "
          f"{'ttftE':>6} {'tpotE':>6} {'anchE':>6}  {'decode':>5} {'lag':>6}  drift")


def live_screen(view: ShadowView, elapsed_s: float, duration_s: float, port: int, slow: str, slow_at_s: float) -> str:
    lines = [f"{BOLD}shadowsim demo{RESET} — EMULATED SGLang instances (reference twin + noise), not a real server",
             f"t = {elapsed_s:5.1f} / {duration_s:.0f} s   metrics: http://127.0.0.1:{port}/metrics   "
             f"slowdown ×1.5 on {slow} at t = {slow_at_s:.0f} s",
             "predicted vs (act)ual means; ttftE/tpotE: free-running MAPE over the window; anchE: anchored TPOT MAPE",
             "", BOLD + HEADER + RESET]
    lines += [instance_row(v, True) for v in view.instances]
    alerts = [(v.instance, a) for v in view.instances for a in v.alerts if a["on"]]
    lines += ["", f"{YELLOW}alerts fired:{RESET} " + (", ".join(f"{i} {a['kind']} drift" for i, a in alerts) or "none")]
    return CLEAR + "\n".join(lines) + "\n"


def _window_pct(v: InstanceView, metric: str) -> str:
    """Free-running MAPE of ``metric``, or "-" while the window holds no finished request (as /metrics)."""
    return _pct(v.mape["free"][metric]) if v.window_counts.get("free", {}).get(metric, 0) else "   -  "


def status_line(view: ShadowView, elapsed_s: float) -> str:
    parts = [f"{v.instance} ttft-err {_window_pct(v, 'ttft')} tpot-err {_window_pct(v, 'tpot')}"
             f"{' DRIFT(' + ','.join(k for k, on in v.drift.items() if on) + ')' if any(v.drift.values()) else ''}"
             for v in view.instances]
    # before the first event (t < 0 during the broker's warm-up) there is no twin yet
    return f"[demo t={elapsed_s:5.1f}s records={view.records_processed}] " + ("; ".join(parts) or "waiting for events")


def summary(view: ShadowView, t0_ts: float, slow: str, slow_at_s: float) -> str:
    out = ["", "=" * 100, "shadowsim demo summary (instances were EMULATED: trace replay through a reference twin)",
           "=" * 100, HEADER]
    out += [instance_row(v, False) for v in view.instances]
    out.append("")
    for v in view.instances:
        fired = [a for a in v.alerts if a["on"]]
        first = {k: next((a["ts"] - t0_ts for a in fired if a["kind"] == k), None) for k in ("model", "performance")}
        text = ", ".join(f"{k} drift at t={t:.1f}s" for k, t in first.items() if t is not None) or "no alert fired"
        out.append(f"  {v.instance:<18} verdict now: {v.drift_explanation}; {text}")
    out.append(f"  injected: ×1.5 step time on {slow} from t={slow_at_s:.1f}s")
    dl = sum(view.dead_letters.values())
    out.append(f"  records processed: {view.records_processed}; dead-lettered: {dl} "
               f"(the demo sends one malformed record on purpose)")
    return "\n".join(out)
