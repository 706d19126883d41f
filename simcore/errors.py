"""User-facing errors: one line that names the field and says what to do."""
from __future__ import annotations


class UserError(Exception):
    """An input problem the user can fix. Commands (shadowsim.cli) print ``shadowsim: error: <message>`` and exit 2."""

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        self.field = field
        self.hint = hint
        text = f"{field}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class SimulatedServerFailure(UserError):
    """The simulated SGLang server stops where the real one would, with the real server's own error.

    SGLang's admission can let the chunks of a long prompt outgrow the KV pool (a chunked continuation takes
    ``rem_chunk_tokens`` when the memory budget is spent, ``schedule_policy.py::add_chunked_req``); allocating the
    chunk then fails and the server raises ``RuntimeError("Prefill out of memory. Try to lower your batch size.")``
    (0.5.9 ``mem_cache/common.py::alloc_paged_token_slots_extend``; 0.4.10 ``schedule_batch.py`` line 1005).
    ``sglang_error`` is that message; ``request_id`` the request whose chunk did not fit."""

    def __init__(self, message: str, sglang_error: str, request_id: str, hint: str | None = None) -> None:
        super().__init__("server", f"{message}; the real SGLang server fails here with {sglang_error!r}", hint)
        self.sglang_error = sglang_error
        self.request_id = request_id
        self._text = Exception.__str__(self)
        # SimPy re-raises a process's exception as type(exc)(*exc.args): keep the constructor's arguments there
        self.args = (message, sglang_error, request_id, hint)

    def __str__(self) -> str:
        return self._text
