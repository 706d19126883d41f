"""Ingest benchmark: events per second end to end through one ``shadowsim run`` process, and the per-event cost
with many requests in flight.

``events_per_s`` — real SGLang log lines (every dated line of ``../shared/data/sglang_logs`` that yields events:
``Prefill batch`` / ``Decode batch`` / retraction / startup lines, one instance per log file) are cycled, with their
timestamp prefix moved forward (the rest of each line is SGLang's, byte for byte), into ``N`` records on a
4-partition topic of the embedded broker (keyed by instance, as a log shipper would). Then ``python -m shadowsim
run`` is started as its own process; the figure is records applied per wall second between the first and the last
record applied (read from its ``/readyz`` every ``PROGRESS_POLL_S`` = 0.2 s: cheap, where a ``/metrics`` scrape
renders every series; the process start and group join are outside the window); and
``events_per_cpu_s``, the same records per CPU second the process used in that window (``/proc``): what one free
core gives, on a machine whose cores are shared (``cpu_share`` = the share of a core the process had). Each record
holds one line (``events_per_record`` = 1).

``us_per_event_pending_10`` / ``us_per_event_pending_4000`` — one instance with that many requests in flight (arrived,
not finished: each new arrival is matched by the finish of the oldest one, plus a decode-batch line per request,
all as canonical events through ``ShadowService`` on an in-memory source, checkpoints included). The work per event
must not grow with the requests in flight.

``python -m benchmarks ingest [--json] [--records N] [--poll-s S]`` (default 200,000 records, 0.2 s). ``--json``
prints only the JSON line.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ACCEPTS_ARGS = True
REPO = Path(__file__).resolve().parents[1]
LOGS = REPO.parent / "shared" / "data" / "sglang_logs"
_DATED = re.compile(rb"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d+)?")
T0 = dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
LINES_PER_INSTANCE_S = 50.0  # event time between two lines of one instance: 20 ms
#: wall seconds between two reads of the process's progress (/readyz). Each read costs the measured process about a
#: millisecond of CPU (prometheus_client's server runs a thread per request), which at 20 reads a second (0.05 s, the
#: interval before 2026-12-01) was ~4 CPU µs per record at 12,000 records/s: the benchmark measured its own probe.
#: The rate itself does not depend on the interval (it is the counts read at two instants over the time between).
PROGRESS_POLL_S = 0.2


def corpus() -> dict[str, tuple[list[bytes], list[bytes]]]:
    """instance id -> (startup lines, steady-state lines) of one log: its dated lines that give events, in file
    order, timestamp prefix intact. Startup lines (``server_config``) are sent once, as a server prints them once;
    the steady-state lines (batch and retraction lines) are cycled."""
    from streams.decode import decode_record

    out: dict[str, tuple[list[bytes], list[bytes]]] = {}
    for path in sorted(LOGS.glob("*.log")):
        startup, steady = [], []
        for line in path.read_bytes().split(b"\n"):
            if not _DATED.match(line):
                continue
            evs = decode_record(line, fmt="auto").events
            if evs:
                (startup if all(e.kind == "server_config" for e in evs) else steady).append(line)
        if steady:
            out[path.stem[:40]] = (startup, steady)
    if not out:
        raise SystemExit(f"no SGLang log lines with events under {LOGS}")
    return out


def records(n: int) -> list[tuple[bytes, bytes]]:
    """``n`` (key, value) records: each instance's startup lines, then its steady-state lines cycled, the
    instances interleaved, event time moving forward."""
    lines = corpus()
    ids = sorted(lines)
    out = []
    step = 1.0 / LINES_PER_INSTANCE_S
    for i in range(n):
        iid = ids[i % len(ids)]
        k = i // len(ids)
        startup, steady = lines[iid]
        src = startup[k] if k < len(startup) else steady[(k - len(startup)) % len(steady)]
        ts = T0 + dt.timedelta(seconds=k * step)
        stamp = ts.strftime("%Y-%m-%d %H:%M:%S") + f".{ts.microsecond // 1000:03d}"
        out.append((iid.encode(), _DATED.sub(b"[" + stamp.encode(), src, count=1)))
    return out


def record_batches(pairs: list[tuple[bytes, bytes]], partitions: int = 4,
                   per_batch: int = 2000) -> dict[int, bytes]:
    """``pairs`` as a producer would write them: kafka-python's default partitioner (murmur2 of the key) over
    ``partitions``, then v2 record batches of ``per_batch`` records per partition, offsets from 0, one millisecond
    apart from 1,700,000,000,000. Partition -> the batches' bytes (``benchmarks/ingest_stages.py`` and
    ``ingest_unpack.py`` feed them to the consumer without a broker)."""
    from kafka.partitioner.default import murmur2
    from kafka.record import MemoryRecordsBuilder

    parts: dict[int, list[tuple[bytes, bytes]]] = {}
    for k, v in pairs:
        parts.setdefault((murmur2(k) & 0x7fffffff) % partitions, []).append((k, v))
    data = {}
    for p, rs in parts.items():
        out, off = b"", 0
        for i in range(0, len(rs), per_batch):
            b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 26, offset=off)
            for j, (k, v) in enumerate(rs[i:i + per_batch]):
                b.append(timestamp=1_700_000_000_000 + off + j, key=k, value=v, headers=[])
            b.close()
            out += bytes(b.buffer())
            off += len(rs[i:i + per_batch])
        data[p] = out
    return data


def _records_processed(port: int) -> int | None:
    """Records the process has processed so far, from ``/readyz`` (a lock-free read of one counter). Not from
    ``/metrics``: one scrape renders every series of every twin (~0.7 MB for 13 instances, tens of CPU ms), and
    polling it every 50 ms took most of the process's CPU, so the benchmark measured its own scrapes."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:  # 503 while not ready: the body still says how far it is
        body = exc.read()
    except OSError:
        return None
    try:
        return int(json.loads(body)["records_processed"])
    except (ValueError, KeyError, TypeError):
        return None


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_to_end(n: int, poll_s: float = PROGRESS_POLL_S) -> dict[str, float]:
    from benchmarks.childproc import peak_rss_of
    from streams.broker import EmbeddedBroker
    from streams.decode import decode_record
    from streams.kafka_io import EventProducer

    recs = records(n)
    events = sum(len(decode_record(v, key=k, fmt="auto").events) for k, v in recs[: min(n, 5000)])
    with EmbeddedBroker(die_with_parent=True) as broker, tempfile.TemporaryDirectory() as tmp:
        topic = "ingest"
        broker.create_topics({topic: 4, topic + ".dlq": 1})
        with EventProducer(broker.bootstrap_servers, topic, linger_ms=20) as prod:
            for k, v in recs:
                prod.send_raw(v, k)
            prod.flush()
        port = _free_port()
        argv = [sys.executable, "-m", "shadowsim", "run", "--bootstrap-servers", broker.bootstrap_servers,
                "--topic", topic, "--dead-letter-topic", topic + ".dlq", "--group", "ingest",
                "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--state-dir", f"{tmp}/state",
                "--exit-when-idle-s", "3", "--quiet", "--session-timeout-ms", "6000"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        first: tuple[float, int, float] | None = None
        last: tuple[float, int, float] = (0.0, 0, 0.0)
        deadline = time.monotonic() + 600
        peak_rss = float("nan")  # the `shadowsim run` child's own peak (VmHWM since its exec; not this parent's)
        while proc.poll() is None and time.monotonic() < deadline:
            seen = peak_rss_of(proc.pid)
            peak_rss = seen if seen is not None else peak_rss
            got = _records_processed(port)
            now = time.monotonic()
            if got:
                cpu = _cpu_s(proc.pid)
                if first is None:
                    first = (now, got, cpu)
                if got > last[1]:
                    last = (now, got, cpu)
            time.sleep(poll_s)
        err = proc.stderr.read().decode() if proc.stderr else ""
        rc = proc.wait(timeout=30)
        if rc != 0 or first is None:
            raise RuntimeError(f"shadowsim run exited {rc}: {err[-2000:]}")
        m = re.search(r"stopped after (\d+) records", err)
        done = int(m.group(1)) if m else -1
        if done != n:
            raise RuntimeError(f"shadowsim run applied {done} of {n} records: {err[-2000:]}")
    window = last[0] - first[0]
    # records applied inside the window: the ones counted after the first scrape
    per_event = events / min(n, 5000)
    cpu = last[2] - first[2]
    return {"records": float(n), "events_per_record": per_event, "instances": float(len(corpus())),
            "events_per_s": (last[1] - first[1]) / window if window > 0 else float("nan"),
            "window_s": window,
            # the same records per CPU second of the `shadowsim run` process: the rate one free core gives
            "events_per_cpu_s": (last[1] - first[1]) / cpu if cpu > 0 else float("nan"),
            "cpu_share": cpu / window if window > 0 else float("nan"),
            "run_peak_rss_mib": peak_rss}


def _pending_log(in_flight: int, steps: int) -> list[Any]:
    from shadowsim.shadow.sources import Record
    from simcore.events import parse_event

    base = 1_800_000_000.0
    gap = 0.01  # one arrival every 10 ms; a request lives in_flight × 10 ms of event time
    evs = []

    def arrive(i: int) -> dict[str, Any]:
        return {"kind": "request_arrived", "instance_id": "x", "ts": base + i * gap, "request_id": f"r{i}",
                "prompt_tokens": 64 + i % 7, "max_new_tokens": 8}

    for i in range(in_flight):
        evs.append(arrive(i))
    for j in range(steps):
        i = in_flight + j
        t = base + i * gap
        evs.append(arrive(i))
        evs.append({"kind": "request_finished", "instance_id": "x", "ts": t + gap / 2, "request_id": f"r{j}",
                    "prompt_tokens": 64 + j % 7, "output_tokens": 4, "arrival_ts": base + j * gap,
                    "ttft_s": 0.02, "e2e_s": t + gap / 2 - (base + j * gap)})
        evs.append({"kind": "decode_batch", "instance_id": "x", "ts": t + gap * 0.75, "running_reqs": 3,
                    "kv_tokens": 300, "gen_throughput_tok_s": 400.0})
    return [Record("bench", 0, k, b"x", [parse_event(e)]) for k, e in enumerate(evs)]


def pending_cost(in_flight: int, steps: int = 6000) -> float:
    """CPU µs per event (service process + twin + simulation + checkpoints) with ``in_flight`` requests open."""
    from shadowsim.shadow.config import (DriftConfig, InstanceConfig, ShadowConfig, SnapshotConfig, TimeConfig)
    from shadowsim.shadow.engine import engine_factory
    from shadowsim.shadow.service import ShadowService
    from shadowsim.shadow.sources import MemorySource

    recs = _pending_log(in_flight, steps)
    warm = in_flight + 300  # the open requests and a few hundred steady-state records before the clock starts
    with tempfile.TemporaryDirectory() as tmp:
        # max_wait_s: the oldest open request must not be estimated (it is "in flight", not lost)
        cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                           time=TimeConfig(max_wait_s=in_flight * 0.01 * 4 + 60), drift=DriftConfig(),
                           snapshot=SnapshotConfig(dir=Path(tmp)))
        svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r, batch=2000), engine_factory)
        svc.run(max_records=warm, checkpoint_at_end=False)
        assert len(svc.twins["x"].pending) >= in_flight, len(svc.twins["x"].pending)
        t = time.process_time()
        n = svc.run(idle_timeout_s=0, poll_timeout_s=0, checkpoint_at_end=False)
        cpu = time.process_time() - t
        assert n == len(recs) - warm
        open_now = len(svc.twins["x"].pending)
        assert open_now >= in_flight, open_now  # still that many in flight at the end
    return cpu / n * 1e6


def bench(n: int, poll_s: float = PROGRESS_POLL_S) -> dict[str, float]:
    from benchmarks.childproc import own_peak_rss_mib, reset_peak_rss

    res = end_to_end(n, poll_s)
    res["us_per_event_pending_10"] = pending_cost(10)
    # the in-process part's own peak: counted from here (reset_peak_rss), not from whatever this process did before
    counted = reset_peak_rss()
    res["us_per_event_pending_4000"] = pending_cost(4000)
    res["pending_4000_peak_rss_mib"] = own_peak_rss_mib() if counted else float("nan")
    res["pending_ratio"] = res["us_per_event_pending_4000"] / res["us_per_event_pending_10"]
    return res


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks ingest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--records", type=int, default=200_000, help="records through the broker (default 200,000)")
    ap.add_argument("--poll-s", type=float, default=PROGRESS_POLL_S,
                    help=f"seconds between reads of the process's progress (default {PROGRESS_POLL_S})")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    res = bench(args.records, args.poll_s)
    if not args.json:
        print(f"ingest: {res['records']:,.0f} real SGLang log lines of {res['instances']:.0f} instances through the "
              f"embedded broker into one `shadowsim run` process")
        print(f"  events/s end to end            {res['events_per_s']:>10,.0f}   (window {res['window_s']:.1f} s, "
              f"the process had {res['cpu_share']:.0%} of a core)")
        print(f"  events per CPU second          {res['events_per_cpu_s']:>10,.0f}")
        print(f"  peak RSS of `shadowsim run`    {res['run_peak_rss_mib']:>10,.0f} MiB (its own VmHWM)")
        print(f"  µs/event, 10 requests in flight   {res['us_per_event_pending_10']:>7.1f}")
        print(f"  µs/event, 4000 requests in flight {res['us_per_event_pending_4000']:>7.1f}   "
              f"(ratio {res['pending_ratio']:.2f}; peak RSS of that part {res['pending_4000_peak_rss_mib']:.0f} MiB)")
    print(json.dumps({"bench": "ingest", **{k: round(v, 3) for k, v in res.items()}}))
    return res


if __name__ == "__main__":
    main()
