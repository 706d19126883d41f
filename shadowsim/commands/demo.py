"""End-to-end demo on the embedded broker with EMULATED SGLang instances. No arguments and no network needed.

It starts the embedded Kafka-compatible broker (Tansu), then a traffic source that emits SGLang-format events for
three emulated instances: real arrival traces (Mooncake conversation, Azure code, Azure conversation) replayed
through a reference twin (the simulator itself, with seeded noise on step times), compressed in time so that
--duration shows the whole scenario. Partway (at 40 % of the duration) one instance is slowed down ×1.5. The
live shadow (`shadowsim run`'s engine) consumes the events, serves /metrics and /healthz on --metrics-port, shows
a live table (per instance: predicted vs actual, error, drift alerts), and ends with a summary.

Examples:
  shadowsim demo                              # 60 s with a live terminal view
  shadowsim demo --no-ui --duration 30 --metrics-port 9464
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from simcore.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=60.0, help="seconds of emulated traffic (default 60, minimum 10; the slowdown starts at 40 %% of it and its drift "
                   "needs about 10 s to show, so use 30 or more to see it)")
    p.add_argument("--metrics-port", type=int, default=9400,
                   help="port of /metrics and /healthz (default 9400; 0 = any free port)")
    p.add_argument("--no-ui", action="store_true", help="print a one-line status every few seconds instead of the "
                   "live table (also the default when stdout is not a terminal)")
    p.add_argument("--seed", type=int, default=7, help="seed of the emulated noise (default 7)")
    p.add_argument("--predictions", type=Path, help="also write per-request predictions (JSONL) here")
    p.add_argument("--latency-backend", choices=("perf", "linear"), default="perf",
                   help="latency model of twins and emulator: measured-table perf model (default) or linear")


def run(args: argparse.Namespace) -> int:
    if args.duration < 10:
        print("shadowsim: error: --duration: must be at least 10 s (the scenario needs time to show drift)",
              file=sys.stderr)
        return 2
    try:
        return _run(args)
    except UserError as exc:
        print(f"shadowsim: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from shadowsim.demo.publisher import Publisher  # noqa: PLC0415
    from shadowsim.demo.scenario import SLOW_INSTANCE, build_scenario, scenario_events  # noqa: PLC0415
    from shadowsim.demo.ui import live_screen, status_line, summary  # noqa: PLC0415
    from shadowsim.shadow.runtime import ShadowRuntime  # noqa: PLC0415
    from streams.broker import EmbeddedBroker  # noqa: PLC0415

    ui = not args.no_ui and sys.stdout.isatty()
    state_dir = tempfile.mkdtemp(prefix="shadowsim-demo-")  # the broker is in memory: so is a demo's state
    sc = build_scenario(args.duration, seed=args.seed, latency_backend=args.latency_backend,
                        snapshot_dir=state_dir, metrics_port=args.metrics_port)
    updates: dict[str, Any] = {"kafka": sc.shadow.kafka.model_copy(update={"group": f"shadowsim-demo-{time.time_ns()}"})}
    if args.predictions:
        updates["predictions_path"] = args.predictions
    print("shadowsim demo: emulating 3 SGLang instances (EMULATED: trace replay through a reference twin)...",
          flush=True)
    lead_s = 3.0  # consumer-group join and broker warm-up before the first event is due
    t0 = time.time() + lead_s
    items = scenario_events(sc, t0, latency_backend=args.latency_backend)
    with EmbeddedBroker(die_with_parent=True) as broker:  # no orphan broker if the demo is SIGKILLed
        k = sc.shadow.kafka
        broker.create_topics({k.topic: 3, k.dead_letter_topic: 1})
        updates["kafka"] = updates["kafka"].model_copy(update={"bootstrap_servers": broker.bootstrap_servers})
        cfg = sc.shadow.model_copy(update=updates)
        rt = ShadowRuntime(cfg, metrics_host="127.0.0.1")
        print(f"broker {broker.bootstrap_servers}; metrics http://127.0.0.1:{rt.metrics_port}/metrics; "
              f"{len(items)} events over {args.duration:.0f} s", flush=True)
        pub = Publisher(broker.bootstrap_servers, k.topic, items, t0, end_ts=t0 + args.duration)
        pub.start()
        stop = threading.Event()
        end_wall = t0 + args.duration + 2.0  # a little time to consume the last records
        last_print = [0.0]

        def on_batch(_svc: Any) -> None:
            now = time.time()
            if now >= end_wall:
                stop.set()
            period = 1.0 if ui else 5.0
            if now - last_print[0] >= period:
                last_print[0] = now
                view = rt.view()
                if ui:
                    sys.stdout.write(live_screen(view, now - t0, args.duration, rt.metrics_port, SLOW_INSTANCE,
                                                 sc.slow_from_s))
                else:
                    print(status_line(view, now - t0), flush=True)

        try:
            rt.run(stop=stop, on_batch=on_batch)
        finally:
            pub.stop()
            view = rt.view()
            rt.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    print(summary(view, t0, SLOW_INSTANCE, sc.slow_from_s), flush=True)
    if pub.error is not None:
        print(f"shadowsim: error: traffic source failed: {pub.error}", file=sys.stderr)
        return 1
    return 0
