"""simcore/ is the pure core (STYLE §1): no Kafka, no Prometheus, no sockets, no environment, no wall clock.

Everything that touches the outside world lives in streams/, exporters/ or shadowsim/; simcore/ gets its inputs
as arguments (settings objects, injected seeds and clocks). This test parses every module of simcore/ and fails
on a forbidden import or call, naming the file and line.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIMCORE = Path(__file__).resolve().parents[2] / "simcore"
FORBIDDEN_MODULES = {
    "kafka", "confluent_kafka", "aiokafka", "prometheus_client", "socket", "zmq", "requests", "urllib",
    "http", "asyncio", "subprocess", "threading", "multiprocessing", "streams", "exporters", "shadowsim",
}
FORBIDDEN_ATTRS = {
    ("os", "environ"), ("os", "getenv"), ("os", "putenv"), ("time", "time"), ("time", "time_ns"),
    ("time", "sleep"), ("datetime", "now"), ("datetime", "utcnow"), ("date", "today"),
}
FORBIDDEN_NAMES = {"getenv", "environ"}  # from os import environ/getenv
# The one exception: the import machinery (simcore/_native.py) reads SHADOWSIM_PURE_PYTHON to choose which file of
# a module is imported (compiled or .py source, identical results), never an input of a simulation.
ALLOWED = {"simcore/_native.py": ["simcore/_native.py:30: os.environ"]}


def _modules() -> list[Path]:
    return sorted(p for p in SIMCORE.rglob("*.py"))


def _violations(path: Path, root: Path = SIMCORE.parent) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[str] = []
    rel = path.relative_to(root)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in FORBIDDEN_MODULES:
                    out.append(f"{rel}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = (node.module or "").split(".")[0]
            if node.level == 0 and mod in FORBIDDEN_MODULES:
                out.append(f"{rel}:{node.lineno}: from {node.module} import ...")
            if mod == "os" and any(a.name in FORBIDDEN_NAMES for a in node.names):
                out.append(f"{rel}:{node.lineno}: from os import environ/getenv")
            if mod == "time" and any(a.name in ("time", "time_ns", "sleep") for a in node.names):
                out.append(f"{rel}:{node.lineno}: from time import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in FORBIDDEN_ATTRS:
                out.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            if (node.value.attr, node.attr) in FORBIDDEN_ATTRS:
                out.append(f"{rel}:{node.lineno}: ....{node.value.attr}.{node.attr}")
    return out


def test_simcore_has_modules() -> None:
    names = {p.name for p in _modules()}
    assert {"server.py", "scheduler.py", "engine.py", "results.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SIMCORE)))
def test_module_is_pure(path: Path) -> None:
    assert _violations(path) == ALLOWED.get(str(path.relative_to(SIMCORE.parent)), [])


def test_checker_catches_violations(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nimport time\nfrom kafka import KafkaConsumer\nx = os.environ['A']\n"
                   "t = time.time()\nimport prometheus_client.core\nimport numpy\n")
    msgs = _violations(bad, tmp_path)
    assert sorted(msgs) == ["bad.py:3: from kafka import ...", "bad.py:4: os.environ", "bad.py:5: time.time",
                            "bad.py:6: import prometheus_client.core"]
