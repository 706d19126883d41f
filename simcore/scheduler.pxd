# C types for the compiled simcore/scheduler.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is
# the source and runs unchanged without this file. PrefillAdder is an extension type so its own attributes are
# struct fields (no dictionary look-ups); every field keeps its Python value (objects), except the two offsets,
# which are floats in the .py too (C doubles: the same IEEE additions).
import cython

cdef class PrefillAdder:
    cdef public object settings
    cdef public object page
    cdef public object clip
    cdef public object family
    cdef public object v0523
    cdef public object overhead
    cdef public object ratio
    cdef public object _available
    cdef public object _lock
    cdef public object _unlock
    cdef public double total_offset
    cdef public double current_offset
    cdef public object rem_input
    cdef public object rem_chunk
    cdef public list can_run
    cdef public dict extend
    cdef public object new_chunked
    cdef public object log_hit_tokens
    cdef public object log_input_tokens
    cdef public object _running
    cdef public object _req_states

    cpdef object budget_state(self)
    @cython.locals(ext=object)
    cpdef _update(self, object prefix_len, object extend_len, object max_new)
    cpdef object reserve_of(self, object req)
    cpdef object add_one_req(self, object req)
