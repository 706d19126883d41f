"""The ingest path's service stage alone, for instruction counts (``valgrind --tool=callgrind``).

``python benchmarks/ingest_service.py N``: ``benchmarks.bench_ingest.records(N)`` (the real SGLang batch lines of 13
instances) unpacked and decoded as the Kafka consumer does (one batch per partition, the default partitioner),
then one ``ShadowService.run`` on a ``MemorySource`` of the decoded records (batches of 2,000, checkpoints every
5,000 records, as ``shadowsim run``'s defaults), called through ``functools.reduce`` so that callgrind can count
that call alone::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=functools_reduce \\
        python benchmarks/ingest_service.py 8000

The marginal instructions per record are (total at 8,000 − total at 4,000) / 4,000: the twins' creation and the
lazy imports of their simulators cancel out (docs/shadow.md, Ingest speed, fifth pass). Nothing else in the
process calls ``functools.reduce`` (a nested call would toggle the count off). Prints the records processed.
Not a test and not timed anywhere else."""
import functools
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
logging.disable(logging.WARNING)  # the linear-fallback warnings of the log files' instances

from kafka.partitioner.default import murmur2  # noqa: E402
from kafka.record import MemoryRecords, MemoryRecordsBuilder  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

import simcore.server  # noqa: E402,F401 - imported by the first twin's simulator: outside the count
import simcore.settings  # noqa: E402,F401
from benchmarks.bench_ingest import records  # noqa: E402
from shadowsim.commands.run import tune_gc  # noqa: E402
from shadowsim.shadow.config import ShadowConfig, SnapshotConfig  # noqa: E402
from shadowsim.shadow.engine import engine_factory  # noqa: E402
from shadowsim.shadow.service import ShadowService  # noqa: E402
from shadowsim.shadow.sources import MemorySource  # noqa: E402
from streams.kafka_io import EventConsumer, RecordDecoder  # noqa: E402
from streams.kafka_records import FastPartitionRecords  # noqa: E402

N = int(sys.argv[1])
parts: dict[int, list[tuple[bytes, bytes]]] = {}
for k, v in records(N):
    parts.setdefault((murmur2(k) & 0x7fffffff) % 4, []).append((k, v))
consumed = []
cons = object.__new__(EventConsumer)
cons._decode, cons._dlq, cons.dead_letter_topic, cons.dead_letters = RecordDecoder("auto"), None, None, 0
for p in sorted(parts):
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 28, offset=0)
    for j, (k, v) in enumerate(parts[p]):
        b.append(timestamp=1_700_000_000_000 + j, key=k, value=v, headers=[])
    b.close()
    raw = FastPartitionRecords(0, TopicPartition("ingest", p), MemoryRecords(bytes(b.buffer())), check_crcs=True).take()
    for i in range(0, len(raw), 2000):
        consumed += cons._decode_partition(raw[i:i + 2000])
tune_gc()  # as `shadowsim run` does
with tempfile.TemporaryDirectory() as tmp:
    svc = ShadowService(ShadowConfig(snapshot=SnapshotConfig(dir=Path(tmp))),
                        lambda a, r: MemorySource(consumed, a, r, batch=2000), engine_factory)
    n = functools.reduce(lambda _a, _b: svc.run(idle_timeout_s=0, poll_timeout_s=0, checkpoint_at_end=False), [0, 0])
print(n)
