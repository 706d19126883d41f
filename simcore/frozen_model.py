"""`FrozenModel`: typed, frozen, validated records without pydantic, for the specs and settings of the simulate path.

``simcore.settings.ServerSettings``, ``simcore.gpus.GpuSpec``, ``simcore.models.spec.ModelSpec`` and
``simcore.perf.profile.CalibrationProfile`` were pydantic models; importing pydantic and building their schemas
cost ~0.1 CPU s of every process start-up, as much as Dynamo's mocker needs for its whole 100-request run
(docs/architecture.md, Start-up). This base keeps what those classes used of pydantic, with the same class
bodies (``Field(default, ge=…)``, ``field_validator``, ``model_validator(mode="after")``, ``ConfigDict``) and the
same lax conversions of input (``"8192"`` → 8192 for an int, ``1`` → 1.0 for a float, ``"yes"`` → True for a
bool, a list → a tuple; ``tests/simcore/test_frozen_model.py`` checks them against pydantic itself):

- keyword construction; every field checked against its annotation and constraints; unknown fields refused
  (``extra="forbid"``); instances frozen and hashable (when their values are), equal when their fields are;
- ``model_copy(update=…)`` (the update is not validated, as in pydantic), ``model_dump(include=, exclude=,
  mode=)``, ``model_validate``, ``model_fields``, ``model_fields_set``; pickling and copying.

Bad input raises :class:`FieldError`: a ``UserError`` (one line naming the field, dotted for nested records)
that is also a ``ValueError``, with ``errors()`` in pydantic's shape (``loc``, ``msg``, ``type``, ``input``).
Annotations are resolved on first construction of each class (module-level names only), so defining one costs
~0.2 ms.
"""
from __future__ import annotations

import re
import sys
import typing
from types import NoneType, UnionType
from typing import Any, Callable, ClassVar, Literal

from simcore.errors import UserError
from simcore.written_dataclass import frozen_error

_MISSING: Any = object()


class FieldError(UserError, ValueError):
    """Input that does not fit a field: ``loc`` the path of field names, ``msg`` what is wrong."""

    def __init__(self, loc: tuple[str | int, ...], msg: str, value: Any = _MISSING, kind: str = "value_error",
                 hint: str | None = None) -> None:
        self.loc, self.msg, self.kind = loc, msg, kind
        self.input = None if value is _MISSING else value
        text = msg if value is _MISSING else f"{msg}, got {_short(value)}"
        super().__init__(".".join(map(str, loc)) or "input", text, hint)

    def errors(self) -> list[dict[str, Any]]:
        """pydantic's ``ValidationError.errors()`` shape, one entry."""
        return [{"loc": self.loc, "msg": self.msg, "type": self.kind, "input": self.input}]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class FieldInfo:
    """One declared field: default (or factory), numeric bounds, annotation."""

    __slots__ = ("name", "default", "default_factory", "ge", "gt", "le", "lt", "description", "annotation")

    def __init__(self, default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None,
                 ge: float | None = None, gt: float | None = None, le: float | None = None,
                 lt: float | None = None, description: str | None = None) -> None:
        self.name = ""
        self.default, self.default_factory = default, default_factory
        self.ge, self.gt, self.le, self.lt = ge, gt, le, lt
        self.description = description
        self.annotation: Any = None

    def is_required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    def get_default(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default

    def __repr__(self) -> str:
        return f"FieldInfo({self.name!r}, annotation={self.annotation!r})"


def Field(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None,  # noqa: N802 - pydantic's name
          ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
          description: str | None = None) -> Any:
    """A field's default and bounds, as pydantic's ``Field``."""
    return FieldInfo(default, default_factory=default_factory, ge=ge, gt=gt, le=le, lt=lt, description=description)


def ConfigDict(*, frozen: bool = True, extra: str = "forbid") -> dict[str, Any]:  # noqa: N802 - pydantic's name
    """Only the configuration every FrozenModel has: frozen, unknown fields refused."""
    if not frozen or extra != "forbid":
        raise TypeError("FrozenModel supports only frozen=True, extra='forbid'")
    return {"frozen": frozen, "extra": extra}


def field_validator(*names: str, mode: str = "after") -> Callable[[Any], Any]:
    """Decorate a classmethod ``(cls, value) -> value`` run after the type check of the named fields."""
    if mode != "after":
        raise TypeError("FrozenModel field validators run after the type check only")

    def mark(fn: Any) -> Any:
        fn.__frozen_field_validator__ = names
        return fn
    return mark


def model_validator(*, mode: str) -> Callable[[Any], Any]:
    """``mode="after"``: decorate a method ``(self) -> self`` run once every field is set (cross-field checks);
    ``mode="before"``: a classmethod ``(cls, data) -> data`` run on the raw input mapping first."""
    if mode not in ("after", "before"):
        raise TypeError("FrozenModel model validators run before or after the fields")

    def mark(fn: Any) -> Any:
        setattr(fn, "__frozen_model_validator__", mode)
        return fn
    return mark


# ---- conversions (pydantic's lax mode for the types these records use) ---------------------------------------
_INT_TEXT = re.compile(r"[+-]?\d+(?:_\d+)*(?:\.0*)?")
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
Check = Callable[[Any, tuple[Any, ...]], Any]


def _fail(loc: tuple[Any, ...], msg: str, value: Any, kind: str) -> Any:
    raise FieldError(loc, msg, value, kind)


def _to_int(v: Any, loc: tuple[Any, ...]) -> int:
    t = type(v)
    if t is int:
        return v
    if t is bool:
        return int(v)
    if t is float:
        if abs(v) < 9.223372036854775808e18 and v.is_integer():  # pydantic's range: an i64 (nan, inf refused)
            return int(v)
        return _fail(loc, "should be a valid integer", v, "int_from_float")
    if t in (str, bytes):
        s = (v.decode() if t is bytes else v).strip()
        if _INT_TEXT.fullmatch(s):
            return int(s.split(".", 1)[0])
        return _fail(loc, "should be a valid integer", v, "int_parsing")
    if isinstance(v, int):
        return int(v)
    return _fail(loc, "should be a valid integer", v, "int_type")


def _to_float(v: Any, loc: tuple[Any, ...]) -> float:
    t = type(v)
    if t is float:
        return v
    if t is int or t is bool:
        return float(v)
    if t in (str, bytes):
        try:
            return float(v.decode() if t is bytes else v)
        except ValueError:
            return _fail(loc, "should be a valid number", v, "float_parsing")
    if isinstance(v, (int, float)):
        return float(v)
    return _fail(loc, "should be a valid number", v, "float_type")


def _to_bool(v: Any, loc: tuple[Any, ...]) -> bool:
    t = type(v)
    if t is bool:
        return v
    if t in (int, float) and v in (0, 1):
        return bool(v)
    if t in (str, bytes):
        s = (v.decode() if t is bytes else v).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return _fail(loc, "should be a valid boolean", v, "bool_parsing")


def _to_str(v: Any, loc: tuple[Any, ...]) -> str:
    if type(v) is str:
        return v
    if type(v) is bytes:
        return v.decode()
    if isinstance(v, str):
        return str(v)
    return _fail(loc, "should be a valid string", v, "string_type")


def _checker(tp: Any) -> Check:
    """The conversion for annotation ``tp``: ``(value, loc) -> value`` or FieldError."""
    if tp is Any:
        return lambda v, loc: v
    simple = {int: _to_int, float: _to_float, bool: _to_bool, str: _to_str}.get(tp)
    if simple is not None:
        return simple
    if tp is NoneType or tp is None:
        return lambda v, loc: v if v is None else _fail(loc, "should be None", v, "none_required")
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is UnionType:
        members = [a for a in args if a is not NoneType]
        optional = len(members) < len(args)
        checks = [_checker(a) for a in members]

        def union(v: Any, loc: tuple[Any, ...]) -> Any:
            if v is None and optional:
                return None
            first: FieldError | None = None
            for c in checks:
                try:
                    return c(v, loc)
                except FieldError as exc:
                    first = first or exc
            assert first is not None
            raise first
        return checks[0] if len(checks) == 1 and not optional else union
    if origin is Literal:
        allowed = args

        def literal(v: Any, loc: tuple[Any, ...]) -> Any:
            for a in allowed:
                if v == a and type(v) is type(a):
                    return a
            return _fail(loc, f"should be {' or '.join(map(repr, allowed))}", v, "literal_error")
        return literal
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker(args[0])

            def var_tuple(v: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
                if not isinstance(v, (list, tuple, set, frozenset)):
                    return _fail(loc, "should be a valid tuple", v, "tuple_type")
                return tuple(item(x, loc + (i,)) for i, x in enumerate(v))
            return var_tuple
        items = [_checker(a) for a in args]

        def fixed_tuple(v: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
            if not isinstance(v, (list, tuple, set, frozenset)) or len(v) != len(items):
                return _fail(loc, f"should be a tuple of {len(items)} items", v, "tuple_type")
            return tuple(c(x, loc + (i,)) for i, (c, x) in enumerate(zip(items, v)))
        return fixed_tuple
    if origin is list:
        item = _checker(args[0]) if args else (lambda v, loc: v)

        def as_list(v: Any, loc: tuple[Any, ...]) -> list[Any]:
            if not isinstance(v, (list, tuple, set, frozenset)):
                return _fail(loc, "should be a valid list", v, "list_type")
            return [item(x, loc + (i,)) for i, x in enumerate(v)]
        return as_list
    if origin is dict:
        key, val = (_checker(args[0]), _checker(args[1])) if args else ((lambda v, loc: v),) * 2

        def as_dict(v: Any, loc: tuple[Any, ...]) -> dict[Any, Any]:
            if not isinstance(v, dict):
                return _fail(loc, "should be a valid dictionary", v, "dict_type")
            return {key(k, loc + (k,)): val(x, loc + (k,)) for k, x in v.items()}
        return as_dict
    if isinstance(tp, type) and issubclass(tp, FrozenModel):
        model = tp

        def nested(v: Any, loc: tuple[Any, ...]) -> Any:
            if isinstance(v, model):
                return v
            if not isinstance(v, dict):
                return _fail(loc, f"should be a {model.__name__} (a mapping)", v, "model_type")
            return model._build(v, loc)
        return nested
    if isinstance(tp, type):
        cls = tp
        return lambda v, loc: v if isinstance(v, cls) else _fail(loc, f"should be a {cls.__name__}", v, "is_instance_of")
    raise TypeError(f"FrozenModel: unsupported annotation {tp!r}")


_ANNOTATIONS: dict[tuple[str, str], Any] = {}


def _annotation(ann: Any, module: str) -> Any:
    """A (``from __future__ import annotations``) string annotation evaluated in its module's globals, once per text
    and module (start-up: ``typing.get_type_hints`` cost ~1 ms per record class). Annotations may name module-level
    types only, not names defined in the class body."""
    if not isinstance(ann, str):
        return ann
    key = (module, ann)
    got = _ANNOTATIONS.get(key, _MISSING)
    if got is _MISSING:
        got = _ANNOTATIONS[key] = eval(ann, vars(sys.modules[module]))  # noqa: S307 - the class's own source
    return got


def _bounded(check: Check, f: FieldInfo) -> Check:
    bounds = [(b, op) for b, op in ((f.ge, "ge"), (f.gt, "gt"), (f.le, "le"), (f.lt, "lt")) if b is not None]
    if not bounds:
        return check
    words = {"ge": "greater than or equal to", "gt": "greater than", "le": "less than or equal to", "lt": "less than"}

    def bounded(v: Any, loc: tuple[Any, ...]) -> Any:
        v = check(v, loc)
        if v is None:
            return v
        for b, op in bounds:
            ok = v >= b if op == "ge" else v > b if op == "gt" else v <= b if op == "le" else v < b
            if not ok:
                raise FieldError(loc, f"should be {words[op]} {b}", v, f"{op}_than" if op in ("gt", "lt")
                                 else ("greater_than_equal" if op == "ge" else "less_than_equal"))
        return v
    return bounded


class FrozenModel:
    """Base of the frozen records (see the module docstring)."""

    model_fields: ClassVar[dict[str, FieldInfo]] = {}
    _checks: ClassVar[dict[str, Check] | None] = None
    _field_validators: ClassVar[dict[str, list[str]]] = {}
    _model_validators: ClassVar[tuple[str, ...]] = ()
    _before_validators: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        fields: dict[str, FieldInfo] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(getattr(base, "model_fields", {}))
        own = cls.__dict__.get("__annotations__", {})
        for name, ann in own.items():
            if name.startswith("_") or name == "model_config" or "ClassVar" in str(ann):
                continue
            value = cls.__dict__.get(name, _MISSING)
            info = value if isinstance(value, FieldInfo) else FieldInfo(value)
            info.name = name
            fields[name] = info
            if value is not _MISSING:
                delattr(cls, name)
        cls.model_fields = fields
        validators: dict[str, list[str]] = {}
        model_checks: dict[str, list[str]] = {"before": [], "after": []}
        for base in reversed(cls.__mro__):
            for attr, obj in vars(base).items():
                fn = obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj
                for name in getattr(obj, "__frozen_field_validator__", None) or getattr(
                        fn, "__frozen_field_validator__", ()):
                    validators.setdefault(name, []).append(attr)
                mode = getattr(obj, "__frozen_model_validator__", None) or getattr(fn, "__frozen_model_validator__",
                                                                                   None)
                if mode and attr not in model_checks[mode]:
                    model_checks[mode].append(attr)
        unknown = set(validators) - set(fields)
        if unknown:
            raise TypeError(f"{cls.__name__}: validators for unknown fields {sorted(unknown)}")
        cls._field_validators = validators
        cls._model_validators, cls._before_validators = tuple(model_checks["after"]), tuple(model_checks["before"])
        cls._checks = None

    # ---- construction --------------------------------------------------------------------------------------
    @classmethod
    def _compile(cls) -> dict[str, Check]:
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name, ann in klass.__dict__.get("__annotations__", {}).items():
                if name in cls.model_fields:
                    hints[name] = _annotation(ann, klass.__module__)
        checks = {}
        for name, info in cls.model_fields.items():
            info.annotation = hints[name]
            checks[name] = _bounded(_checker(hints[name]), info)
        cls._checks = checks
        return checks

    @classmethod
    def _build(cls, data: dict[str, Any], loc: tuple[Any, ...] = ()) -> Any:
        self = object.__new__(cls)
        self._fill(data, loc)
        return self

    def __init__(self, **data: Any) -> None:
        self._fill(data, ())

    def _fill(self, data: dict[str, Any], loc: tuple[Any, ...]) -> None:
        cls = type(self)
        checks = cls._checks or cls._compile()
        fields = cls.model_fields
        for attr in cls._before_validators:
            data = getattr(cls, attr)(data)
            if not isinstance(data, dict):
                raise FieldError(loc, f"{cls.__name__} needs a mapping of fields", data, "model_type")
        for key in data:
            if key not in fields:
                import difflib
                near = difflib.get_close_matches(str(key), list(fields), n=1)
                raise FieldError(loc + (key,), f"unknown field of {cls.__name__} (extra inputs are not permitted)",
                                 kind="extra_forbidden", hint=f"did you mean {near[0]!r}?" if near else None)
        d = self.__dict__
        for name, info in fields.items():
            if name in data:
                v = checks[name](data[name], loc + (name,))
                for attr in cls._field_validators.get(name, ()):
                    try:
                        v = getattr(cls, attr)(v)
                    except (ValueError, AssertionError) as exc:
                        if isinstance(exc, UserError):
                            raise
                        raise FieldError(loc + (name,), str(exc), data[name]) from None
                d[name] = v
            elif info.is_required():
                raise FieldError(loc + (name,), f"is required by {cls.__name__}", kind="missing")
            else:
                d[name] = info.get_default()
        d["__fields_set__"] = frozenset(data)
        for attr in cls._model_validators:
            getattr(self, attr)()

    @classmethod
    def model_validate(cls, obj: Any) -> Any:
        """An instance from a mapping (checked), or ``obj`` itself when it is already one."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, dict):
            raise FieldError((), f"{cls.__name__} needs a mapping of fields", obj, "model_type")
        return cls._build(obj)

    # ---- frozen value semantics ------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise frozen_error(f"{type(self).__name__} is frozen: cannot assign {name!r}")

    def __delattr__(self, name: str) -> None:
        raise frozen_error(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[n] for n in self.model_fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        d = self.__dict__
        return f"{type(self).__name__}({', '.join(f'{n}={d[n]!r}' for n in self.model_fields)})"

    def __iter__(self) -> typing.Iterator[tuple[str, Any]]:
        d = self.__dict__
        return iter([(n, d[n]) for n in self.model_fields])

    @property
    def model_fields_set(self) -> frozenset[str]:
        """The fields given at construction (or in a copy's update)."""
        return self.__dict__["__fields_set__"]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with ``update`` applied (not validated, as pydantic's ``model_copy``)."""
        new = object.__new__(type(self))
        d = dict(self.__dict__)
        if deep:
            import copy
            d = copy.deepcopy(d)
        if update:
            unknown = set(update) - set(self.model_fields)
            if unknown:
                raise FieldError((sorted(unknown)[0],), f"unknown field of {type(self).__name__}",
                                 kind="extra_forbidden")
            d.update(update)
            d["__fields_set__"] = d["__fields_set__"] | frozenset(update)
        new.__dict__.update(d)
        return new

    def model_dump(self, *, include: set[str] | None = None, exclude: set[str] | None = None,
                   mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        """The fields as a dict (nested records as dicts; ``mode="json"``: tuples as lists)."""
        d = self.__dict__
        out = {}
        for n in self.model_fields:
            if (include is not None and n not in include) or (exclude is not None and n in exclude):
                continue
            v = d[n]
            if v is None and exclude_none:
                continue
            out[n] = _dump(v, mode)
        return out


def _dump(v: Any, mode: str) -> Any:
    if isinstance(v, FrozenModel):
        return v.model_dump(mode=mode)
    if isinstance(v, dict):
        return {k: _dump(x, mode) for k, x in v.items()}
    if isinstance(v, (tuple, list)):
        items = [_dump(x, mode) for x in v]
        return items if mode == "json" or isinstance(v, list) else tuple(items)
    return v
