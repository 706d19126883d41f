"""``simcore.frozen_new.frozen_new`` builds exactly what the dataclass's own ``__init__`` builds, for each frozen
dataclass the simulation loop makes with it (BatchShape, StepTime, RequestRecord), compiled or interpreted."""
from __future__ import annotations

import dataclasses

import pytest

from simcore.frozen_new import frozen_new
from simcore.perf.base import BatchShape, StepTime
from simcore.results import RequestRecord

CASES = [
    (BatchShape, ((4096, 17), (0, 512), 3, 9000, (), None)),
    (BatchShape, ((), (), 64, 123_456, (), 64)),
    (StepTime, (0.0123, 0.00045)),
    (RequestRecord, ("r-7", 1.5, 900, 41, 512, 1.75, 3.0, 0.25, 1.25 / 40, 1.5, 0.125, 2, False)),
    (RequestRecord, ("r-8", 0.0, 10, 1, 0, 0.5, 0.5, 0.5, None, 0.5, 0.0, 0, True)),
]


@pytest.mark.parametrize(("cls", "values"), CASES)
def test_frozen_new_equals_the_dataclass_constructor(cls: type, values: tuple) -> None:
    names = cls.__match_args__
    made = frozen_new(cls, names, values)
    ref = cls(*values)
    assert type(made) is cls
    assert made == ref and hash(made) == hash(ref) and repr(made) == repr(ref)
    assert [getattr(made, f.name) for f in dataclasses.fields(cls)] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.__setattr__(names[0], values[0])  # still frozen


@pytest.mark.parametrize("cls", [BatchShape, StepTime, RequestRecord])
def test_the_classes_init_only_sets_their_fields(cls: type) -> None:
    # frozen_new skips __init__: right only when __init__ sets every field, in __match_args__ order, and nothing else
    fields = dataclasses.fields(cls)
    assert cls.__match_args__ == tuple(f.name for f in fields)
    assert all(f.init and f._field_type is dataclasses._FIELD for f in fields)  # no InitVar / ClassVar
    assert not hasattr(cls, "__post_init__")
    assert cls.__dataclass_params__.frozen and hasattr(cls, "__slots__")
