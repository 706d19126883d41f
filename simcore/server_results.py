"""Applying a launched batch's results, SGLang's ``process_batch_result`` (§2.1, §3.4): tokens, finishes, ITL.

A mixin of :class:`simcore.server.Server` (it uses the server's queues, KV cache and counters), kept apart so the
scheduling loop and the result side each read on their own.
"""
from __future__ import annotations

try:
    import cython  # compiled (setup.py NATIVE_MODULES): Cython's directives; interpreted: no-ops
except ImportError:  # no Cython installed
    from simcore import _pure_cython as cython
from simcore.frozen_new import frozen_new
from simcore.kv_cache import KVCache
from simcore.results import RequestRecord
from simcore.server_core import ServerCore
from simcore.server_state import Batch, Req

RECORD_FIELDS: tuple[str, ...] = RequestRecord.__match_args__  # (frozen_new)


class ResultProcessor:
    """``_apply(batch, t)`` and what it triggers: first tokens, prompt checkpoints, ITL samples, finishes.

    Mixed into Server, whose attributes it uses: ``kv``, ``awaiting_result``, ``reqs``, ``events``, ``records``, ``deferred``,
    ``res``, ``itl_vals``/``itl_w``, ``last_decode_apply(_g)``, ``detokenize_s``, ``on_finish``, ``env``.
    """

    @cython.locals(self=ServerCore, b=Batch, r=Req, kv=KVCache, itl_vals=list, itl_w=list)
    def _apply(self, b: Batch, t: float) -> None:
        # state changes now (t); the client sees the tokens at emit_t, never before earlier batches' tokens
        base = b.emit_s if b.emit_s > self.emit_floor else self.emit_floor
        self.emit_floor = base
        if self.out_on and (b.n_emit or b.prefill_done):
            # serial output path (detokenizer → tokenizer manager → SSE): this step's tokens reach the client
            # once the stage has finished the earlier steps' and this one's work; streams sent every
            # stream_interval tokens cost that much less per decode row (first tokens are always sent)
            n = len(b.prefill_done) + b.n_emit / self.settings.stream_interval
            start = base if base > self.out_free else self.out_free
            self.out_free = base = start + self.out_step_s + self.out_tok_s * n
        emit_t = base + self.detokenize_s
        kv = self.kv
        # (the ITL samples: self._itl(v, w), inlined)
        itl_vals = self.itl_vals
        itl_w = self.itl_w
        for r in b.prefill_done:
            if r.state not in ("run", "finishing"):
                continue
            if r.first_token_s is None:
                r.first_token_s = emit_t
            else:
                itl_vals.append(emit_t - r.last_emit_s)
                itl_w.append(1)
            r.last_emit_s = emit_t
            if r.state == "run" and r.node is not None:
                r.node = kv.cache_unfinished(r.key, r.fill_target, r.node, t)
        if b.n_emit or b.newcomers:
            n_new = 0
            for r in b.newcomers:
                if r.dropped_bid == b.bid:
                    continue
                n_new += 1
                itl_vals.append(emit_t - r.last_emit_s)
                itl_w.append(1)
            cont = b.n_emit - n_new
            if cont > 0:
                itl_vals.append(emit_t - self.last_decode_apply)
                itl_w.append(cont)
            self.last_decode_apply = emit_t
            self.last_decode_apply_g = b.g_after
        for r in b.finishers:
            if r.state != "finishing":
                continue
            del self.awaiting_result[r.rid]
            self.res.remove(r)
            kv.cache_finished(r.key, r.input_len + r.out_len_base - 1, r.node, t, kv_tokens=r.held)
            self._finish(r, emit_t, aborted=r.abort_error is not None)
            self.batch_is_full = False

    @cython.locals(self=ServerCore)
    def _itl(self, v: float, w: int) -> None:
        """One inter-token gap ``v`` (s) shared by ``w`` tokens."""
        self.itl_vals.append(v)
        self.itl_w.append(w)

    @cython.locals(self=ServerCore, r=Req)
    def _finish(self, r: Req, t: float, aborted: bool) -> None:
        r.state = "done"
        first = r.first_token_s if r.first_token_s is not None else t
        out = r.out_len_base if not aborted else max(r.out_len_base, 0)
        # RequestRecord(rid=..., arrival_s=..., ..., aborted=...), its fields in order (simcore.frozen_new)
        rec = frozen_new(RequestRecord, RECORD_FIELDS, (
            r.rid, r.spec.arrival_s, r.spec.input_len, out, r.cached_tokens, first, t, first - r.spec.arrival_s,
            (t - first) / (out - 1) if out > 1 else None, t - r.spec.arrival_s, r.queue_time_s, r.num_retractions,
            aborted))
        self.records.append(rec)
        del self.reqs[r.rid]
        if not self.signal_finishes:  # nobody waits on finish events (Server docstring): the record is all
            self.events.pop(rec.rid, None)
            return
        if t > self.env.now:
            # the client sees it later (detokenize_s, or an abort decided while the loop runs ahead of
            # env.now): signal it at its own time; kept in the snapshot until then
            self.deferred.append((t, rec))
            signal = self._signal_deferred  # (a closure over the bound method, not over Cython's typed self)
            self._late(t - self.env.now).callbacks.append(lambda _e: signal(rec))
        else:
            self._signal(rec)

    def _signal_deferred(self, rec: RequestRecord) -> None:
        self.deferred = [(t, x) for t, x in self.deferred if x is not rec]
        self._signal(rec)

    def _signal(self, rec: RequestRecord) -> None:
        ev = self.events.pop(rec.rid, None)
        if self.on_finish is not None:
            self.on_finish(rec)
        if ev is not None and not ev.triggered:
            ev.succeed(rec)

    @cython.locals(self=ServerCore, r=Req)
    def _abort(self, r: Req, t: float) -> None:
        """A request that cannot fit even alone ("Out of memory even after retracting")."""
        if r.node is not None:
            self.kv.release(r.node, r.held)
            r.node = None
        self._finish(r, t, aborted=True)
