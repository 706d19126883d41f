"""The C layout of :class:`simcore.server.Server`'s own state, for its compiled build.

``Server`` (and its mixins ``ResultProcessor`` and ``DecodeRuns``) read and write their own attributes tens of
times per scheduler iteration. Interpreted, or compiled as a plain Python class, each is a generic attribute
look-up (the type's MRO, then the instance dict). Compiled (``setup.py`` ``NATIVE_MODULES``), ``server_core.pxd``
makes this class an extension type whose fields are those attributes, ``Server`` derives from it, and the hot
methods declare ``self`` as a ``ServerCore`` (``@cython.locals(self=ServerCore)``), so each read is a struct
field. Interpreted, this is an empty base class and changes nothing. Fields are Python objects where the value
may be a float or an int (times: the same values either way), C longs only for counters and token counts that are
always ints, ``bint`` for flags that are always bools.
"""
from __future__ import annotations


class ServerCore:
    """The fields of one simulated server (declared in ``server_core.pxd``; set by ``Server.__init__``)."""
