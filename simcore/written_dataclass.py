"""Dataclasses written out: the methods ``@dataclass`` would generate, as source; its machinery only when asked for.

``@dataclass`` costs a process twice at start-up (Python 3.11; docs/architecture.md, "Start-up, fourth pass"):
importing ``dataclasses`` imports ``inspect`` (with ``ast``, ``dis``, ``tokenize``: ≈ 32 M instructions), and each
decorated class writes its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``… as text and
``exec``-compiles them (≈ 5 M instructions a class). The records the simulation loop builds per request or per
step (``RequestSpec``, ``RequestRecord``, ``StepRecord``, ``BatchShape``, ``StepTime``, ``MatchResult``,
``LinearLatencyModel``) need a generated-speed ``__init__``, so :class:`simcore.values.FrozenValue`'s generic one
does not fit them. They are written out instead: each class has in its own source exactly the methods
``dataclass(frozen=…, slots=…)`` generates on Python 3.11 (``__slots__``, ``__match_args__``, ``__init__`` with
its defaults and ``__post_init__`` call, ``__repr__`` by ``__qualname__``, ``__eq__`` by the tuple of fields when
the classes are the same, ``__hash__`` of that tuple when frozen, ``None`` when not; frozen ``__setattr__`` and
``__delattr__`` raising ``dataclasses.FrozenInstanceError`` with its messages; ``__getstate__``/``__setstate__``
of a frozen slotted class, so pickles are the same bytes), compiled once into the module's bytecode.

What stays the dataclass machinery's is its introspection: ``__dataclass_fields__`` and ``__dataclass_params__``
are :class:`DataclassFields` descriptors, which on first access (``dataclasses.fields``, ``asdict``, ``astuple``,
``replace``, ``is_dataclass``) import ``dataclasses``, let it build a throw-away dataclass from the class's own
annotations and ``__init__`` defaults, and put that one's ``Field`` objects and parameters on the class for good.
So ``dataclasses`` is imported only by what uses it, and gets the same answers as from the decorated class.
``tests/simcore/test_written_dataclass.py`` checks each class against ``dataclass(...)`` applied to the same
fields: signature, values, equality, hash, repr, frozen errors, pickling, and the ``dataclasses`` functions.
"""
from __future__ import annotations

from typing import Any


class DataclassFields:
    """``__dataclass_fields__ = DataclassFields(frozen=…)`` in a written-out dataclass's body (it puts its sibling
    under ``__dataclass_params__`` itself).

    Filled in on first access from ``dataclasses.dataclass(frozen=…)`` over a class with the same ``__qualname__``,
    annotations (the fields, in order) and ``__init__`` defaults; both attributes are then plain class attributes.
    """

    __slots__ = ("frozen", "owner", "name")

    def __init__(self, *, frozen: bool = False) -> None:
        self.frozen = frozen
        self.owner: type | None = None
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner, self.name = owner, name  # the defining class: a subclass reading the fields gets its base's
        if name == "__dataclass_fields__":
            params = DataclassFields(frozen=self.frozen)
            type.__setattr__(owner, "__dataclass_params__", params)
            params.__set_name__(owner, "__dataclass_params__")

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        owner = self.owner
        assert owner is not None, "DataclassFields must be assigned in a class body"
        fields, params = dataclass_of(owner, self.frozen)
        type.__setattr__(owner, "__dataclass_fields__", fields)
        type.__setattr__(owner, "__dataclass_params__", params)
        return fields if self.name == "__dataclass_fields__" else params


def dataclass_of(cls: type, frozen: bool) -> tuple[dict[str, Any], Any]:
    """The ``__dataclass_fields__`` and ``__dataclass_params__`` that ``dataclass(frozen=frozen)`` gives a class
    with ``cls``'s name, module, annotations and ``__init__`` defaults (the trailing fields)."""
    import dataclasses

    names = tuple(cls.__annotations__)
    defaults = cls.__init__.__defaults__ or ()  # type: ignore[misc]
    ns: dict[str, Any] = {"__annotations__": dict(cls.__annotations__), "__module__": cls.__module__,
                          "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    ns.update(zip(names[len(names) - len(defaults):], defaults))
    shadow = dataclasses.dataclass(frozen=frozen)(type(cls.__name__, (), ns))
    return shadow.__dataclass_fields__, shadow.__dataclass_params__  # type: ignore[attr-defined]


def frozen_error(message: str) -> Exception:
    """``dataclasses.FrozenInstanceError(message)`` (imported on this rare path only)."""
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)
