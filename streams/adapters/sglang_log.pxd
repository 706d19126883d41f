# C types for the compiled streams/adapters/sglang_log.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The
# .py is the source and runs unchanged without this file. The batch fast path reads the line's characters as C code
# points (``isspace`` of one is CPython's Py_UNICODE_ISSPACE, as sre's ``\s`` and ``str.isspace``), its integers
# are C long longs (at most 18 digits: no overflow) and a float is one C double division of two exact doubles (the
# same IEEE operation as CPython's int / float); the event is made and its slots set with the C functions
# ``cls.__new__(cls)`` and ``object.__setattr__`` call. A character is read with PyUnicode_READ (``_char``): the
# .py compares every index with the length before it reads.
import cython
from cpython.object cimport PyObject, PyObject_GenericSetAttr, PyTypeObject
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_KIND, PyUnicode_READ

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object o)

cdef inline int _set_slot(object o, object name, object value) except -1:
    return PyObject_GenericSetAttr(o, name, value)

cdef inline bint _ascii(str s):
    return PyUnicode_IS_ASCII(s)

cdef inline Py_UCS4 _char(str s, Py_ssize_t i):
    return PyUnicode_READ(PyUnicode_KIND(s), PyUnicode_DATA(s), i)

cdef inline object _new_instance(object cls):  # cls: a class (its metaclass is pydantic's, not exactly type)
    return (<PyTypeObject*>cls).tp_new(<type>cls, <PyObject*>(), NULL)

cdef class _FastClass:
    cdef public object cls
    cdef public dict template
    cdef public double ts_lo, ts_hi
    cdef public Py_ssize_t id_max, source_max, event_id_max
    cdef public dict ranks
    cdef public long long iter_hi

cdef class _Field:
    cdef public str name
    cdef public Py_ssize_t group
    cdef public int rule
    cdef public double lo, hi
    cdef public long long int_hi

@cython.locals(v=cython.longlong, i=Py_ssize_t, c=Py_UCS4)
cpdef long long _int_span(str s, Py_ssize_t a, Py_ssize_t b) except? -2

@cython.locals(m=cython.longlong, digits=cython.int, point=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, c=Py_UCS4,
               p=cython.double)
cpdef double _dec_span(str s, Py_ssize_t a, Py_ssize_t b) except? -2.0

@cython.locals(info=_FastClass, entries=tuple, e=_Field, keys=tuple, key=str, d=dict, fs=set, rule=cython.int,
               v=cython.longlong, x=cython.double, t=cython.double, pct=cython.bint, n=Py_ssize_t, pos=Py_ssize_t,
               start=Py_ssize_t, ne=Py_ssize_t, k=Py_ssize_t, nxt=Py_ssize_t, gi=Py_ssize_t, kl=Py_ssize_t,
               j=Py_ssize_t, c=Py_UCS4, bounds=dict)
cpdef object _fast_batch(tuple plan, str body, object ts, object iid, object source, str event_id, dict ranks,
                         object it)

# The batch line's header read one character at a time (``_batch_line``, the scan of ``_BATCH_LINE``'s match)
@cython.locals(i=Py_ssize_t, c=Py_UCS4)
cdef bint _ascii_digits(str line, Py_ssize_t a, Py_ssize_t b) except -1

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t, c=Py_UCS4, sec=cython.longlong,
               ms=cython.longlong, tags_start=Py_ssize_t, tags_end=Py_ssize_t, decode=cython.bint)
cpdef object _batch_line(str line, object ctx)

cdef object _retraction_line(str line, object ctx, Py_ssize_t start, long long sec, long long ms,
                             Py_ssize_t tags_start, Py_ssize_t tags_end)
