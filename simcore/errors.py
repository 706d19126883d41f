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
