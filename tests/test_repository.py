"""The checkout itself: no merge left half done.

Parallel branches land on main by merge; a conflict resolved by committing the file with git's markers in it
once put two contradicting versions of a docs section on main (docs/shadow.md, DP-rank router). This test reads
every tracked text file and fails on a line that starts with a conflict marker.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(rb"^(<{7} |>{7} |={7}$)", re.MULTILINE)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".json", ".cfg", ".txt", ".j2", ".sh", ".ini", ""}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / p.decode() for p in out.split(b"\0") if p]
    return [p for p in paths if p.is_file() and p.suffix in TEXT_SUFFIXES and p.stat().st_size < 5_000_000]


def test_marker_pattern_catches_a_conflict() -> None:
    conflicted = b"text\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> main\n"
    assert len(MARKER.findall(conflicted)) == 3
    assert not MARKER.findall(b"a setext heading\n================\n<<<<<<<< eight\n")


def test_no_tracked_file_holds_conflict_markers() -> None:
    files = tracked_text_files()
    assert len(files) > 100  # the listing worked
    newline = b"\n"
    bad = [f"{p.relative_to(ROOT)}:{p.read_bytes()[:m.start()].count(newline) + 1}"
           for p in files for m in MARKER.finditer(p.read_bytes())]
    assert not bad, f"merge-conflict markers committed: {bad}"
