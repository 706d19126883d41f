# C types for the compiled streams/kafka_records.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is
# the source and runs unchanged without this file. A batch's bytes are read as C bytes (the bytearray's own buffer,
# every index compared with its length first), the one- and two-byte varints and the offsets and timestamps of a
# batch whose base values are within 2^62 of zero are C long longs (no overflow: a delta is at most 2^13), and a key
# or value is one PyBytes_FromStringAndSize of its span; everything else is Python objects, as in the .py.
import cython
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_FromStringAndSize

cdef inline bytes _bytes(bytearray data, Py_ssize_t start, Py_ssize_t n):
    return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(data) + start, n)

cdef class _BatchReader:
    cdef public str topic
    cdef public object partition
    cdef public object skip_below
    cdef public bint skipping
    cdef public bytearray data
    cdef public Py_ssize_t pos, end, left
    cdef public long long base, first_ts
    cdef public bint small, bad
    cdef public object base_obj, first_ts_obj, append_ts, ts_type, epoch, next_offset
    cdef public Py_ssize_t records_read
    cdef public long long bytes_read

    @cython.locals(got=Py_ssize_t)
    cpdef Py_ssize_t read(self, list out, Py_ssize_t n) except -1

    @cython.locals(pos=Py_ssize_t, b=cython.longlong, c=cython.longlong)
    cdef long long _v(self) except? -1

    @cython.locals(first=Py_ssize_t, length=cython.longlong, start=Py_ssize_t, ts_delta=cython.longlong,
                   offset_delta=cython.longlong, key_len=cython.longlong, value_len=cython.longlong,
                   header_count=cython.longlong, offset=cython.longlong)
    cdef object _next(self)

    cdef object _general(self)
