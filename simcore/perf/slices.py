"""Error statistics per slice of a validation run: by GPU, precision, TP, EP (or any row attribute).

`slice_summary` groups `simcore.perf.validation.RowResult`s by one attribute of their rows and reports, per value,
the row count and the MAPE / median / P90 absolute percentage error of each metric (the same statistics as
`simcore.perf.validation.error_summary`). ``validation/slices.py`` prints them for a measurement file.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from simcore.perf.validation import RowResult, error_summary

# The slices docs/accuracy.md reports: one table per attribute of the deployment, and EP vs no EP.
DEFAULT_SLICES = ("gpu", "precision", "tp", "ep", "ep>1")
DERIVED: dict[str, Callable[[Any], Any]] = {"ep>1": lambda row: row.ep > 1}


def _value(row: Any, key: str) -> Any:
    if key in DERIVED:
        return DERIVED[key](row)
    if key == "precision":
        return row.precision or "-"
    return getattr(row, key)


def slice_summary(results: Iterable[RowResult], by: str,
                  key: Callable[[Any], Any] | None = None) -> list[dict[str, Any]]:
    """One entry per distinct value of ``by`` (ascending): ``{"slice", "value", "rows", "summary"}``.

    ``key`` replaces the attribute lookup (e.g. ``lambda row: row.ep > 1``)."""
    groups: dict[Any, list[RowResult]] = {}
    for r in results:
        v = key(r.row) if key is not None else _value(r.row, by)
        groups.setdefault(v, []).append(r)
    out = []
    for v in sorted(groups, key=lambda x: (str(type(x)), x)):
        out.append({"slice": by, "value": v, "rows": len(groups[v]), "summary": error_summary(groups[v])})
    return out


def all_slices(results: Sequence[RowResult], slices: Sequence[str] = DEFAULT_SLICES) -> list[dict[str, Any]]:
    """`slice_summary` for every attribute in ``slices``, concatenated, after one ``all`` entry."""
    out = [{"slice": "all", "value": "all", "rows": len(results), "summary": error_summary(list(results))}]
    for s in slices:
        out += slice_summary(results, s)
    return out
