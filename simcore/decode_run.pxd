# C types for the compiled simcore/decode_run.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is
# the source and runs unchanged without this file. Step counts and Σkv are C longs; step times are C doubles (the
# same IEEE operations, in the same order, as CPython's floats: + − × ÷ round alike; an int ÷ int below 2**53 is
# the same correctly rounded quotient).
import cython
from simcore.kv_cache cimport KVCache
from simcore.server_state cimport Batch, Req
from simcore.server_core cimport ServerCore

cdef class DecodeStepTimes:
    cdef public object latency
    cdef public object knot_spacing
    cdef public dict _knots
    cdef public long long_steps
    cdef public tuple _last

    cpdef bint vectorize(self, long m)
    cpdef tuple price(self, long rows, object graph_bs, long sum_kv)
    @cython.locals(key=tuple, v=tuple)
    cpdef tuple _knot(self, long rows, object graph_bs, long x)
    @cython.locals(q=long, x0=long, last=tuple, g0=double, c0=double, g1=double, c1=double, w=double)
    cpdef tuple one(self, long rows, object graph_bs, long sum_kv)
    @cython.locals(want=long)
    cpdef long spacing(self, long sum_kv)

@cython.locals(done=long, block=long, last_start=double, last_gpu=double, m=long, s0=long, q=long, exact=bint,
               x0=long, x1=long, g0=double, c0=double, g1=double, c1=double, dg=double, dc=double, s=long,
               stopped=bint, first=bint, g=double, c=double, w=double, t0=double, launch_f=double,
               starts=list, ends=list, cpus=list)
cpdef tuple plan_run(DecodeStepTimes times, long rows, object graph_bs, long sum_kv0, long limit, double t,
                     double gpu_free, double bound, bint overlap)

@cython.locals(n=Py_ssize_t, m=Py_ssize_t, e=double, c=double, gaps=list)
cpdef tuple decode_gaps(list ends, list cpu, bint overlap, double floor, double last, double detokenize_s,
                        bint vectorize=*)
from simcore.frozen_new cimport frozen_new
