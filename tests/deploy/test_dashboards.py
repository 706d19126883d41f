"""Grafana dashboards: structure that Grafana needs and conventions that keep panels honest.

Whether each query returns data is checked against a real Prometheus in test_dashboards_live.py; here the JSON
itself: the layout fits the 24-column grid without overlaps, every query goes through the `$datasource`
variable and filters on `$cluster`, rates use `$__rate_interval`, and the variables cluster, model and instance
exist. Provisioning must find the files where compose mounts them (test_manifests.py).
"""
from __future__ import annotations

import re

import pytest

from tests.deploy import _prom

DASHBOARDS = _prom.load_dashboards()


def test_the_three_dashboards_exist_with_unique_uids() -> None:
    assert set(DASHBOARDS) == {"shadowsim-overview.json", "shadowsim-instance.json", "shadowsim-pipeline.json"}
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == 3
    assert all(d["title"].startswith("shadowsim / ") for d in DASHBOARDS.values())


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_variables_cluster_model_instance(name: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    # $instance lists shadowsim's `sglang_instance` label (the target's own `instance` is its host:port).
    for var, label in (("cluster", "cluster"), ("model", "model"), ("instance", "sglang_instance")):
        v = variables[var]
        assert v["type"] == "query" and v["includeAll"] and v["allValue"] == ".*", var
        assert re.fullmatch(r"label_values\(.+, " + label + r"\)", v["query"]["query"]), v["query"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_layout_fits_the_grid_without_overlap(name: str) -> None:
    cells: dict[tuple[int, int], str] = {}
    ids = []
    for panel in DASHBOARDS[name]["panels"]:
        ids.append(panel["id"])
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] >= 1, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_query_uses_the_variables(name: str) -> None:
    panels = _prom.panels(DASHBOARDS[name])
    assert len(panels) >= 6
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["description"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and refs, panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert target["datasource"]["uid"] == "${datasource}"
            assert "$cluster" in expr, f"{panel['title']}: {expr}"
            # Every range inside rate()/increase() is Grafana's, so zooming out keeps enough samples.
            for window in re.findall(r"\((?:rate|increase)\([^\[]*\[([^\]]+)\]", expr):
                assert window == "$__rate_interval", f"{panel['title']}: {expr}"


def test_dashboards_cover_the_issue_s_panels() -> None:
    """Predicted vs actual TTFT/TPOT/throughput, error, KV, cache hit, calibration, lag, events, dead letters."""
    exprs = " ".join(t["expr"] for d in DASHBOARDS.values() for p in _prom.panels(d) for t in p["targets"])
    for metric in ("shadowsim_ttft_seconds_bucket", "shadowsim_tpot_seconds_bucket", "shadowsim_e2e_seconds_bucket",
                   "shadowsim_output_tokens_total", "shadowsim_prediction_mape_ratio", "shadowsim_kv_usage_ratio",
                   "shadowsim_cached_tokens_total", "shadowsim_calibration_factor", "shadowsim_shadow_lag_seconds",
                   "shadowsim_events_processed_total", "shadowsim_events_dead_lettered_total"):
        assert metric in exprs, metric
