"""Test support: find promtool/prometheus, start a throwaway Prometheus, query it, read PromQL and the contract.

Nothing here is a test. Binaries come from Debian's `prometheus` package, which .ci/run installs; when they
are missing the tests FAIL (a skipped deploy check would hide a broken deployment).
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RULE_FILES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
DASHBOARD_FILES = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))

# A PromQL metric name: shadowsim_* (exported), shadowsim:* (recorded here), sglang:* (SGLang's own).
METRIC_RE = re.compile(r"\b(shadowsim_[a-z0-9_]+|shadowsim:[a-z0-9_:]+|sglang:[a-z0-9_]+)")


def require_binary(name: str) -> str:
    from tests.system_tools import require_tool

    return require_tool(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_rules() -> list[dict[str, Any]]:
    """Every rule of deploy/prometheus/rules/*.yml, each with its group name under `_group`."""
    rules = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.extend({**r, "_group": group["name"]} for r in group["rules"])
    return rules


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in DASHBOARD_FILES}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Data panels (rows excluded), including those nested in collapsed rows."""
    out = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def contract_metrics() -> dict[str, str]:
    """docs/metrics.md's table: metric name -> type (`gauge`, `counter`, `histogram`, ...)."""
    text = (REPO / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `(shadowsim_[a-z0-9_]+)` \| ([a-z]+)", text, flags=re.M)
    return dict(rows)


def scraped_name(metric: str, kind: str) -> str:
    """The series name a contract metric has in Prometheus (histograms are stored as `_bucket` etc.)."""
    return metric + "_bucket" if kind == "histogram" else metric


@dataclass
class Prometheus:
    """A running Prometheus on loopback, queried through its HTTP API."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # 400/422 carry the PromQL error in the body
            return json.loads(exc.read())

    def query(self, expr: str) -> dict[str, Any]:
        """Instant query; returns the API's JSON (`status`, `data` or `error`)."""
        return self.get("/api/v1/query", query=expr)

    def names(self) -> set[str]:
        return set(self.get("/api/v1/label/__name__/values")["data"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_prometheus(config: dict[str, Any], workdir: Path) -> Prometheus:
    binary = require_binary("prometheus")
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return prom
        except OSError:
            pass
        time.sleep(0.2)
    prom.stop()
    pytest.fail(f"prometheus not ready after 30 s:\n{log.read_text()[-3000:]}")
