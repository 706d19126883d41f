"""The prefix of an SGLang log line: timestamp and parallel ranks, wherever the line's text starts.

``[2025-01-07 20:16:02 TP0] `` (second resolution), ``[... 20:16:02.250 ...]`` (``SGLANG_LOG_MS=1``), rank tags in
any order (``DP5 TP5``, ``PP1``, ``EP3``, ``ATTN_CP0``, ``MOE_DP1``), the 0.3 era's time-only ``[14:39:48 TP0]``, the
0.1/0.2 eras' ``[gpu_id=0]`` / ``[gpu=0]``; and text *before* the bracket (docker-compose ``sglang  | ``, CRI
``2025-06-05T15:08:56.1Z stdout F ``, collector tags), whose leading ISO timestamp is used when SGLang's is missing.
The common case is handled without a regex: it runs once per log line.
"""
from __future__ import annotations

import re

from streams.adapters.base import ParseContext
from streams.adapters.timestamps import day_epoch, frac, parse_iso

# The SGLang bracket header, searched anywhere in the line (collectors and docker-compose put text in front).
# Groups: date (y, m, d), time (H, M, S), fraction, rank tags, or the 0.1/0.2 ``gpu_id=N`` form.
_HEADER = re.compile(
    r"\[(?:(\d{4})-(\d{2})-(\d{2}) )?(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\] ?"
    r"|\[gpu(?:_id)?=(\d+)\] ?"
)
# A leading ISO timestamp written by a collector (CRI: ``<ts> stdout F <line>``; kubectl --timestamps; Docker).
_LEAD_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
_RANK_FIELD = {"DP": "dp_rank", "TP": "tp_rank", "PP": "pp_rank", "EP": "ep_rank"}


_DATE_CACHE: dict[str, float | None] = {}


def _date_epoch(date: str) -> float | None:
    """'2025-01-07' -> midnight UTC (cached per distinct date string)."""
    v = _DATE_CACHE.get(date, -1.0)
    if v != -1.0:
        return v
    try:
        v = day_epoch(int(date[0:4]), int(date[5:7]), int(date[8:10]))
    except (ValueError, OverflowError):
        v = None
    if len(_DATE_CACHE) < 10_000:
        _DATE_CACHE[date] = v
    return v


_TAGS_CACHE: dict[str, dict[str, int]] = {}
_NO_RANKS: dict[str, int] = {}


def _ranks_of(tags: str) -> dict[str, int]:
    """' DP5 TP5' -> {'dp_rank': 5, 'tp_rank': 5}; cached (a log repeats a handful of tag sets). Read-only."""
    r = _TAGS_CACHE.get(tags)
    if r is None:
        r = {}
        _rank_tags(tags, r)
        if len(_TAGS_CACHE) < 10_000:
            _TAGS_CACHE[tags] = r
    return r


def _rank_tags(tags: str, ranks: dict[str, int]) -> None:
    for tag in tags.split():
        i = len(tag)
        # isdecimal, not isdigit: '²' is a digit that int() refuses (a hostile 'TP²' raised an internal error)
        while i > 0 and tag[i - 1].isdecimal():
            i -= 1
        f = _RANK_FIELD.get(tag[:i])
        if f is not None and i < len(tag):
            ranks[f] = int(tag[i:])


#: 'YYYY-mm-dd HH:MM' -> (midnight, H·3600 + M·60) of the minutes already read (a log has few), bounded
_MINUTE_CACHE: dict[str, tuple[float, int]] = {}


def _minute(stamp: str) -> tuple[float, int] | None:
    """'2025-01-07 20:16' -> (midnight UTC, seconds of the hours and minutes), or None when it does not read."""
    got = _MINUTE_CACHE.get(stamp)
    if got is not None:
        return got
    day = _date_epoch(stamp[0:10])
    try:
        hm = int(stamp[11:13]) * 3600 + int(stamp[14:16]) * 60
    except ValueError:
        return None
    if day is None:
        return None
    if len(_MINUTE_CACHE) < 10_000:
        _MINUTE_CACHE[stamp] = (day, hm)
    return day, hm


def _fast_header(line: str, ctx: ParseContext) -> tuple[str, dict[str, int]] | None:
    """The common case, ``[YYYY-mm-dd HH:MM:SS[.mmm][ TAGS]] msg`` at column 0, without a regex."""
    if len(line) < 22 or line[5] != "-" or line[11] != " " or line[14] != ":" or line[17] != ":":
        return None
    close = line.find("]", 20, 120)
    if close < 0:
        return None
    minute = _minute(line[1:17])
    if minute is None:
        return None
    day, hm = minute
    try:
        secs = float(hm + int(line[18:20]))
    except ValueError:
        return None
    rest = line[20:close]
    ranks = _NO_RANKS
    if rest:
        if rest[0] in ".,":
            if rest[1:4].isdecimal() and not rest[4:5].isdecimal():  # milliseconds, the common case
                end = 4
            else:
                end = 1
                while end < len(rest) and rest[end].isdecimal():
                    end += 1
                if end == 1:
                    return None
            secs += frac(rest[1:end])
            rest = rest[end:]
        if rest:
            if rest[0] != " ":
                return None
            ranks = _TAGS_CACHE.get(rest) or _ranks_of(rest)
    ctx.day_epoch = day
    ctx.last_ts = day + secs
    start = close + 2 if line[close + 1:close + 2] == " " else close + 1
    return line[start:], ranks


def split_header(line: str, ctx: ParseContext) -> tuple[str, dict[str, int]]:
    """Find the SGLang header, update ``ctx.last_ts``/``ctx.day_epoch``, return (message, rank fields).
    The rank dict may be shared between calls: treat it as read-only.

    Lines without a header keep the whole text as message and inherit the last timestamp. A collector that
    writes its own bracketed time in front of SGLang's (``[2025-01-07 20:16:03] [2025-01-07 20:16:02 TP0] msg``)
    gives two headers: the second one is SGLang's, and its time and ranks win.
    """
    msg, ranks = _split_one(line, ctx)
    if msg[:1] == "[" and msg[1:2].isdigit():
        inner = _fast_header(msg, ctx) or _bracket_at_start(msg, ctx)
        if inner is not None:
            return inner
    return msg, ranks


def _bracket_at_start(msg: str, ctx: ParseContext) -> tuple[str, dict[str, int]] | None:
    """A second header that starts the message (the slow path of ``_fast_header``: time-only, gpu_id forms)."""
    m = _HEADER.match(msg)
    return _split_one(msg, ctx) if m is not None else None


def _split_one(line: str, ctx: ParseContext) -> tuple[str, dict[str, int]]:
    if line[:1] == "[" and line[1:2].isdigit():
        fast = _fast_header(line, ctx)
        if fast is not None:
            return fast
    m = _HEADER.search(line)
    ranks: dict[str, int] = {}
    if m is None:
        if line[:1].isdigit():
            lead = _LEAD_ISO.match(line)
            if lead is not None:
                ts = parse_iso(lead.group(1))
                if ts is not None:
                    ctx.last_ts = ts
        return line, ranks
    y, mo, d, hh, mi, ss, fr, tags, gpu = m.groups()
    if gpu is not None:
        ranks["tp_rank"] = int(gpu)
    else:
        secs = int(hh) * 3600 + int(mi) * 60 + int(ss) + frac(fr)
        if y is not None:
            ctx.day_epoch = _date_epoch(f"{y}-{mo}-{d}")
            ctx.last_ts = (ctx.day_epoch or 0.0) + secs
        else:
            # time-only era: attach to the last known day; roll over midnight when the clock goes backwards
            day = ctx.day_epoch if ctx.day_epoch is not None else 0.0
            ts = day + secs
            if ctx.last_ts is not None and ts < ctx.last_ts - 43200.0:
                day += 86400.0
                ctx.day_epoch = day
                ts = day + secs
            ctx.last_ts = ts
        if tags:
            _rank_tags(tags, ranks)
    if m.start() > 0 and ctx.last_ts is None and line[:1].isdigit():
        lead = _LEAD_ISO.match(line)
        if lead is not None:
            ts = parse_iso(lead.group(1))
            if ts is not None:
                ctx.last_ts = ts
    return line[m.end():], ranks
