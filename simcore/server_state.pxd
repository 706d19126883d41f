# C types for the compiled simcore/server_state.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is
# the source and runs unchanged without this file. Req, Batch and ReservationSum are extension types so their
# attributes are struct fields (no dictionary look-ups); every field keeps its Python value (objects).
import cython

cdef class Req:
    cdef public object spec
    cdef public object rid
    cdef public object key
    cdef public object key_unit
    cdef public object input_len
    cdef public object output_len
    cdef public object max_new
    cdef public object ignore_eos
    cdef public object eos
    cdef public list launch_counter
    cdef public object node
    cdef public object last_node
    cdef public object out_len_base
    cdef public object launches_base
    cdef public object in_decoding
    cdef public object ver
    cdef public object state
    cdef public object prefix_len
    cdef public object held
    cdef public object extend_end
    cdef public object fill_target
    cdef public object cached_tokens
    cdef public object admitted_once
    cdef public object stain
    cdef public object num_retractions
    cdef public object ingest_s
    cdef public object wait_entry_s
    cdef public object queue_time_s
    cdef public object first_token_s
    cdef public object last_emit_s
    cdef public object last_bid
    cdef public object dropped_bid
    cdef public object res_group
    cdef public object in_dec
    cdef public object abort_error
    cdef public object out_key_base
    cdef public object out_key_len

    cpdef bint last_bid_in(self, Batch b)

cdef class Batch:
    cdef public object bid
    cdef public object kind
    cdef public object _shape
    cdef public object dec_rows
    cdef public object dec_sum_kv
    cdef public object dec_graph
    cdef public object gpu_end
    cdef public object emit_s
    cdef public object prefill_done
    cdef public object finishers
    cdef public object n_emit
    cdef public object newcomers
    cdef public object g_after
    cdef public object retracted

    cpdef set_decode(self, object rows, object sum_kv, object graph_bs)

cdef class ReservationSum:
    cdef public object clip
    cdef public list sums
    cdef public list ndec
    cdef public list heap
    cdef public object seq

    cpdef object left(self, Req r)
    cpdef object value(self, object ratio)
    @cython.locals(G=object, t=object)
    cpdef add(self, Req r, object group, object decoding)
    @cython.locals(g=object)
    cpdef remove(self, Req r)
    @cython.locals(r=Req, heap=list, drop=list)
    cpdef advance(self, object G, object steps, dict reqs)
from simcore.frozen_new cimport frozen_new
