# C layout of the compiled simcore/perf/interp.py (Cython pure-Python mode; setup.py NATIVE_MODULES): `Curve`, the
# 1-D lookup every step price goes through, is an extension type (struct fields, no interpreted frame per call).
# Its values stay Python floats in Python lists; __call__'s locals are C doubles (the same IEEE operations).
cdef class Curve:
    cdef public list lx, ly
    cdef public Py_ssize_t n
