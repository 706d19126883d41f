"""The consumer's record unpacking alone (``streams.kafka_records``: kafka-python record batches to
``ConsumerRecord``s), for instruction counts with ``valgrind --tool=callgrind`` (docs/shadow.md, Ingest speed).

``python benchmarks/ingest_unpack.py write N FILE``: ``benchmarks.bench_ingest.records(N)`` (the real SGLang batch
lines of 13 instances) as kafka-python record batches of 2,000 records on 4 partitions (the default partitioner, as a
producer would), pickled to FILE (once; the corpus is slow to build under callgrind). Then
``python benchmarks/ingest_unpack.py load FILE`` (start-up and the batches loaded) and ``... unpack FILE`` (the same,
then every partition read by ``FastPartitionRecords.take(2000)`` as the fetcher takes records for one poll, the
garbage collector set as ``shadowsim run`` sets it): instructions per record = (unpack − load) / N. Prints the
records read and the CPU µs per record. Not a test and not timed anywhere else."""
import gc
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write(n: int, path: str) -> None:
    from benchmarks.bench_ingest import record_batches, records

    data = record_batches(records(n))
    Path(path).write_bytes(pickle.dumps(data))


def unpack(path: str, read: bool) -> None:
    from kafka.record import MemoryRecords
    from kafka.structs import TopicPartition

    from streams.kafka_records import FastPartitionRecords

    data = pickle.loads(Path(path).read_bytes())
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 10, 10)  # shadowsim.commands.run.tune_gc
    n = 0
    c0 = time.process_time()
    if read:
        for p, d in data.items():
            parts = FastPartitionRecords(0, TopicPartition("ingest", p), MemoryRecords(d), check_crcs=True)
            while parts:
                n += len(parts.take(2000))
    cpu = time.process_time() - c0
    print(n, f"{cpu / max(n, 1) * 1e6:.2f} CPU us per record")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(int(sys.argv[2]), sys.argv[3])
    else:
        unpack(sys.argv[2], sys.argv[1] == "unpack")
