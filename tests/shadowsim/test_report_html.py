"""`--report FILE.html` on sweep, validate and predict, and `shadowsim report`: one self-contained HTML file whose
every figure renders, checked in a real headless Chromium (Debian's `chromium`).

The test adds a probe script to a copy of the page (the product has no script): after load it measures every
``<figure class="plot">`` and its inline ``<svg>`` (laid out, non-zero size, visible, with drawn shapes) and writes
the measurements into the DOM, which ``chromium --dump-dom`` prints.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from shadowsim.cli import main
from tests.system_tools import require_tool

pytestmark = pytest.mark.slow
pytest.importorskip("matplotlib", reason="the report needs the plotting extra: pip install 'shadowsim[report]'")

MODEL = ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
PROBE = """<pre id="probe"></pre><script>
window.addEventListener('load', () => {
  const out = [...document.querySelectorAll('figure.plot')].map(f => {
    const svg = f.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const st = svg ? getComputedStyle(svg) : null;
    return {id: f.id, width: r.width, height: r.height, visible: !!st && st.display !== 'none' &&
            st.visibility === 'visible' && +st.opacity > 0, shapes: svg ? svg.querySelectorAll('path,rect,use,image').length : 0};
  });
  document.getElementById('probe').textContent = JSON.stringify(out);
});
</script>"""


@pytest.fixture(autouse=True)
def _chromium() -> str:
    """Every test here needs the browser: skip (or, under CI, fail) before simulating anything."""
    return require_tool("chromium")


def _render(html: Path, tmp: Path) -> list[dict]:
    chromium = require_tool("chromium")
    probe = tmp / f"probe-{html.name}"
    probe.write_text(html.read_text().replace("</body>", PROBE + "</body>"))
    res = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--window-size=1200,900", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, flags=re.S)
    assert m and m.group(1), res.stderr[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _self_contained(text: str) -> None:
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img|iframe)\b", text), "nothing may be fetched or run"
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    assert "@media print" in text


def _check_figures(html: Path, tmp: Path, expected: set[str]) -> None:
    text = html.read_text()
    _self_contained(text)
    figs = _render(html, tmp)
    ids = {re.sub(r"^[psv]\d+-", "", f["id"]) for f in figs}
    assert expected <= ids, expected - ids
    for f in figs:  # every figure is laid out, visible and drawn
        assert f["visible"] and f["width"] > 100 and f["height"] > 60 and f["shapes"] > 5, f


def test_sweep_report_renders_every_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["sweep", *MODEL, "--gpu", "h100_sxm,a100_sxm", "--request-rate", "4,16", "--num-requests", "40",
                 "--input-len", "512", "--output-len", "64", "--slo-ttft-ms", "100", "--slo-tpot-ms", "15",
                 "--replicas", "2", "-j", "1", "--quiet", "--report", str(out), "--json"]) == 0
    (tmp_path / "s.json").write_text(capsys.readouterr().out)
    _check_figures(out, tmp_path, {"latency-percentiles", "throughput-latency", "pareto", "slo-heatmap", "memory"})
    again = tmp_path / "again.html"  # the same report from the saved --json
    assert main(["report", str(tmp_path / "s.json"), "--out", str(again)]) == 0
    capsys.readouterr()
    _check_figures(again, tmp_path, {"latency-percentiles", "throughput-latency", "pareto", "slo-heatmap", "memory"})
    text = out.read_text()
    assert "SLO attainment" in text and "TTFT &lt;= 100 ms and TPOT &lt;= 15 ms" in text  # the cover
    assert text.count("<tr>") >= 5  # the point table
    # printable: Chromium's own print-to-PDF of the page (what a reviewer's "Save as PDF" does)
    pdf = tmp_path / "r.pdf"
    subprocess.run([require_tool("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}", out.as_uri()], capture_output=True,
                   timeout=120)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and data.count(b"/Type /Page") - data.count(b"/Type /Pages") >= 2


def test_validate_and_predict_reports_and_report_from_json(tmp_path: Path, shared_dir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    rows = (shared_dir / "data/validation/sglang_qwen3_32b_h100.csv").read_text().splitlines()
    csv = tmp_path / "m.csv"
    csv.write_text("\n".join(rows[:4]) + "\n")
    v = tmp_path / "v.html"
    assert main(["validate", str(csv), "-q", "--report", str(v), "--json", "--variability", "measured",
                 "--replicas", "3"]) == 0
    (tmp_path / "v.json").write_text(capsys.readouterr().out)
    # --replicas 3: every row carries its p5-p95 intervals, drawn as error bars per row
    vrows = json.loads((tmp_path / "v.json").read_text())["rows"]
    assert all(r["intervals"]["predicted_ttft_ms"]["p95"] >= r["intervals"]["predicted_ttft_ms"]["p5"] for r in vrows)
    assert any(r["intervals"]["predicted_ttft_ms"]["p95"] > r["intervals"]["predicted_ttft_ms"]["p5"] for r in vrows)
    _check_figures(v, tmp_path, {"scatter", "error-histogram", "row-intervals"})
    assert "red bars: p5-p95 over the replicas" in v.read_text()
    p = tmp_path / "p.html"
    assert main(["predict", *MODEL, "--gpu", "h100_sxm", "--concurrency", "8", "--num-requests", "32",
                 "--slo-ttft-ms", "200", "--replicas", "3", "--random-range-ratio", "0.5", "--quiet",
                 "--report", str(p), "--json"]) == 0
    (tmp_path / "p.json").write_text(capsys.readouterr().out)
    _check_figures(p, tmp_path, {"latency-cdf", "intervals", "kv-timeline", "memory"})
    both = tmp_path / "both.html"
    assert main(["report", str(tmp_path / "p.json"), str(tmp_path / "v.json"), "--out", str(both),
                 "--title", "sign-off"]) == 0
    assert json.loads(capsys.readouterr().out)["sections"] == 2
    _check_figures(both, tmp_path, {"latency-cdf", "memory", "scatter", "error-histogram"})
    assert "<title>sign-off</title>" in both.read_text()


def test_rate_search_and_all_skipped_sweeps_still_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    knee = tmp_path / "knee.html"
    assert main(["sweep", *MODEL, "--gpu", "h100_sxm", "--slo-ttft-ms", "300", "--max-rate-under-slo",
                 "--request-rate", "1,32", "--rate-tolerance", "0.3", "--num-requests", "30", "-j", "1", "-q",
                 "--report", str(knee)]) == 0
    capsys.readouterr()
    _check_figures(knee, tmp_path, {"max-rate"})
    none = tmp_path / "none.html"  # 70B in bf16 does not fit one H100: the report says so instead of failing
    assert main(["sweep", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100_sxm", "--request-rate",
                 "1", "--num-requests", "4", "-j", "1", "-q", "--report", str(none)]) == 1
    capsys.readouterr()
    assert "No point could be simulated" in none.read_text() and "does not fit" in none.read_text()
