"""docs/api.md is executable: every ```python block runs, in order, in one namespace, in a scratch directory that
sees ../shared like the repository does. A failing assertion in the doc fails this test, so the page cannot drift
from the code."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"

pytestmark = pytest.mark.slow


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_doc_has_examples_for_every_function() -> None:
    code = "\n".join(_blocks())
    for name in ("shadowsim.predict(", "shadowsim.sweep(", "shadowsim.validate(", "shadowsim.report(",
                 "shadowsim.scenario(", "shadowsim.closed_loop(", "shadowsim.open_loop(", "shadowsim.from_trace(",
                 ".pareto()", ".best(", ".max_rate_under_slo(", "replicas=", "to_dataframe()", "with_model_error("):
        assert name in code, name


def test_docs_api_examples_run(tmp_path: Path, shared_dir: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    (tmp_path / "shared").symlink_to(shared_dir)  # the doc reads ../shared/data like a checkout does
    old = Path.cwd()
    os.chdir(work)
    ns: dict[str, object] = {"__name__": "api_doc"}
    try:
        for i, block in enumerate(_blocks()):
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), ns)  # noqa: S102 - our own doc
    finally:
        os.chdir(old)
    html = (work / "capacity.html").read_text()
    for fig in ("latency-cdf", "throughput-latency", "pareto", "slo-heatmap", "memory", "scatter", "error-histogram"):
        assert f"-{fig}'" in html, fig
