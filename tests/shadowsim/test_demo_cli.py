"""`shadowsim demo --no-ui` end to end: embedded broker, EMULATED instances, the shadow, /metrics, a summary.
While it runs, a scrape of /metrics holds every metric of the docs/metrics.md contract and passes promtool."""
from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from streams.broker import free_port
from tests.system_tools import require_tool

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_serves_the_contract_metrics_and_ends_with_a_summary(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "shadowsim", "demo", "--no-ui", "--duration", "12",
                             "--metrics-port", str(port), "--predictions", str(tmp_path / "p.jsonl")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    scrape = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1.0)
            try:
                scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                continue
            if "shadowsim_events_dead_lettered_total{" in scrape and 'source="predicted"' in scrape \
                    and "shadowsim_shadow_lag_seconds{" in scrape:
                break
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    assert "shadowsim demo summary" in text and "EMULATED" in text
    for iid in ("emu-mooncake-0", "emu-azure-code-1", "emu-azure-conv-2"):
        assert re.search(rf"^  {iid}\s+verdict now:", text, flags=re.M), text[-2000:]
    # every contract metric has at least one sample in the mid-run scrape
    doc = (REPO / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^\| `(shadowsim_[a-z_]+)`", doc, flags=re.M))
    sampled = set(re.findall(r"^(shadowsim_[a-z_]+?)(?:_bucket|_sum|_count)?\{", scrape, flags=re.M))
    assert names <= sampled, names - sampled
    assert 'emulated="true"' in scrape
    res = subprocess.run([promtool, "check", "metrics"], input=scrape.encode(), capture_output=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res
    assert (tmp_path / "p.jsonl").stat().st_size > 0
