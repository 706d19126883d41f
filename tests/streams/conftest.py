"""Fixtures for the streams tests: one embedded Tansu broker for the whole session."""
from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from streams.broker import EmbeddedBroker

_names = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    """A Tansu broker on a free loopback port, started once per test session and stopped at the end."""
    broker = EmbeddedBroker(die_with_parent=True).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (the broker is shared by the session)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"t-{base}-{next(_names)}"


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 loads its protocol schemas with importlib.resources' legacy API: hundreds of warnings that
    # say nothing about our code.
    config.addinivalue_line("filterwarnings", "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning")
