"""Per-rank twins of a data-parallel SGLang server (``--dp-size N``, with or without ``--enable-dp-attention``).

With ``dp_size`` > 1 SGLang runs one scheduler per DP rank, each with its own waiting queue, running batch and KV
pool; its log lines carry the rank (``[2025-07-02 11:36:23 DP5 TP5] Decode batch. ...``). A shadow of such a
server keeps one twin per rank: `RankRouter.twin_id` maps each event to ``<instance>#dp<rank>``:

- events that name their rank (batch lines, retractions, metrics, KV events) go to that rank's twin;
- request events (request logs, traces) name no rank: they are dispatched like SGLang's
  ``DataParallelController`` (``managers/data_parallel_controller.py``) with its default ``round_robin``
  (``load_balance_method`` ``auto`` resolves to ``round_robin`` outside PD prefill,
  ``arg_groups/serving_hook.py:handle_load_balance_method``): the k-th arriving request of an instance goes to
  rank k mod dp_size, and its later events (first token, finish) follow it;
- an instance without DP ranks keeps its single twin under its own id.

The DP size of an instance is its configured ``settings.dp_size`` or the ``dp_size`` of a ``server_config``
event; before either is known, request events stay on the instance's own twin.

A request's entry leaves the table with its finish, or (``expire``) when its rank twin forgets it unjoined: by the
twins' own rule, once its arrival is more than ``max_wait_s + pending_expiry_margin_s`` behind that twin's watermark
(event time), so a request whose finish never arrives does not keep its entry for ever.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
import math
from typing import Any, Callable

RANK_SEP = "#dp"
#: at most this many instance ids in the configured-DP-size cache (cleared beyond: it is only a cache)
MAX_CONFIGURED_CACHE = 10_000
_MISSING = object()
#: version of ``RankRouter.snapshot()``'s form, stored in checkpoints (``restore`` refuses any other)
ROUTER_STATE_VERSION = 2
#: the form before entries carried their arrival time (``restore`` still reads it)
_UNTIMED_STATE_VERSION = 1


_FIELDS: dict[type, tuple[bool, bool] | None] = {}


def _fields_of(ev: Any) -> tuple[bool, bool] | None:
    """(has dp_rank, has request_id) of ``ev``'s class, cached per class; None when it is not a pydantic model. A
    pydantic model raises through its own ``__getattr__`` for a field it does not have, which cost more than the rest
    of the routing; asking the class once avoids that."""
    cls = ev.__class__
    got = _FIELDS.get(cls, False)
    if got is False:
        names = getattr(cls, "model_fields", None)
        got = None if names is None else ("dp_rank" in names, "request_id" in names)
        _FIELDS[cls] = got
    return got


#: event classes whose events ``RankRouter.twin_id`` routes by their own ``dp_rank`` alone (a pydantic model with
#: a ``dp_rank`` field, no ``request_id`` field, and not ``server_config``, which can teach a DP size): for such an
#: event with ``dp_rank`` None, ``twin_id`` is the instance id and changes nothing (the service's fast path)
_RANK_ONLY: dict[type, bool] = {}


def routes_by_rank_only(cls: type) -> bool:
    """Whether ``RankRouter.twin_id`` of an event of class ``cls`` is its ``instance_id`` when its ``dp_rank`` is
    None, and ``rank_twin_id(instance_id, dp_rank)`` otherwise, with no state read or changed (cached per class)."""
    got = _RANK_ONLY.get(cls)
    if got is None:
        names = getattr(cls, "model_fields", None)
        kind = names.get("kind") if isinstance(names, dict) else None
        got = _RANK_ONLY[cls] = (names is not None and "dp_rank" in names and "request_id" not in names
                                 and kind is not None and kind.default != "server_config")
    return got


def rank_twin_id(instance_id: str, dp_rank: int) -> str:
    return f"{instance_id}{RANK_SEP}{dp_rank}"


def base_instance_id(twin_id: str) -> str:
    """The SGLang instance a twin id belongs to (its own id for a single-scheduler instance)."""
    return twin_id.split(RANK_SEP, 1)[0]


@dataclass
class RankRouter:
    """Maps events to twin ids; ``configured_dp_size(instance_id)`` gives the DP size from the shadow config."""

    configured_dp_size: Callable[[str], int] = lambda _iid: 1
    _dp_size: dict[str, int] = field(default_factory=dict)
    _next_rank: dict[str, int] = field(default_factory=dict)
    _request_rank: dict[tuple[str, str], int] = field(default_factory=dict)
    #: rank twin id -> {request id: arrival ts} of its entries in ``_request_rank``, oldest insertion first: expiry
    #: scans from the front (an OrderedDict: popping its front is O(1), a dict's front fills with holes)
    _open: dict[str, OrderedDict[str, float]] = field(default_factory=dict)
    #: entries expired (``expire``) in this process: shadowsim_dp_routes_expired_total
    expired: int = 0

    _configured: dict[str, int] = field(default_factory=dict)  # configured_dp_size, asked once per instance
    #: what routing changed since ``commit``: (table, key, previous value or _MISSING), so that a record the service
    #: refuses or rolls back leaves the router as it was (a refused record of a new instance id adds nothing)
    _undo: list[tuple[dict[Any, Any], Any, Any]] = field(default_factory=list)

    def dp_size(self, instance_id: str) -> int:
        n = self._dp_size.get(instance_id)
        if n:
            return n
        n = self._configured.get(instance_id)
        if n is None:
            if len(self._configured) >= MAX_CONFIGURED_CACHE:  # a cache: ids of a flood must not fill it
                self._configured.clear()
            n = self._configured[instance_id] = self.configured_dp_size(instance_id)
        return n

    def _set(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        self._undo.append((table, key, table.get(key, _MISSING)))
        if value is _MISSING:
            del table[key]
        else:
            table[key] = value

    def commit(self) -> None:
        """Keep what routing changed since the last ``commit`` or ``roll_back`` (the record was applied)."""
        self._undo.clear()

    def roll_back(self) -> None:
        """Undo what routing changed since the last ``commit`` (the record was refused or failed)."""
        while self._undo:
            table, key, old = self._undo.pop()
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old

    def twin_id(self, ev: Any) -> str:
        iid = ev.instance_id
        fields = _fields_of(ev)  # which of dp_rank / request_id the event's class has (no missing-attribute lookups)
        if fields is None:
            kind, rank, rid = getattr(ev, "kind", None), getattr(ev, "dp_rank", None), getattr(ev, "request_id", None)
        else:
            kind = ev.kind
            rank = ev.dp_rank if fields[0] else None
            rid = ev.request_id if fields[1] else None
        if kind == "server_config" and getattr(ev, "dp_size", None):
            self._set(self._dp_size, iid, int(ev.dp_size))
        if rank is not None:
            return rank_twin_id(iid, int(rank))
        if rid is None:
            return iid  # an event of the whole instance (whatever its DP size)
        n = self.dp_size(iid)
        if n <= 1:
            return iid
        key = (iid, rid)
        if key not in self._request_rank:
            if kind != "request_arrived":
                return iid  # a request that arrived before the DP size was known stays on the instance twin
            k = self._next_rank.get(iid, 0)
            self._set(self._request_rank, key, k % n)
            self._set(self._next_rank, iid, k + 1)
            twin = rank_twin_id(iid, k % n)
            opened = self._open.get(twin)
            if opened is None:
                opened = OrderedDict()
                self._set(self._open, twin, opened)
            self._set(opened, rid, float(ev.ts))
            return twin
        twin = rank_twin_id(iid, self._request_rank[key])
        if kind == "request_finished":
            self._set(self._request_rank, key, _MISSING)
            opened = self._open.get(twin)
            if opened is not None and rid in opened:
                self._set(opened, rid, _MISSING)
        return twin

    def expire(self, twin_id: str, horizon: float) -> int:
        """Forget the entries of ``twin_id``'s requests that arrived before ``horizon`` (event time): the service
        calls it after each applied record with ``TimeConfig.expiry_before(watermark)`` (``watermark − (max_wait_s +
        pending_expiry_margin_s)``), the horizon beyond which the twin itself forgets a request unjoined
        (``InstanceTwin._gc``). Scans from the
        oldest entry and stops at the first younger one, so it costs O(1) amortised per event; an entry inserted
        after a younger one (arrivals out of order) waits for it. Not undone by ``roll_back`` (call it once the
        record is kept). A finish that arrives later is routed like that of an unknown request. Returns how many
        entries it forgot (counted in ``expired``)."""
        opened = self._open.get(twin_id)
        if not opened:
            return 0
        n = 0
        iid = twin_id.rsplit(RANK_SEP, 1)[0]
        table = self._request_rank
        while opened:
            rid, ts = next(iter(opened.items()))
            if not ts < horizon:
                break
            opened.popitem(last=False)
            table.pop((iid, rid), None)
            n += 1
        self.expired += n
        return n

    def snapshot(self, instances: Iterable[str] | None = None) -> dict[str, Any]:
        """The routing state (``ROUTER_STATE_VERSION``) of ``instances`` (SGLang instance ids; None: all): DP sizes
        learnt from ``server_config`` events, the next rank of the round robin, and the rank of every request in
        flight with its arrival time (``[instance, request, rank, arrival_ts]``, each rank's requests in the order
        ``expire`` scans them; an expired entry is not in it). The service stores it in each partition's checkpoint
        with the instances of that partition."""
        sel = None if instances is None else set(instances)
        entries = []
        for twin in sorted(self._open):
            iid, rank_text = twin.rsplit(RANK_SEP, 1)
            if sel is None or iid in sel:
                rank = int(rank_text)
                entries += [[iid, r, rank, ts] for r, ts in self._open[twin].items()]
        return {"version": ROUTER_STATE_VERSION,
                "dp_size": {k: v for k, v in sorted(self._dp_size.items()) if sel is None or k in sel},
                "next_rank": {k: v for k, v in sorted(self._next_rank.items()) if sel is None or k in sel},
                "request_rank": entries}

    def restore(self, data: dict[str, Any], *, merge: bool = False,
                untimed_arrival: Callable[[str], float] | None = None) -> None:
        """Install ``snapshot()`` output: replace the whole state, or (``merge``) add the instances it holds to the
        state of others (a newly assigned partition). Raises ``ValueError`` on a state of another version or of the
        wrong structure, leaving the router unchanged. The entries of a version-1 state carry no arrival time: they
        get ``untimed_arrival(rank twin id)`` (the service gives the restored twin's watermark, so they expire at
        most ``max_wait_s + pending_expiry_margin_s`` after the restore), else the newest time they can have."""
        version = data.get("version", _UNTIMED_STATE_VERSION)  # the first form (tests only) had no version
        if version not in (ROUTER_STATE_VERSION, _UNTIMED_STATE_VERSION):
            raise ValueError(f"router state version {version!r}, expected {ROUTER_STATE_VERSION}")
        width = 4 if version == ROUTER_STATE_VERSION else 3

        def count(v: Any, what: str) -> int:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"router state: {what} is {v!r}, not a count")
            return v

        dp_size = {str(k): count(v, f"dp_size[{k!r}]") for k, v in dict(data.get("dp_size", {})).items()}
        next_rank = {str(k): count(v, f"next_rank[{k!r}]") for k, v in dict(data.get("next_rank", {})).items()}
        request_rank: dict[tuple[str, str], int] = {}
        opened: dict[str, OrderedDict[str, float]] = {}
        for entry in data.get("request_rank", []):
            if not isinstance(entry, (list, tuple)) or len(entry) != width:
                form = "[instance, request, rank, arrival_ts]" if width == 4 else "[instance, request, rank]"
                raise ValueError(f"router state: request_rank entry {entry!r} is not {form}")
            i, r, k = str(entry[0]), str(entry[1]), count(entry[2], f"the rank of request {entry[1]!r}")
            twin = rank_twin_id(i, k)
            if width == 4:
                ts = entry[3]
                if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
                    raise ValueError(f"router state: the arrival time of request {r!r} is {ts!r}, not a time")
            else:
                ts = untimed_arrival(twin) if untimed_arrival is not None else math.inf
            request_rank[(i, r)] = k
            opened.setdefault(twin, OrderedDict())[r] = float(ts)
        if not merge:
            self._dp_size, self._next_rank, self._request_rank, self._open = {}, {}, {}, {}
        self._dp_size.update(dp_size)
        self._next_rank.update(next_rank)
        self._request_rank.update(request_rank)
        for twin, entries in opened.items():
            self._open.setdefault(twin, OrderedDict()).update(entries)
        self._undo.clear()

    def forget(self, instances: Iterable[str]) -> None:
        """Drop the routing state of ``instances`` (their partition moved to another process)."""
        gone = set(instances)
        for table in (self._dp_size, self._next_rank):
            for k in [k for k in table if k in gone]:
                del table[k]
        for key in [key for key in self._request_rank if key[0] in gone]:
            del self._request_rank[key]
        for twin in [twin for twin in self._open if twin.rsplit(RANK_SEP, 1)[0] in gone]:
            del self._open[twin]
