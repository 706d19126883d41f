"""`FrozenValue`: small immutable records that cost nothing to define (start-up).

A ``@dataclass`` writes its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and, when frozen, ``__setattr__`` and
``__delattr__`` as source text and compiles them with ``exec`` each time its module is imported: ≈ 4.5 million
instructions (≈ 1 ms) a class on Python 3.11, ≈ 30 ms over the 30 dataclasses a 100-request simulation used to
define (docs/architecture.md, "Start-up"). Records that are built a handful of times per run (a model's shapes, a
pool sizing, a trace's issues) do not need generated code: `FrozenValue` gives them the same behaviour from
methods written once here, driven by the class's ``__slots__``:

- the constructor takes the fields in ``__slots__`` order, positionally or by name; ``_defaults`` holds the
  defaults of trailing fields (immutable values only); ``__post_init__``, when the class has one, runs after;
- instances are frozen (assigning or deleting a field raises ``AttributeError``), compared equal when of the same
  class with equal fields in order, hashed by that tuple, shown as ``Name(field=value, ...)``, picklable.

Records on the hot path (``RequestSpec``, ``RequestRecord``, ``BatchShape``: built per request or per step) need a
field-by-field ``__init__``, faster than a generic one: they are dataclasses written out
(:mod:`simcore.written_dataclass`).
"""
from __future__ import annotations

from typing import Any, ClassVar


class FrozenValue:
    """Base of an immutable record whose fields are its ``__slots__`` (see the module docstring)."""

    __slots__ = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self.__slots__
        cls = type(self).__name__
        if len(args) > len(names):
            raise TypeError(f"{cls}() takes {len(names)} fields ({', '.join(names)}), got {len(args)}")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{cls}() got multiple values for field {name!r}")
            object.__setattr__(self, name, value)
        for name in names[len(args):]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in self._defaults:
                value = self._defaults[name]
            else:
                raise TypeError(f"{cls}() missing field {name!r}")
            object.__setattr__(self, name, value)
        if kwargs:  # what is left names no field
            raise TypeError(f"{cls}() got unknown field(s) {', '.join(map(repr, sorted(kwargs)))}")
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of {type(self).__name__} (frozen)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of {type(self).__name__} (frozen)")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())
