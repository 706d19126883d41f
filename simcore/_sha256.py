"""SHA-256 without OpenSSL (start-up): ``from simcore._sha256 import sha256``, the same digests as ``hashlib``'s.

``import hashlib`` imports ``_hashlib``, which loads OpenSSL's libcrypto: ≈ 13 M instructions of every process,
for the few short texts the simulate path hashes (a calibration profile's hash, the latency model's). CPython's
own SHA-256 module (``_sha256``; ``_sha2`` from 3.12), which ``hashlib`` itself falls back to where OpenSSL is
missing, gives the same digest; ``hashlib`` stays the fallback. Bulk hashing (the table files, only when their
digests are not memoized) keeps ``hashlib``: OpenSSL's SHA is the faster one on megabytes.
"""
from __future__ import annotations

from typing import Any, Callable

sha256: Callable[..., Any]
try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:  # pragma: no cover - other Pythons
    try:
        from _sha2 import sha256  # type: ignore[no-redef]  # CPython 3.12+
    except ImportError:
        from hashlib import sha256  # type: ignore[no-redef]
