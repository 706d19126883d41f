"""The per-instance series budget of /metrics (issue 11, "a series budget per instance"), checked on the real
prometheus_client exposition (text format and OpenMetrics, parsed back by prometheus_client's own parsers) and by
promtool.

One SGLang instance may export at most ``max_series_per_instance`` series, all its DP ranks' twins together
(``InstanceView.series_group``); the rest are left out whole (a histogram keeps all its buckets or goes) and
counted in ``shadowsim_series_dropped{sglang_instance}``. Other instances are not affected.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections import Counter

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporters.prometheus import make_registry
from exporters.view import InstanceView, ShadowView
from shadowsim.shadow.stats import InstanceStats

MODES = ("free", "anchored")


def _twin(instance: str, group: str = "") -> InstanceView:
    st = InstanceStats()
    for m in ("ttft", "tpot", "e2e"):
        for src in ("predicted", "actual"):
            st.latency[m][src].observe(0.05)
        for mode in MODES:
            st.ape[m][mode].observe(0.1)
    for c in st.counters:
        st.counters[c]["predicted"] = 7
        st.counters[c]["actual"] = 8
    return InstanceView(
        instance=instance, model="Qwen/Qwen3-0.6B", version="0.1.0", latency_model="linear", calibration_hash="none",
        emulated=False, latency=st.latency, ape=st.ape,
        mape={mode: {"ttft": 0.1, "tpot": 0.1, "e2e": 0.1} for mode in MODES},
        window_counts={mode: {"ttft": 3, "tpot": 3, "e2e": 3} for mode in MODES},
        thresholds={"ttft": 0.5, "tpot": 0.2, "e2e": 0.3}, drift={"model": False, "performance": False},
        drift_explanation="", factors={"prefill": 1.0, "decode": 1.1}, factor_baseline={"prefill": 1.0, "decode": 1.0},
        counters=st.counters, gauges={k: {"predicted": 1.0, "actual": 2.0} for k in ("queue", "running", "kv_usage")},
        events_processed=10, events_late=0, requests_estimated=0, shadow_lag_s=0.5, last_event_wall_ts=1.7e9,
        simulated_ts=1.7e9, alerts=[], series_group=group)


def _view(budget: int | None) -> ShadowView:
    ranks = [_twin(f"dsr1#dp{r}", "dsr1") for r in range(12)]  # a DP-12 server: 12 rank twins, one budget
    return ShadowView([*ranks, _twin("small")], {"json": 3}, 100, 1, max_series_per_instance=budget)


def _series(text: str, parse=text_string_to_metric_families) -> tuple[Counter[str], dict[str, float], list]:
    """Series per SGLang instance (DP ranks folded into their instance), the dropped gauge, and all families."""
    per: Counter[str] = Counter()
    dropped: dict[str, float] = {}
    fams = list(parse(text))
    for fam in fams:
        for s in fam.samples:
            iid = s.labels.get("sglang_instance")
            if iid is None:
                continue
            if fam.name == "shadowsim_series_dropped":
                dropped[iid] = s.value
            else:
                per[iid.split("#dp", 1)[0]] += 1
    return per, dropped, fams


def test_without_a_budget_every_series_is_exported() -> None:
    per, dropped, _ = _series(generate_latest(make_registry(lambda: _view(None))).decode())
    one = per["small"]
    assert 250 <= one <= 300  # the fixed set of one twin (docs/metrics.md: about 270)
    assert per["dsr1"] == 12 * one
    assert dropped == {"dsr1": 0.0, "small": 0.0}  # one gauge per SGLang instance, 0: nothing left out


@pytest.mark.parametrize("budget", [50, 700, 3000])
def test_budget_caps_one_instance_counts_the_rest_and_spares_the_others(budget: int) -> None:
    full, _, _ = _series(generate_latest(make_registry(lambda: _view(None))).decode())
    text = generate_latest(make_registry(lambda: _view(budget))).decode()
    per, dropped, fams = _series(text)
    for iid in ("dsr1", "small"):
        assert per[iid] <= budget
        assert per[iid] + dropped[iid] == full[iid]  # every series left out is counted
    assert dropped["dsr1"] > 0
    if full["small"] <= budget:  # the single-twin instance fits: the DP server's overflow costs it nothing
        assert per["small"] == full["small"] and dropped["small"] == 0
    # small series first: with room for them, every rank twin still says it is up and what it counted
    up = {s.labels["sglang_instance"] for f in fams if f.name == "shadowsim_twin_up" for s in f.samples}
    if budget >= 12 * 40:
        assert {f"dsr1#dp{r}" for r in range(12)} <= up
    # histograms are whole or absent: every exported bucket set ends in +Inf and has its _count and _sum
    for fam in fams:
        if fam.type != "histogram":
            continue
        by_series: dict[tuple, set[str]] = {}
        for s in fam.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            by_series.setdefault(key, set()).add(s.name[len(fam.name):] + (f"le={s.labels['le']}" if "le" in
                                                                              s.labels else ""))
        for key, parts in by_series.items():
            assert {"_count", "_sum", "_bucketle=+Inf"} <= parts, (fam.name, key)


def test_budget_holds_in_openmetrics_and_promtool_accepts_the_exposition() -> None:
    reg = make_registry(lambda: _view(700))
    per, dropped, _ = _series(generate_openmetrics(reg).decode(), parse_openmetrics)
    assert per["dsr1"] <= 700 and dropped["dsr1"] > 0
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    res = subprocess.run([promtool, "check", "metrics"], input=generate_latest(reg), capture_output=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), (res.stdout, res.stderr)


def test_the_budget_is_the_services_limit(tmp_path) -> None:
    """build_view passes limits.max_series_per_instance and groups DP rank twins under their SGLang instance."""
    from shadowsim.shadow.config import InstanceConfig, LimitsConfig, ShadowConfig, SnapshotConfig
    from shadowsim.shadow.engine import engine_factory
    from shadowsim.shadow.service import ShadowService
    from shadowsim.shadow.sources import MemorySource, Record
    from shadowsim.shadow.view import build_view
    from simcore.events import DecodeBatch

    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       limits=LimitsConfig(max_series_per_instance=60),
                       snapshot=SnapshotConfig(dir=tmp_path / "s", every_s=1e9))
    evs = [DecodeBatch(instance_id="dp", ts=1.8e9 + r, source="t", event_id=f"e{r}", running_reqs=1, kv_tokens=10,
                       dp_rank=r) for r in range(4)]
    recs = tuple(Record("t", 0, i, b"dp", [ev]) for i, ev in enumerate(evs))
    svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: 1.8e9)
    svc.run(idle_timeout_s=0)
    view = build_view(svc)
    assert view.max_series_per_instance == 60
    assert {v.series_group for v in view.instances} == {"dp"} and len(view.instances) == 4
    full = dataclasses.replace(view, max_series_per_instance=None)
    n_full = _series(generate_latest(make_registry(lambda: full)).decode())[0]["dp"]
    per, dropped, _ = _series(generate_latest(make_registry(lambda: view)).decode())
    assert per["dp"] <= 60 < n_full and per["dp"] + dropped["dp"] == n_full
    svc.close()
