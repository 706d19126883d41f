"""Alert and recording rules: promtool validates them and runs their unit tests.

deploy/prometheus/tests/shadowsim-alerts.test.yml feeds synthetic series through the rules and states which
alerts fire, with their labels and rendered annotations. These tests also enforce that the unit tests cover
every alert both ways: a case where it fires, and, after the alert's `for` has elapsed, a series that is
present but asserted not to fire. promtool compares the exact set of firing alerts, so a series left out of
`exp_alerts` is an assertion that it does not fire.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import _prom

pytestmark = pytest.mark.prometheus

UNIT_TESTS = _prom.DEPLOY / "prometheus" / "tests" / "shadowsim-alerts.test.yml"
SERIES_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>.*)\}$")


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_prom.require_binary("promtool"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def _duration_s(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", text))


def _labels(series: str) -> dict[str, str]:
    m = SERIES_RE.match(series)
    assert m, series
    return dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in _prom.load_rules() if "alert" in r}


def test_promtool_check_rules_passes() -> None:
    result = _promtool("check", "rules", *map(str, _prom.RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(_prom.RULE_FILES)


def test_promtool_check_rules_rejects_a_broken_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: g\n    rules:\n      - alert: X\n        expr: rate(shadowsim_x[5m]\n")
    result = _promtool("check", "rules", str(bad))
    assert result.returncode != 0


def test_promtool_unit_tests_pass() -> None:
    result = _promtool("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_not_firing_case() -> None:
    spec = yaml.safe_load(UNIT_TESTS.read_text())
    fires: set[str] = set()
    holds_back: set[str] = set()
    alerts = _alerts()
    for case in spec["tests"]:
        inputs = [_labels(s["series"]) for s in case["input_series"]]
        for check in case.get("alert_rule_test", []):
            name = check["alertname"]
            assert name in alerts, f"unit test for unknown alert {name}"
            if _duration_s(check["eval_time"]) < _duration_s(alerts[name].get("for", "0s")):
                continue  # still pending: says nothing about the condition
            expected = [a["exp_labels"] for a in check["exp_alerts"]]
            if expected:
                fires.add(name)
            # A series none of whose labels (other than job) match a firing alert is asserted not to fire.
            for labels in inputs:
                ident = {k: v for k, v in labels.items() if k != "job"}
                if not any(ident.items() <= {k: str(v) for k, v in e.items()}.items() for e in expected):
                    holds_back.add(name)
    assert sorted(set(alerts) - fires) == [], "alerts never shown firing"
    assert sorted(set(alerts) - holds_back) == [], "alerts never shown holding back"


@pytest.mark.parametrize("alert", sorted(_alerts()))
def test_unit_tests_fail_when_an_alert_stops_firing(alert: str, tmp_path: Path) -> None:
    """Mutation check: drop the alert from its rule file, and its promtool unit test must fail."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    for path in _prom.RULE_FILES:
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            group["rules"] = [r for r in group["rules"] if r.get("alert") != alert]
        (rules_dir / path.name).write_text(yaml.safe_dump(doc))
    tests_dir = tmp_path / "tests"
    tests_dir.mkdir()
    (tests_dir / UNIT_TESTS.name).write_text(UNIT_TESTS.read_text())
    result = _promtool("test", "rules", UNIT_TESTS.name, cwd=tests_dir)
    assert result.returncode != 0
    assert alert in result.stdout + result.stderr


def test_every_alert_is_documented_and_labelled() -> None:
    runbook = (_prom.REPO / "docs" / "operations.md").read_text()
    headings = {h.strip() for h in re.findall(r"^#{2,4} (.+)$", runbook, flags=re.M)}
    for name, rule in _alerts().items():
        ann = rule.get("annotations", {})
        assert {"summary", "description", "runbook_url"} <= set(ann), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        # Absolute, from deploy/site.yaml's base: Alertmanager and Grafana open it as a link (a repo-relative path
        # opens nothing).
        assert ann["runbook_url"] == f"{_runbook_base()}#{name.lower()}", name
        assert ann["runbook_url"].startswith(("https://", "http://")), name
        assert name in headings, f"docs/operations.md has no section `{name}`"


def test_rule_names_follow_conventions() -> None:
    for rule in _prom.load_rules():
        if "record" in rule:
            assert re.fullmatch(r"shadowsim:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]
        else:
            assert re.fullmatch(r"Shadowsim[A-Z][A-Za-z0-9]+", rule["alert"]), rule["alert"]


def _runbook_base() -> str:
    return yaml.safe_load((_prom.DEPLOY / "site.yaml").read_text())["runbook_base_url"].rstrip("#/")


def test_runbook_urls_follow_the_configured_base(tmp_path: Path) -> None:
    """deploy/tools/render.py writes base#section into every alert; another base gives other URLs, same sections."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render", _prom.DEPLOY / "tools" / "render.py")
    assert spec is not None and spec.loader is not None
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    alerts_file = _prom.DEPLOY / "prometheus" / "rules" / "shadowsim-alerts.yml"
    text = render.alert_rules_with_runbooks(alerts_file, "https://wiki.example.org/ops/shadowsim")
    rules = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    assert len(rules) >= 10
    assert {r["annotations"]["runbook_url"] for r in rules} == {
        f"https://wiki.example.org/ops/shadowsim#{r['alert'].lower()}" for r in rules}
    # the comments of the hand-written file survive the rewrite
    assert text.splitlines()[0] == alerts_file.read_text().splitlines()[0]
