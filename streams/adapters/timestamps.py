"""Wall-clock timestamps in logs -> Unix seconds (UTC), deterministically.

SGLang's logger prints ``%Y-%m-%d %H:%M:%S`` (+ ``.mmm`` with ``SGLANG_LOG_MS=1``) in the server's local time zone,
which the log does not state; we read it as UTC so a re-read gives the same numbers everywhere. Differences between
lines (what the simulator uses) are unaffected.
"""
from __future__ import annotations

import calendar
import re
from datetime import datetime

_DAY_CACHE: dict[tuple[int, int, int], float] = {}

_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$"
)


def day_epoch(year: int, month: int, day: int) -> float:
    """Midnight UTC of a calendar day, Unix seconds (cached: logs repeat the same few days)."""
    key = (year, month, day)
    v = _DAY_CACHE.get(key)
    if v is None:
        v = float(calendar.timegm((year, month, day, 0, 0, 0, 0, 0, 0)))
        if len(_DAY_CACHE) < 100_000:
            _DAY_CACHE[key] = v
    return v


def frac(digits: str | None) -> float:
    """'123' -> 0.123, '6805900' -> 0.68059 (any number of fraction digits)."""
    if not digits:
        return 0.0
    return int(digits) / (10 ** len(digits))


def parse_iso(text: str) -> float | None:
    """ISO-8601 / 'YYYY-mm-dd HH:MM:SS[.ffffff][Z|+hh:mm]' -> Unix seconds; naive times are read as UTC.
    Returns None when ``text`` is not such a timestamp (never raises)."""
    m = _ISO.match(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s, fr, tz = m.groups()
    if int(h) > 23 or int(mi) > 59 or int(s) > 60:
        return None
    key = (int(y), int(mo), int(d))
    if key not in _DAY_CACHE:
        try:
            datetime(*key)  # rejects month 13, Feb 30 and friends
        except ValueError:
            return None
    ts = day_epoch(*key) + int(h) * 3600 + int(mi) * 60 + int(s) + frac(fr)
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        hh, mm = int(tz[1:3]), int(tz[-2:])
        ts -= sign * (hh * 3600 + mm * 60)
    return ts
