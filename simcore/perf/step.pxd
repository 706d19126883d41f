# C layout of the compiled simcore/perf/step.py (Cython pure-Python mode; setup.py NATIVE_MODULES): the step-time
# model is an extension type, so its attributes are struct fields and its pricing methods call each other as C
# functions. Every value stays a Python object (ints, floats, tuples as the .py computes them: the same
# operations in the same order). ``__dict__`` keeps instances open to attributes set from outside.
cdef class StepLatencyModel:
    cdef dict __dict__
    cdef public object model, costs, tp, precision, profile, frontend_s, kv_bytes, shapes, backend, name
    cdef public object profile_hash, _k_gemm, _k_ctx, _k_gen, _k_comm, _k_moe, _k_ew, _gemm_dtype
    cdef public object _attn_curves, _dense_curves, _shared_curves, _lm_curve, _kv_b_curve, _sm_version
    cdef public object _launch_per_layer, eager_floor_s, _window, _swa_layers, _full_layers
    cdef public dict _dense_memo, _attention_dense_memo, _mlp_memo, _memo

    cpdef object _dense_part(self, object m, object logits, object graph)
    cpdef object _layer_elementwise_s(self, object m)
    cpdef object _head_elementwise_s(self, object m, object logits)
    cpdef object _head_s(self, object logits)
    cpdef object _moe_layers_s(self, object m)
    cpdef object _context_attention(self, object extend, object prefix)
    cpdef object _context_attention_layers(self, object extend, object prefix)
    cpdef object _generation_attention_layers(self, object batch, object shape)
    cpdef object _generation_attention(self, object batch, object sum_kv)
    cpdef object step_time(self, object shape)
    cpdef object _compute(self, object shape)
    cpdef object _add_attention(self, object acc, object shape, object bs, object m)
    cpdef object finish_step(self, object gpu, object cpu, object graph, object extend, object n_req)
from simcore.frozen_new cimport frozen_new
