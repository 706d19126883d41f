"""`shadowsim broker`: starts Tansu, creates the topics, prints where it listens, stops cleanly on SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from kafka import KafkaAdminClient

from shadowsim.cli import main

pytestmark = pytest.mark.kafka


def test_broker_command_runs_until_sigterm_and_stops_tansu() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "shadowsim", "broker", "--port", "0", "--json",
                             "--topic", "sglang.events:3", "--topic", "sglang.events.dlq:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["topics"] == {"sglang.events": 3, "sglang.events.dlq": 1}
        admin = KafkaAdminClient(bootstrap_servers=ready["bootstrap_servers"])
        described = {t["name"]: len(t["partitions"]) for t in admin.describe_topics(["sglang.events",
                                                                                      "sglang.events.dlq"])}
        admin.close()
        assert described == {"sglang.events": 3, "sglang.events.dlq": 1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        with pytest.raises(ProcessLookupError):
            os.kill(ready["pid"], 0)  # Tansu went with it
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_sigkilled_broker_command_takes_tansu_with_it() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "shadowsim", "broker", "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = json.loads(proc.stdout.readline())
    proc.kill()
    proc.wait()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.kill(ready["pid"], 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(ready["pid"], signal.SIGKILL)
    raise AssertionError("Tansu outlived a SIGKILLed `shadowsim broker`")


def test_bad_topic_spec_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "--topic", "x:many"]) == 2
    assert capsys.readouterr().err.strip() == (
        "shadowsim: error: --topic: 'x:many': partitions must be an integer (e.g. sglang.events:4)")
