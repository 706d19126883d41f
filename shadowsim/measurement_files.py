"""Writing measurement files (the CSVs `shadowsim validate` reads) reproducibly: the builders in validation/ render
their rows with :func:`render_csv` and either write them or, with ``--check``, verify that the committed file is
what the builder produces (:func:`write_or_check`)."""
from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


def render_csv(fields: Sequence[str], rows: Iterable[Mapping[str, object]]) -> str:
    """The CSV text of ``rows`` under the header ``fields`` (``\\n`` line ends; a field a row lacks is empty)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({f: row.get(f, "") for f in fields})
    return buf.getvalue()


def write_or_check(outputs: Sequence[tuple[Path, str]], *, check: bool, rebuild: str) -> int:
    """Write each ``(path, text)``; with ``check``, write nothing and return 1 (naming the file and ``rebuild``,
    the command that regenerates it) when a file is missing or differs, else 0."""
    if check:
        for path, text in outputs:
            if not path.exists() or path.read_text() != text:
                print(f"{path} is stale: rerun {rebuild}", file=sys.stderr)
                return 1
            print(f"{path} is up to date", file=sys.stderr)
        return 0
    for path, text in outputs:
        path.write_text(text)
    return 0
