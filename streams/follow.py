"""Follow a growing file across rotation, like ``tail -F``.

``FileFollower.read_available()`` returns the complete lines appended since the last call (without their line
ending) and never blocks; ``lines()`` loops over it with a sleep in between. Rotation is noticed by path, not by
the open file: when the file at ``path`` is a different file than the one open (new inode: ``mv log log.1`` and a
fresh ``log``), the rest of the old file is read first, then the new file from its start. When the file shrank
(``truncate``/``> log``), reading restarts at its beginning. A missing file is waited for.

A final line without a newline is held back until its newline arrives — a writer may be in the middle of it —
except when the file is rotated away, where it is returned as it is.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


class FileFollower:
    """Reads ``path`` from the start (or from its end with ``from_end=True``) and follows it."""

    def __init__(self, path: str | os.PathLike[str], *, from_end: bool = False) -> None:
        self.path = Path(path)
        self._fh: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._partial = b""
        self._from_end = from_end
        self.rotations = 0
        self.truncations = 0

    def _open(self) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - kept open across calls
        except FileNotFoundError:
            return False
        st = os.fstat(fh.fileno())
        self._fh, self._ino = fh, (st.st_dev, st.st_ino)
        if self._from_end:
            fh.seek(0, os.SEEK_END)
            self._from_end = False  # only the first file: rotated files are read whole
        return True

    def _drain(self, final: bool) -> list[bytes]:
        assert self._fh is not None
        data = self._partial + self._fh.read()
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]

    def read_available(self) -> list[bytes]:
        """Complete lines appended since the last call, across a rotation or truncation if one happened."""
        if self._fh is None and not self._open():
            return []
        out: list[bytes] = []
        try:
            st = os.stat(self.path)
            current = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            current = None  # rotated away and not recreated yet: keep reading the old file
        assert self._fh is not None
        if current is not None and current != self._ino:
            out.extend(self._drain(final=True))  # the rest of the rotated file
            self._fh.close()
            self._fh = None
            self.rotations += 1
            if not self._open():
                return out
        elif current is not None and st.st_size < self._fh.tell():
            self._fh.seek(0)
            self._partial = b""
            self.truncations += 1
        out.extend(self._drain(final=False))
        return out

    def lines(self, *, poll_interval_s: float = 0.25, stop: Callable[[], bool] | None = None,
              idle_timeout_s: float | None = None, sleep: Callable[[float], None] = time.sleep) -> Iterator[bytes]:
        """Yield lines forever (until ``stop()`` is true, or ``idle_timeout_s`` passes without a new line)."""
        idle = 0.0
        while not (stop is not None and stop()):
            batch = self.read_available()
            if batch:
                idle = 0.0
                yield from batch
                continue
            if idle_timeout_s is not None and idle >= idle_timeout_s:
                return
            sleep(poll_interval_s)
            idle += poll_interval_s

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
