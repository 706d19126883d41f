# C layout of the compiled simcore/perf/costs.py (Cython pure-Python mode; setup.py NATIVE_MODULES): the per-op
# costs every new step shape asks are extension types, so their attributes are struct fields and the hot look-ups
# (attention curves, elementwise kernels, roofline parameters) call each other as C functions. Every value stays a
# Python object (the .py's operations in the .py's order); ``__dict__`` keeps instances open to other attributes.
cdef class RooflineCosts:
    cdef dict __dict__
    cdef public object gpu, eff
    cdef public dict _gemm

    cpdef object p(self, object key)
    cpdef object context_attention_s(self, object batch, object length, object q_heads, object kv_heads,
                                     object head_dim, object kv_bytes)
    cpdef object generation_attention_s(self, object batch, object kv_len, object q_heads, object kv_heads,
                                        object head_dim, object kv_bytes)
    cpdef object allreduce_s(self, object message_bytes, object num_gpus, object graph)
    cpdef object elementwise_s(self, object byts, object kernels)


cdef class TableCosts:
    cdef dict __dict__
    cdef public object tables
    cdef public RooflineCosts roof
    cdef public dict _gemm, _ctx, _gen, _mctx, _mgen

    cpdef object _attn_curve(self, dict cache, object tables, object batch, object q_heads, object kv_heads,
                             object kv_dtype, object head_dim)
    cpdef object context_attention_s(self, object batch, object length, object q_heads, object kv_heads,
                                     object head_dim, object kv_bytes)
    cpdef object generation_attention_s(self, object batch, object kv_len, object q_heads, object kv_heads,
                                        object head_dim, object kv_bytes)
    cpdef object allreduce_s(self, object message_bytes, object num_gpus, object graph)
    cpdef object elementwise_s(self, object byts, object kernels)
