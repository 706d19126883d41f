# Compiled simcore/frozen_new.py (Cython pure-Python mode; setup.py NATIVE_MODULES): object.__setattr__'s own C
# function, called directly for each field of a frozen dataclass being built.
cdef extern from "Python.h":
    int PyObject_GenericSetAttr(object o, object name, object value) except -1

cpdef object frozen_new(object cls, tuple names, tuple values)
