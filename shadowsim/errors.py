"""Re-export of the one user-facing error type (defined in the pure core so simcore can raise it), and the check
that a file given as text is not binary (the first bytes hold no NUL: what `file` and git call binary)."""
from __future__ import annotations

from pathlib import Path

from simcore.errors import UserError

__all__ = ["UserError", "require_text_file"]


def require_text_file(path: str | Path, field: str, what: str = "a text file") -> None:
    """UserError naming ``field`` when ``path`` is a regular file whose first 8 KiB contain a NUL byte."""
    p = Path(path)
    try:
        if not p.is_file():
            return
        with p.open("rb") as fh:
            head = fh.read(8192)
    except OSError:
        return  # the reader reports it with its own message
    if b"\0" in head:
        raise UserError(field, f"{p} is a binary file", f"give {what}")
