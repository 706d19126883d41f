# C types for the compiled streams/adapters/sglang_log.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The
# .py is the source and runs unchanged without this file. The batch fast path's text readers loop over the
# characters as C code points, their integers are C long longs (at most 18 digits: no overflow) and a float is one
# C double division of two exact doubles (the same IEEE operation as CPython's int / float); the event's slots are
# set with the C function ``object.__setattr__`` calls.
import cython
from cpython.object cimport PyObject_GenericSetAttr

cdef inline int _set_slot(object o, object name, object value) except -1:
    return PyObject_GenericSetAttr(o, name, value)

@cython.locals(n=Py_ssize_t, v=cython.longlong, i=Py_ssize_t, c=Py_UCS4)
cpdef long long _int_text(str s) except? -2

@cython.locals(m=cython.longlong, digits=cython.int, point=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, c=Py_UCS4,
               p=cython.double)
cpdef double _dec_text(str s, Py_ssize_t end) except? -2.0

@cython.locals(entries=tuple, e=tuple, d=dict, fs=set, rule=cython.long, n=cython.longlong, x=cython.double,
               end=Py_ssize_t, pct=cython.bint, s=str)
cpdef object _fast_batch(tuple plan, tuple values, object ts, object iid, object source, str event_id, dict ranks,
                         object it)
