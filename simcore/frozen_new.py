"""``frozen_new(cls, names, values)``: ``cls(*values)`` for the frozen, slotted dataclasses the simulation loop
builds by the thousand (``BatchShape`` and ``StepTime`` per priced step, ``RequestRecord`` per finish).

A frozen dataclass's generated ``__init__`` is interpreted Python that sets each field through
``object.__setattr__`` (a generic call per field: ~10k instructions for a 13-field record). Compiled
(``setup.py`` ``NATIVE_MODULES``), this makes the instance with ``cls.__new__`` and fills each slot with
CPython's ``PyObject_GenericSetAttr``, which is what ``object.__setattr__`` does, without the interpreted frame and
the per-field calls: the same object (same class, same field values, so equal, same hash and repr; still
frozen). Interpreted, it is ``cls(*values)``. Only for dataclasses whose ``__init__`` does nothing else (no
``__post_init__``, no ``InitVar``, every field an init field, in the order of ``names``: the class's
``__match_args__``); ``tests/simcore/test_frozen_new.py`` checks each class it is used for.
"""
from __future__ import annotations

try:
    import cython  # compiled (setup.py NATIVE_MODULES): Cython's directives; interpreted: no-ops
except ImportError:  # no Cython installed
    from simcore import _pure_cython as cython


def frozen_new(cls, names, values):  # noqa: ANN001, ANN201 - typed in frozen_new.pxd
    """``cls(*values)``, ``names`` the fields in ``__init__`` order (``cls.__match_args__``)."""
    if cython.compiled:
        obj = cls.__new__(cls)
        for i in range(len(names)):
            PyObject_GenericSetAttr(obj, names[i], values[i])  # noqa: F821 - declared in frozen_new.pxd
        return obj
    return cls(*values)
