"""The ingest path in stages, without a broker, for instruction counts (``valgrind --tool=callgrind``) and CPU time.

``python benchmarks/ingest_stages.py N STOP``: ``benchmarks.bench_ingest.records(N)`` (the real SGLang batch lines of
13 instances) put into kafka-python record batches of 2,000 records on 4 partitions (the default partitioner, as a
producer would; the set-up), then, stopping after ``STOP``: ``unpack`` (``streams.kafka_records``: the batches to
kafka-python ``ConsumerRecord``s), ``decode`` (``EventConsumer._decode_partition``: records to events, 2,000 at a
time), ``service`` (one ``ShadowService`` on a ``MemorySource`` of the decoded records, checkpoints included). It
prints the CPU seconds and µs per record of each stage it ran. Instructions per record of a stage: run it twice
under callgrind (``PYTHONHASHSEED=0``), stopping at that stage and at the one before, subtract, divide by N
(docs/shadow.md, Ingest speed). Not a test and not timed anywhere else."""
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N = int(sys.argv[1])
STOP = sys.argv[2]
from kafka.record import MemoryRecords
from kafka.structs import TopicPartition
from benchmarks.bench_ingest import record_batches, records
from streams.kafka_records import FastPartitionRecords
from streams.kafka_io import EventConsumer, RecordDecoder
from shadowsim.shadow.config import ShadowConfig, SnapshotConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sources import MemorySource
from shadowsim.commands.run import tune_gc
data = record_batches(records(N))
tune_gc()  # as `shadowsim run` does
t = {}
if STOP == "setup":
    sys.exit(0)
c0 = time.process_time()
raw = {}
for p, d in data.items():
    pr = FastPartitionRecords(0, TopicPartition("ingest", p), MemoryRecords(d), check_crcs=True)
    raw[p] = pr.take()
t["unpack"] = time.process_time() - c0
if STOP == "unpack":
    print(t)
    sys.exit(0)
cons = object.__new__(EventConsumer)
cons._decode, cons._dlq, cons.dead_letter_topic, cons.dead_letters = RecordDecoder("auto"), None, None, 0
c0 = time.process_time()
consumed = []
for p in sorted(raw):
    rs = raw[p]
    for i in range(0, len(rs), 2000):
        consumed += cons._decode_partition(rs[i:i + 2000])
t["decode"] = time.process_time() - c0
if STOP == "decode":
    print(t)
    sys.exit(0)
with tempfile.TemporaryDirectory() as tmp:
    cfg = ShadowConfig(snapshot=SnapshotConfig(dir=Path(tmp)))
    svc = ShadowService(cfg, lambda a, r: MemorySource(consumed, a, r, batch=2000), engine_factory)
    c0 = time.process_time()
    n = svc.run(idle_timeout_s=0, poll_timeout_s=0, checkpoint_at_end=False)
    t["service"] = time.process_time() - c0
print({k: f"{v:.3f}s {v / N * 1e6:.2f}us" for k, v in t.items()}, n)
