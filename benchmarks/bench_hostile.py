"""Hostile-input benchmark (issue 11): a million generated hostile records, a Kafka subset into `shadowsim run`,
and memory under a million distinct fake instance ids.

* ``hostile``: ``N`` (default 1,000,000) records of ``benchmarks.hostile`` (random bytes, mutated real SGLang log
  lines, truncated JSON, wrong types, out-of-range values, NaN/inf, 10 MB lines every 20,000 records, unknown
  instances, duplicates, reordered times) interleaved with the demo scenario's clean records (3 EMULATED
  instances), decoded as the Kafka consumer does and applied by one ``ShadowService`` (in memory). Figures: records
  applied / skipped / counted per reason (their sum must be every record: ``silent`` = 0), whether the healthy
  instances' predictions equal a clean run's, CPU µs per record.
* ``kafka``: the first ``M`` (default 50,000) hostile records (10 MB lines included) and the clean records through
  the embedded broker into a ``python -m shadowsim run`` process: exit status, the same comparison.
* ``memory``: ``F`` (default 1,000,000) valid events, each of a new fake instance id, through one service with the
  default twin cap; RSS after every 100,000 records and peak RSS (tracemalloc's count with ``--trace``), twins
  kept, records refused (``twin_cap``).

* ``victim`` (only with ``--only``): the victim instance's records among ``N`` hostile ones through one service, with
  simcore's invariants checked after every record.

``python -m benchmarks hostile [--json] [--records N] [--kafka-records M] [--fake-ids F] [--only PART] [--trace]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ACCEPTS_ARGS = True


class StreamSource:
    """A source decoding records from an iterator on the fly, as the Kafka consumer does (3 partitions by key)."""

    def __init__(self, items: Iterator[tuple[bytes | None, bytes]], on_assign: Any, partitions: int = 3,
                 batch: int = 500) -> None:
        from streams.kafka_io import RecordDecoder

        self.items, self.on_assign, self.n, self.batch = items, on_assign, partitions, batch
        self.dec = RecordDecoder("auto")
        self.offsets = [0] * partitions
        self.assigned = False
        self.dead_lettered = 0

    def poll_batch(self, timeout_s: float = 0.0, max_records: int | None = None) -> list[Any]:
        from shadowsim.shadow.sources import Record

        if not self.assigned:
            self.assigned = True
            self.on_assign({("h", p) for p in range(self.n)})
        out = []
        for key, value in self.items:
            p = zlib.crc32(key or b"") % self.n
            ev, err = self.dec(value, key, "h", p, [], None)
            out.append(Record("h", p, self.offsets[p], key, ev, err))
            self.offsets[p] += 1
            if len(out) >= self.batch:
                break
        return out

    def commit(self, offsets: Any) -> bool:
        return True

    def seek(self, tp: Any, offset: int) -> None:
        pass

    def assignment(self) -> set[Any]:
        return {("h", p) for p in range(self.n)} if self.assigned else set()

    def dead_letter(self, record: Any, reason: str) -> None:
        self.dead_lettered += 1

    def close(self) -> None:
        pass


def _clean() -> tuple[Any, list[tuple[bytes | None, bytes]]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "shadowsim"))
    from shadow_fixtures import scenario_log

    sc, recs = scenario_log(20.0)
    return sc, [(r.key, r.events[0].model_dump_json(exclude_none=True).encode()) for r in recs]


def _mixed(clean: list[tuple[bytes | None, bytes]], hostile: Iterator[tuple[bytes | None, bytes, str]],
           n_hostile: int) -> Iterator[tuple[bytes | None, bytes]]:
    every = max(1, n_hostile // len(clean))
    ci = 0
    for i, (k, v, _) in enumerate(hostile):
        if i % every == 0 and ci < len(clean):
            yield clean[ci]
            ci += 1
        yield k, v
    yield from clean[ci:]


def _healthy_predictions(path: Path, healthy: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """The sink's records of the healthy instances, de-duplicated (identical replays); a hostile twin that was
    reset may predict a request of its own twice, differently: those are not compared."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    with open(path, "rb") as f:
        for line in f:
            r = json.loads(line)
            if r["instance"] not in healthy:
                continue
            k = (r["instance"], r["request_id"])
            if k in out and out[k] != r:
                raise ValueError(f"two different predictions for healthy {k}")
            out[k] = r
    return out


def _service_run(cfg: Any, items: Iterator[tuple[bytes | None, bytes]], sink_path: Path) -> Any:
    from shadowsim.shadow.engine import engine_factory
    from shadowsim.shadow.service import ShadowService
    from shadowsim.shadow.sink import PredictionSink

    svc = ShadowService(cfg, lambda a, r: StreamSource(items, a), engine_factory, sink=PredictionSink(sink_path))
    svc.run(idle_timeout_s=0, poll_timeout_s=0)
    svc.close()
    return svc


def hostile(n: int, tmp: Path) -> dict[str, Any]:
    from benchmarks.childproc import own_peak_rss_mib, reset_peak_rss
    from benchmarks.hostile import iter_hostile
    from shadowsim.shadow.config import SnapshotConfig
    from shadowsim.shadow.sink import read_predictions

    reset_peak_rss()  # this part's own peak, not the benchmarks that ran before it in this process
    sc, clean = _clean()
    healthy = sorted({k.decode() for k, _ in clean if k})
    cfg = sc.shadow.model_copy(update={"snapshot": SnapshotConfig(dir=tmp / "ref")})
    _service_run(cfg, iter(clean), tmp / "ref.jsonl")
    want = read_predictions(tmp / "ref.jsonl")
    cfg = sc.shadow.model_copy(update={"snapshot": SnapshotConfig(dir=tmp / "mix")})
    kinds: dict[str, int] = {}

    def counted() -> Iterator[tuple[bytes | None, bytes, str]]:
        for rec in iter_hostile(n, 1, healthy):
            kinds[rec[2]] = kinds.get(rec[2], 0) + 1
            yield rec

    t, w = time.process_time(), time.monotonic()
    svc = _service_run(cfg, _mixed(clean, counted(), n), tmp / "mix.jsonl")
    cpu, wall = time.process_time() - t, time.monotonic() - w
    got = _healthy_predictions(tmp / "mix.jsonl", healthy)
    dead = svc.dead_letters()
    total = svc.records_processed
    counted = svc.counters["records_applied"] + svc.records_skipped() + sum(dead.values())
    return {"records": total, "hostile_records": n, "applied": svc.counters["records_applied"],
            "skipped": svc.records_skipped(), "dead_lettered": sum(dead.values()), "silent": total - counted,
            "reasons": dead, "hostile_kinds": dict(sorted(kinds.items())), "twins": len(svc.twins),
            "twin_rebuilds": svc.counters["twin_rebuilds"], "twin_resets": svc.counters["twin_resets"],
            "healthy_predictions_equal": got == want, "healthy_predictions": len(want),
            "cpu_us_per_record": cpu / total * 1e6, "cpu_s": cpu, "wall_s": wall,
            "peak_rss_mib": own_peak_rss_mib()}


def kafka(m: int, tmp: Path) -> dict[str, Any]:
    from benchmarks.hostile import iter_hostile
    from streams.broker import EmbeddedBroker
    from streams.kafka_io import EventProducer

    sc, clean = _clean()
    healthy = sorted({k.decode() for k, _ in clean if k})
    import yaml

    tmp.mkdir(parents=True, exist_ok=True)
    cfg_path = tmp / "shadow.yaml"
    cfg_path.write_text(yaml.safe_dump(sc.shadow.model_dump(mode="json", exclude={
        "kafka", "snapshot", "predictions_path", "metrics_port"})))
    out: dict[str, Any] = {"kafka_hostile_records": m}
    with EmbeddedBroker(die_with_parent=True) as broker:
        bs = broker.bootstrap_servers
        preds = {}
        for name, items in (("clean", iter(clean)), ("mixed", _mixed(clean, iter_hostile(m, 1, healthy), m))):
            topic = f"hostile-{name}"
            broker.create_topics({topic: 3, topic + ".dlq": 1})
            sent = 0
            with EventProducer(bs, topic, max_request_size=16 * 1024 * 1024) as prod:
                for k, v in items:
                    prod.send_raw(v, k)
                    sent += 1
            argv = [sys.executable, "-m", "shadowsim", "run", "--bootstrap-servers", bs, "--topic", topic,
                    "--dead-letter-topic", topic + ".dlq", "--group", name, "--config", str(cfg_path),
                    "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--state-dir", str(tmp / f"k-{name}"),
                    "--predictions", str(tmp / f"k-{name}.jsonl"), "--exit-when-idle-s", "5", "--quiet"]
            t = time.monotonic()
            rc, stderr, peak = _run_watching_peak(argv, timeout_s=3000)
            out[f"kafka_{name}_rc"] = rc
            out[f"kafka_{name}_records"] = sent
            out[f"kafka_{name}_wall_s"] = time.monotonic() - t
            out[f"kafka_{name}_peak_rss_mib"] = peak
            tail = stderr.strip().splitlines()[-1:] if stderr else []
            out[f"kafka_{name}_last_line"] = tail[0] if tail else ""
            preds[name] = _healthy_predictions(tmp / f"k-{name}.jsonl", healthy)
            out.update({f"kafka_{name}_{k}": v for k, v in _accounting(bs, topic, tmp / f"k-{name}", sent).items()})
        out["kafka_healthy_predictions_equal"] = preds["clean"] == preds["mixed"] and bool(preds["clean"])
    return out


def _run_watching_peak(argv: list[str], timeout_s: float) -> tuple[int, str, float | None]:
    """Run ``argv`` (stdout discarded); its exit status, stderr and its own peak RSS (VmHWM read from /proc every
    50 ms while it runs: the last reading, at most 50 ms before it exits; not ``ru_maxrss``, which starts from this
    process's size)."""
    from benchmarks.childproc import peak_rss_of

    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        peak: float | None = None
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            got = peak_rss_of(proc.pid)
            peak = got if got is not None else peak
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(argv, timeout_s)
            time.sleep(0.05)
        err.seek(0)
        return proc.returncode, err.read(), peak


def _accounting(bs: str, topic: str, state: Path, sent: int) -> dict[str, Any]:
    """Every record of the run accounted for, from what the process left behind: its last checkpoint per partition
    (next offset, records applied, skipped and dead-lettered by reason) and the dead-letter topic itself (one
    dead letter per record counted as dead-lettered, none twice)."""
    from kafka import KafkaConsumer, TopicPartition

    from shadowsim.shadow.snapshot import SnapshotStore

    store = SnapshotStore(state)
    read = applied = skipped = 0
    dead: dict[str, int] = {}
    for t, part in store.partitions():
        snap = store.load(t, part)
        if snap is None or t != topic:
            continue
        read += int(snap["next_offset"])
        applied += int(snap.get("applied", 0))
        skipped += int(snap.get("skipped", 0))
        for r, n in snap.get("dead_letters", {}).items():
            dead[r] = dead.get(r, 0) + int(n)
    # the dead-letter topic, read until idle (the embedded broker's end offset is the last batch's base offset)
    consumer = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest",
                             group_id=None, fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024)
    tps = [TopicPartition(topic + ".dlq", p) for p in sorted(consumer.partitions_for_topic(topic + ".dlq") or ())]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    letters, sources = 0, set()
    idle = time.monotonic()
    while time.monotonic() - idle < 5.0:
        batch = consumer.poll(timeout_ms=500)
        for recs in batch.values():
            for r in recs:
                h = dict(r.headers or [])
                letters += 1
                sources.add((h.get("source_topic"), h.get("source_partition"), h.get("source_offset")))
            idle = time.monotonic()
    consumer.close()
    counted = applied + skipped + sum(dead.values())
    return {"records_read": read, "applied": applied, "skipped": skipped, "dead_lettered": sum(dead.values()),
            "silent": sent - counted, "reasons": dict(sorted(dead.items())), "dlq_letters": letters,
            "dlq_distinct_records": len(sources)}


def victim(n: int, tmp: Path) -> dict[str, Any]:
    """The victim instance's records among ``n`` hostile ones (the same seeded stream as ``hostile``), one by one
    through a ``ShadowService`` (checkpoints every 5,000 of them, so rebuilds restore real checkpoints), with
    ``simcore``'s invariants (``Server.check_invariants``) checked after every record: stops at the first one that
    breaks them."""
    from benchmarks.hostile import iter_hostile
    from shadowsim.shadow.config import SnapshotConfig
    from shadowsim.shadow.engine import engine_factory
    from shadowsim.shadow.service import ShadowService
    from shadowsim.shadow.sources import Record
    from streams.kafka_io import RecordDecoder

    sc, clean = _clean()
    healthy = sorted({k.decode() for k, _ in clean if k})
    cfg = sc.shadow.model_copy(update={"snapshot": SnapshotConfig(dir=tmp / "v", every_events=5000, every_s=1e9)})
    svc = ShadowService(cfg, lambda a, r: StreamSource(iter(()), a), engine_factory, clock=lambda: 0.0)
    dec = RecordDecoder("auto")
    seen = checked = 0
    violation = None
    for key, value, kind in iter_hostile(n, 1, healthy):
        if key != b"victim-0":
            continue
        events, err = dec(value, key, "h", 0, [], None)
        svc.process(Record("h", 0, seen, key, events, err), flush=True)
        seen += 1
        if svc._checkpoint_due():
            svc.checkpoint()
        twin = svc.twins.get("victim-0")
        if twin is not None and twin.engine is not None:
            try:
                twin.engine.server.check_invariants()
                checked += 1
            except AssertionError as exc:
                violation = f"victim record {seen - 1} ({kind}): {exc}"
                break
    return {"victim_records": seen, "victim_applied": svc.counters["records_applied"], "victim_checked": checked,
            "victim_violation": violation, "victim_twin_rebuilds": svc.counters["twin_rebuilds"],
            "victim_twin_resets": svc.counters["twin_resets"]}


def _rss_mib() -> float:
    """Resident set size now (Linux /proc), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory(f: int, tmp: Path, trace: bool = False) -> dict[str, Any]:
    """``f`` valid events, each of a new fake instance id; RSS (and, with ``trace``, tracemalloc's count, which
    slows the run several times) after every 100,000 records: flat once the twin cap is reached."""
    import tracemalloc

    from benchmarks.childproc import own_peak_rss_mib, reset_peak_rss
    from shadowsim.shadow.config import InstanceConfig, ShadowConfig, SnapshotConfig

    reset_peak_rss()  # this part's own peak (from the RSS now), not the earlier parts' or benchmarks'

    def fakes() -> Iterator[tuple[bytes | None, bytes]]:
        for i in range(f):
            iid = f"fake-{i:07d}"
            yield iid.encode(), (b'{"schema_version":1,"kind":"decode_batch","instance_id":"%s","ts":%f,'
                                 b'"running_reqs":3,"kv_tokens":300}' % (iid.encode(), 1_800_000_000.0 + i * 1e-3))

    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp / "mem", every_events=50_000))
    rss0 = _rss_mib()
    if trace:
        tracemalloc.start()
    rss: list[float] = []
    traced: list[float] = []
    from shadowsim.shadow.engine import engine_factory
    from shadowsim.shadow.service import ShadowService

    t = time.process_time()
    svc = ShadowService(cfg, lambda a, r: StreamSource(fakes(), a), engine_factory)
    while True:
        n = svc.run(max_records=100_000, idle_timeout_s=0, poll_timeout_s=0, checkpoint_at_end=False)
        rss.append(_rss_mib())
        if trace:
            traced.append(tracemalloc.get_traced_memory()[0] / 2**20)
        if n < 100_000:
            break
    cpu = time.process_time() - t
    out = {"fake_ids": f, "twins_kept": len(svc.twins), "twin_cap_refused": svc.dead_letters().get("twin_cap", 0),
           "rss_mib_start": rss0, "rss_mib_per_100k": [round(x, 1) for x in rss], "rss_mib_end": rss[-1],
           "peak_rss_mib": own_peak_rss_mib(),
           "router_cache_entries": len(svc.ranks._configured), "memory_cpu_s": cpu}
    if trace:
        out.update({"traced_mib_per_100k": [round(x, 1) for x in traced],
                    "traced_peak_mib": tracemalloc.get_traced_memory()[1] / 2**20})
        tracemalloc.stop()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks hostile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--records", type=int, default=1_000_000, help="hostile records in memory (default 1,000,000)")
    ap.add_argument("--kafka-records", type=int, default=50_000, help="hostile records through Kafka (default 50,000)")
    ap.add_argument("--fake-ids", type=int, default=1_000_000, help="distinct fake instance ids (default 1,000,000)")
    ap.add_argument("--only", choices=["hostile", "kafka", "memory", "victim"], help="run one part (victim: only "
                    "with --only; simcore's invariants after every record of the victim instance)")
    ap.add_argument("--trace", action="store_true", help="memory: also tracemalloc's count (several times slower)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "hostile"):
            res.update(hostile(args.records, Path(tmp) / "h"))
        if args.only in (None, "kafka"):
            res.update(kafka(args.kafka_records, Path(tmp) / "k"))
        if args.only == "victim":
            res.update(victim(args.records, Path(tmp) / "v"))
        if args.only in (None, "memory"):
            res.update(memory(args.fake_ids, Path(tmp) / "m", trace=args.trace))
    if not args.json:
        for k, v in res.items():
            print(f"  {k:<32} {v}")
    print(json.dumps({"bench": "hostile", **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}}))
    return res


if __name__ == "__main__":
    main()
