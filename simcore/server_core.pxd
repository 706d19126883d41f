# C layout of Server's own attributes (simcore/server_core.py; setup.py NATIVE_MODULES). Server derives from
# ServerCore; its hot methods (and ResultProcessor's, DecodeRuns') type `self` as ServerCore, so these reads are
# struct fields. Times stay Python objects (a float or SimPy's int start time, unchanged); counters are C longs.
from simcore.kv_cache cimport KVCache
from simcore.server_state cimport Batch, Req, ReservationSum

cdef class ServerCore:
    cdef public object env, settings, spec, latency, rng, observer, on_finish, ratio, family, ahead, _wake, proc
    cdef public object tokenize_s, detokenize_s, out_step_s, out_tok_s, out_free, tok_req_s, tok_tok_s, tok_free
    cdef public object t, gpu_free, emit_floor, last_decode_apply, last_kind, run_times
    cdef public double launch_wait  # simcore.perf.launch_queue.launch_wait_fraction (0: off)
    cdef public object seq  # (a Python int: _release keys a retracted request's outputs by -(seq << 32))
    cdef public bint fast, signal_finishes, out_on, overlap, batch_is_full, preempt, refresh_on, idle, decode_runs
    cdef public long page, max_req_len, max_running, sum_kv, refresh_calls, last_decode_apply_g
    cdef public long bid, steps, run_steps, num_retractions, num_preemptions, kv_peak_used
    cdef public long recv_interval, recv_counter
    cdef public KVCache kv
    cdef public ReservationSum res
    cdef public Req chunked
    cdef public Batch inflight, due
    cdef public tuple graph_bs
    cdef public list pending, waiting, zombies, joined, launch_counter, fin_heap, itl_vals, itl_w, records, deferred
    cdef public dict decoding, awaiting_result, reqs, events
