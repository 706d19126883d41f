# C types for the compiled simcore/scheduler.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is
# the source and runs unchanged without this file. PrefillAdder is an extension type so its own attributes are
# struct fields (no dictionary look-ups). Token counts and budgets are C longs (far below 2**63; every value read
# back is the int the .py holds), the two offsets C doubles (floats in the .py too: the same IEEE additions, an
# int added to them converted first, as Python does); rem_chunk stays an object (None without chunking).
import cython
from simcore.kv_cache cimport KVCache

@cython.locals(hit=tuple, values=tuple)
cdef tuple _adder_settings(object settings)
@cython.locals(hit=tuple, values=tuple)
cdef tuple _policy_settings(object settings)

cdef class PrefillAdder:
    cdef public object settings
    cdef public long page
    cdef public long clip
    cdef public object family
    cdef public bint v0523
    cdef public bint v04
    cdef public long overhead
    cdef public object max_requests
    cdef public bint chunking
    cdef public bint no_radix
    cdef public object ratio
    cdef public object _available
    cdef public object _lock
    cdef public object _unlock
    cdef public KVCache _kv
    cdef public double total_offset
    cdef public double current_offset
    cdef public long rem_input
    cdef public object rem_chunk
    cdef public list can_run
    cdef public dict extend
    cdef public object new_chunked
    cdef public long log_hit_tokens
    cdef public long log_input_tokens
    cdef public object _running
    cdef public object _req_states

    cpdef long _avail(self)
    @cython.locals(avail=long, rem_chunk=object)
    cpdef object budget_state(self)
    @cython.locals(page=long, ext=long)
    cpdef _update(self, long prefix_len, long extend_len, long max_new)
    cpdef long reserve_of(self, object req)
    @cython.locals(max_new=long, reserve=long, prefix_len=long, extend=long, total_tokens=long, kv=KVCache,
                   admitted=bint, page=long, input_tokens=long, check_input=bint, trunc=long, end=long,
                   v04=bint)
    cpdef object add_one_req(self, object req)
