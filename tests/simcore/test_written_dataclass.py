"""The written-out dataclasses (``simcore.written_dataclass``) behave as ``@dataclass(frozen=…, slots=…)`` applied
to the same fields: each class is compared with a real dataclass built here from its annotations and
``__init__`` defaults (the definition it replaces), on the same values."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simcore.perf.base import BatchShape, LinearLatencyModel, StepTime
from simcore.radix_cache import MatchResult, RadixCache
from simcore.request import RequestSpec
from simcore.results import RequestRecord, StepRecord

ROOT = Path(__file__).resolve().parents[2]
_NODE = RadixCache(page_size=1).root
_SHAPE = BatchShape((4096, 17), (0, 512), 3, 9000, (), None)

# class, frozen/slots as the @dataclass it replaces said, two different value sets (positional)
CASES: list[tuple[type, bool, bool, tuple[Any, ...], tuple[Any, ...]]] = [
    (RequestSpec, True, True, ("r1", 0.5, 100, 20), ("r2", 1.25, 7, 1, 64, (1, 2, 3), 512, True, -3)),
    (RequestRecord, True, True, ("r-7", 1.5, 900, 41, 512, 1.75, 3.0, 0.25, 1.25 / 40, 1.5, 0.125),
     ("r-8", 0.0, 10, 1, 0, 0.5, 0.5, 0.5, None, 0.5, 0.0, 2, True)),
    (StepRecord, True, True, (0.0, 0.01, _SHAPE, 3, 0, 9000, 414_145, 0.7),
     (0.5, 0.52, BatchShape(), 0, 4, 0, 100, 0.1, ("a", "b"))),
    (BatchShape, True, True, ((4096, 17), (0, 512), 3, 9000, (), None), ((), (), 64, 123_456, (1, 2), 64)),
    (StepTime, True, True, (0.0123, 0.00045), (1.0, 0.0)),
    (MatchResult, True, True, (0, _NODE), (512, _NODE)),
    (LinearLatencyModel, False, False, (), (0.1, 2e-4, 0.0, 1e-5, 1e-8, 0.002, "lin", "h")),
]
IDS = [c[0].__name__ for c in CASES]


def reference(cls: type, frozen: bool, slots: bool) -> type:
    """``@dataclass(frozen=frozen, slots=slots)`` over ``cls``'s fields and defaults, under ``cls``'s name."""
    names = tuple(cls.__annotations__)
    defaults = cls.__init__.__defaults__ or ()
    ns: dict[str, Any] = {"__annotations__": dict(cls.__annotations__), "__qualname__": cls.__qualname__,
                          "__module__": __name__, "__doc__": cls.__doc__}
    ns.update(zip(names[len(names) - len(defaults):], defaults))
    if "__post_init__" in cls.__dict__:
        ns["__post_init__"] = cls.__dict__["__post_init__"]
    return dataclasses.dataclass(frozen=frozen, slots=slots)(type(cls.__name__, (), ns))


def fields_of(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


@pytest.mark.parametrize(("cls", "frozen", "slots", "a", "b"), CASES, ids=IDS)
def test_written_class_is_its_dataclass(cls: type, frozen: bool, slots: bool, a: tuple, b: tuple) -> None:
    ref = reference(cls, frozen, slots)
    # the same constructor: parameters, kinds, defaults; the same class attributes a dataclass sets
    sig = lambda c: [(p.name, p.kind, p.default) for p in inspect.signature(c.__init__).parameters.values()]  # noqa: E731
    assert sig(cls) == sig(ref)
    assert cls.__match_args__ == ref.__match_args__
    if slots:
        assert cls.__slots__ == ref.__slots__ and not hasattr(cls(*a), "__dict__")
    assert (cls.__hash__ is None) == (ref.__hash__ is None) == (not frozen)
    for values in (a, b):
        x, r = cls(*values), ref(*values)
        assert fields_of(x) == fields_of(r) == values + tuple(
            f.default for f in dataclasses.fields(ref)[len(values):])
        assert repr(x) == repr(r)
        assert x == cls(*values) and not (x != cls(*values)) and x != r  # another class: NotImplemented both ways
        if frozen:
            assert hash(x) == hash(r)
            first = cls.__match_args__[0]
            for op in (lambda o: setattr(o, first, 1), lambda o: delattr(o, first)):
                with pytest.raises(dataclasses.FrozenInstanceError) as mine:
                    op(x)
                with pytest.raises(dataclasses.FrozenInstanceError) as theirs:
                    op(r)
                assert str(mine.value) == str(theirs.value)
            # a name that is no field: frozen too (Python 3.11's slotted dataclass raised TypeError there, from a
            # super() call on the class it replaced; 3.12 raises FrozenInstanceError, as this does)
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
                x.other = 1  # type: ignore[attr-defined]
        # pickling: the same state, so the same pickle apart from the class's name
        y = pickle.loads(pickle.dumps(x))
        assert type(y) is cls and repr(y) == repr(x)  # (a MatchResult's TreeNode compares by identity)
        assert y == x or cls is MatchResult
        if slots and frozen:
            assert x.__getstate__() == r.__getstate__()
        assert copy.copy(x) == x and repr(copy.deepcopy(x)) == repr(x)
        # the dataclasses functions, through the lazily built __dataclass_fields__
        assert dataclasses.is_dataclass(x) and dataclasses.is_dataclass(cls)
        assert [(f.name, f.type, f.default, f.init, f.compare) for f in dataclasses.fields(cls)] == \
            [(f.name, f.type, f.default, f.init, f.compare) for f in dataclasses.fields(ref)]
        assert repr(cls.__dataclass_params__) == repr(ref.__dataclass_params__)  # no __eq__ of its own
        assert repr(dataclasses.astuple(x)) == repr(dataclasses.astuple(r))  # (deep copies)
        assert repr(dataclasses.asdict(x)) == repr(dataclasses.asdict(r))
        changed = dataclasses.replace(x, **{cls.__match_args__[-1]: values[-1] if len(values) == len(
            cls.__match_args__) else b[-1]})
        assert type(changed) is cls
    a1, b1 = cls(*a), cls(*b)
    assert (a1 == b1) == (ref(*a) == ref(*b)) is False


def test_request_spec_still_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="input_len must be >= 1"):
        RequestSpec("r", 0.0, 0, 1)
    with pytest.raises(ValueError, match="output_len must be >= 1"):
        dataclasses.replace(RequestSpec("r", 0.0, 1, 1), output_len=0)
    r = RequestSpec("r", 0.0, 5, 6, key=(1, 2), key_unit=512)
    assert r.with_arrival(2.5) == dataclasses.replace(r, arrival_s=2.5)


def test_a_subclass_reads_its_bases_fields() -> None:
    class Sub(LinearLatencyModel):
        extra = 1

    assert [f.name for f in dataclasses.fields(Sub)] == list(LinearLatencyModel.__match_args__)


def test_the_simulation_path_imports_no_dataclasses() -> None:
    # a trace replay of 50 requests with prefix keys, in a fresh interpreter (what bench_dynamo's child does, with
    # the linear latency model: no tables to build): neither dataclasses nor inspect (≈ 32 M instructions) loaded
    code = """
import sys
from simcore.engine import simulate
from simcore.perf.base import LinearLatencyModel
from simcore.request import RequestSpec
from simcore.settings import ServerSettings
from simcore.workload import TraceReplay
reqs = [RequestSpec(f"r{i}", 0.02 * i, 600 + 7 * i, 20 + i, key=(1, 2, i % 3), key_unit=256) for i in range(50)]
res = simulate(ServerSettings(), LinearLatencyModel(), TraceReplay(reqs), kv_capacity_tokens=50_000, key_unit=256)
assert len(res.records) == 50 and res.steps > 50, res.steps
print("dataclasses" in sys.modules, "inspect" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"], out.stdout
