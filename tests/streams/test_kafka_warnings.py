"""The deprecation warnings of a test run: all from one upstream line of kafka-python, filtered for that line only.

pyproject.toml's ``filterwarnings`` ignores ``read_text is deprecated`` from kafka/protocol/schemas/load_json.py
and the ``open_text is deprecated`` that read_text itself raises inside importlib/resources/_legacy.py. These tests
check that this is still the whole story (so the filters can go when kafka-python stops calling read_text) and
that the filters hide nothing else.
"""
from __future__ import annotations

import importlib.resources
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ini_filters() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["filterwarnings"]


def test_importing_kafka_warns_only_from_its_schema_loader() -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as got:\n"
        "    warnings.simplefilter('always')\n"
        "    import kafka, kafka.admin, kafka.consumer, kafka.producer\n"
        "for w in got:\n"
        "    print(w.category.__name__, w.filename.rsplit('/', 3)[-3:], w.lineno, str(w.message)[:24], sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    import kafka

    if sys.version_info >= (3, 13) or not lines:
        return  # 3.13 un-deprecated read_text; an upstream fix empties the list: then drop the two filters
    # kafka-python 3.0.12: one read_text per protocol schema (109), each also warning for open_text
    assert kafka.__version__ == "3.0.12"
    assert len(lines) == 218
    for line in lines:
        category, where, lineno, message = line.split("|")
        assert category == "DeprecationWarning"
        if message.startswith("read_text"):
            assert where.endswith("'schemas', 'load_json.py']") and lineno == "14", line
        else:
            assert message.startswith("open_text") and where.endswith("'resources', '_legacy.py']"), line


def test_the_filters_hide_a_read_text_call_from_anywhere_else() -> None:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for spec in _ini_filters():
            action, message, category, module = spec.split(":")
            warnings.filterwarnings(action, message=message, category=DeprecationWarning, module=module)
        text = importlib.resources.read_text("simcore.models", "not_modelled.json")
        with importlib.resources.open_text("simcore.models", "not_modelled.json") as f:
            text += f.read()
    assert "qwen3-next" in text
    if sys.version_info < (3, 13):
        # this module's own calls still warn: read_text (whose inner open_text is the filtered frame) and a
        # direct open_text (which a module-wide "open_text is deprecated" filter would have hidden)
        mine = [str(w.message)[:20] for w in got if w.filename == __file__]
        assert any(m.startswith("read_text is deprec") for m in mine), mine
        assert any(m.startswith("open_text is deprec") for m in mine), mine
