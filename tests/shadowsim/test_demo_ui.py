"""The demo's terminal output: live table and summary, built from a read-only view of a replayed scenario."""
from __future__ import annotations

from typing import Any

from shadow_fixtures import T0_TS

from shadowsim.demo.scenario import SLOW_INSTANCE
from shadowsim.demo.ui import live_screen, status_line, summary
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sources import MemorySource
from shadowsim.shadow.view import build_view


def test_summary_and_live_view_label_emulated_instances_and_report_drift(short_log: Any) -> None:
    sc, recs = short_log
    svc = ShadowService(sc.shadow, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: T0_TS + 30)
    svc.run(idle_timeout_s=0, checkpoint_at_end=False)
    view = build_view(svc)
    text = summary(view, T0_TS, SLOW_INSTANCE, sc.slow_from_s)
    assert "EMULATED" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("emu-")}
    assert set(rows) == {"emu-mooncake-0", SLOW_INSTANCE, "emu-azure-conv-2"}
    actual = {v.instance: v.counters["requests_finished"]["actual"] for v in view.instances}
    for iid, line in rows.items():
        assert int(line.split()[1]) == actual[iid]  # the requests column
    slow_line = next(x for x in text.splitlines() if x.strip().startswith(SLOW_INSTANCE) and "verdict" in x)
    assert "model drift at t=" in slow_line
    assert f"from t={sc.slow_from_s:.1f}s" in text
    screen = live_screen(view, 12.0, sc.duration_s, 9400, SLOW_INSTANCE, sc.slow_from_s)
    assert screen.startswith("\x1b[H\x1b[2J") and "EMULATED" in screen and "alerts fired:" in screen
    assert SLOW_INSTANCE in status_line(view, 12.0)


def test_status_line_before_the_first_event_says_it_waits() -> None:
    from exporters.view import ShadowView

    empty = ShadowView(instances=[], dead_letters={}, records_processed=0, checkpoints=0)
    assert status_line(empty, -0.6) == "[demo t= -0.6s records=0] waiting for events"
