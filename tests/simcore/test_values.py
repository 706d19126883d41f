"""`simcore.values.FrozenValue` behaves as the frozen dataclass it replaces: construction, defaults, errors,
equality, hashing, immutability, repr, pickling, ``__post_init__``."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from simcore.memory import KVPoolSizing
from simcore.perf.moe_parallel import ParallelLayout
from simcore.values import FrozenValue
from simcore.workload import Uniform


class Point(FrozenValue):
    __slots__ = ("x", "y", "label")
    _defaults = {"label": "p"}


@dataclasses.dataclass(frozen=True, slots=True)
class PointDC:
    x: float
    y: float
    label: str = "p"


@pytest.mark.parametrize("args,kwargs", [((1.0, 2.0), {}), ((1.0,), {"y": 2.0}), ((), {"y": 2.0, "x": 1.0}),
                                         ((1.0, 2.0, "q"), {}), ((1.0,), {"label": "q", "y": 3.0})])
def test_construction_equality_hash_and_repr_are_the_dataclass_s(args: tuple, kwargs: dict) -> None:
    a, b = Point(*args, **kwargs), PointDC(*args, **kwargs)
    assert (a.x, a.y, a.label) == dataclasses.astuple(b)
    assert hash(a) == hash(b)  # both hash the tuple of fields
    assert repr(a) == repr(b).replace("PointDC", "Point")
    assert a == Point(*args, **kwargs) and a != Point(a.x, a.y + 1.0, a.label)
    assert a != b  # another class, as two dataclasses of different classes
    assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) == a and copy.copy(a) == a


@pytest.mark.parametrize("args,kwargs", [((), {}), ((1.0,), {}), ((1.0, 2.0, "q", 4), {}), ((1.0, 2.0), {"z": 1}),
                                         ((1.0, 2.0), {"x": 1.0})])
def test_wrong_arguments_are_refused_as_by_the_dataclass(args: tuple, kwargs: dict) -> None:
    with pytest.raises(TypeError):
        PointDC(*args, **kwargs)
    with pytest.raises(TypeError):
        Point(*args, **kwargs)


def test_frozen_and_slotted() -> None:
    p = Point(1.0, 2.0)
    with pytest.raises(AttributeError):
        p.x = 3.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y
    with pytest.raises(AttributeError):
        p.z = 1  # type: ignore[attr-defined]
    assert not hasattr(p, "__dict__")


def test_post_init_validates_and_may_adjust_through_object_setattr() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        Uniform(5, 2)
    assert Uniform(2, 5) == Uniform(low=2, high=5) and {Uniform(2, 5): 1}[Uniform(2, 5)] == 1
    # SGLang sets ep_size to tp_size for the DeepEP all-to-all (ParallelLayout.__post_init__)
    lay = ParallelLayout(tp_size=8, ep_size=2, moe_a2a_backend="deepep")
    assert lay.ep_size == 8 and lay == ParallelLayout(tp_size=8, ep_size=8, moe_a2a_backend="deepep")
    assert ParallelLayout().tp_size == 1 and ParallelLayout(tp_size=4).is_trivial


def test_records_keep_their_fields_in_order() -> None:
    s = KVPoolSizing(0.8, 1000, 64, 131072.0, 10**9, 8192)
    assert (s.swa_max_total_num_tokens, s.full_cell_bytes, s.swa_cell_bytes) == (None, 0.0, 0.0)
    assert s.kv_pool_bytes == 1000 * 131072.0
    assert s == KVPoolSizing(mem_fraction_static=0.8, max_total_num_tokens=1000, max_running_requests=64,
                             cell_bytes_per_token=131072.0, weight_bytes_per_rank=10**9, context_len=8192)
