"""Shared fixtures: the demo scenario's event log (emulated instances), as in-memory Kafka-like records."""
from __future__ import annotations

import pytest
from shadow_fixtures import scenario_log

from shadowsim.demo.scenario import Scenario
from shadowsim.shadow.sources import Record


@pytest.fixture(scope="session")
def short_log() -> tuple[Scenario, tuple[Record, ...]]:
    """20 s of the demo scenario (about 5,000 events over three instances)."""
    return scenario_log(20.0)


@pytest.fixture(scope="session")
def shadow_broker():  # type: ignore[no-untyped-def]
    """An embedded Tansu broker for the shadow's Kafka tests (one per session)."""
    from streams.broker import EmbeddedBroker

    broker = EmbeddedBroker(die_with_parent=True).start()  # no orphan broker if pytest is killed
    try:
        yield broker
    finally:
        broker.stop()
