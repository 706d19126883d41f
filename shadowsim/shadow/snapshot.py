"""Crash-safe, incremental snapshots: per input partition, a manifest per checkpoint and one file per twin state.

A checkpoint of a partition holds the domain state of every twin whose events live on that partition, plus the
partition's *next* offset (the first record it does not reflect). Partitions are the unit of ownership in a
consumer group, so on a rebalance the new owner loads exactly the checkpoints of each partition it receives.

Layout (``<dir>/<topic>-<partition>/``)::

    manifest-000000000042.json   {"format": 2, "generation": 42, "next_offset": ..., "twins": {iid: file}, ...}
    twins-000000000042.json      {iid: state} of the twins that changed since generation 41

A checkpoint writes one file with the states of the twins that changed since the previous one (O(changed twins),
not O(all twins), and two fsyncs whatever their number), then the manifest, which names for every twin the file of
its latest state (older generations' files for twins that did not change). Every file is written ``<name>.tmp`` →
``fsync`` → ``rename`` → ``fsync`` the directory, mode 0600, so a crash leaves the previous manifest in force,
never a torn one. The last ``keep`` manifests are kept, with every twins file one of them names; older ones are
deleted.

Reading: ``candidates()`` yields the readable checkpoints newest first; a manifest or twin file that does not
parse, or lacks what a checkpoint must hold, is skipped with a log line naming the file (the service also falls
back when a twin's state does not restore). Only JSON is read back: nothing from disk is ever unpickled. The
format-1 single file ``<dir>/<topic>-<partition>.json`` of earlier versions is still read, as the oldest candidate.
"""
from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT = 2
LEGACY_FORMAT = 1
FILE_MODE = 0o600
log = logging.getLogger("shadowsim.shadow")
_MANIFEST = re.compile(r"manifest-(\d{12})\.json")
UNCHANGED = None  # a twin entry in ``save(state["twins"])``: keep the file of the previous checkpoint


class SnapshotError(RuntimeError):
    """A snapshot file exists but cannot be used (corrupt, wrong structure, or an incompatible version)."""


class SnapshotStore:
    """Checkpoints under ``directory``, keyed by (topic, partition); ``keep`` manifests per partition."""

    def __init__(self, directory: Path | str, keep: int = 3) -> None:
        self.dir = Path(directory)
        self.keep = max(1, keep)
        self._last: dict[tuple[str, int], dict[str, Any]] = {}  # the manifest in force, per partition
        self._gen: dict[tuple[str, int], int] = {}  # the newest generation number used, per partition

    # ---- paths ----------------------------------------------------------------------------------------------
    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.dir / f"{topic}-{partition}"

    def path(self, topic: str, partition: int) -> Path:
        """The format-1 single-file snapshot of earlier versions (read as a fallback, never written)."""
        return self.dir / f"{topic}-{partition}.json"

    def manifests(self, topic: str, partition: int) -> list[Path]:
        """Manifest files of the partition, newest first."""
        pdir = self.partition_dir(topic, partition)
        if not pdir.is_dir():
            return []
        found = [p for p in pdir.iterdir() if _MANIFEST.fullmatch(p.name)]
        return sorted(found, key=lambda p: p.name, reverse=True)

    # ---- writing --------------------------------------------------------------------------------------------
    def save(self, topic: str, partition: int, state: dict[str, Any]) -> Path:
        """Write a checkpoint of ``topic``/``partition``. ``state`` holds ``next_offset``, ``twins`` ({iid: twin
        state, or ``UNCHANGED`` to keep the previous checkpoint's file}) and any other JSON-able fields. Returns the
        manifest's path."""
        if "next_offset" not in state:
            raise ValueError("a snapshot must record the next offset to read")
        tp = (topic, partition)
        pdir = self.partition_dir(topic, partition)
        pdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        os.chmod(pdir, 0o700)
        prev = self._last.get(tp)
        if prev is None:
            prev = self._newest_manifest(topic, partition) or {}
        if tp not in self._gen:  # never reuse a generation number, even one of an unreadable manifest
            newest = self.manifests(topic, partition)
            self._gen[tp] = int(_MANIFEST.fullmatch(newest[0].name).group(1)) if newest else 0  # type: ignore[union-attr]
        gen = self._gen[tp] = max(self._gen[tp], int(prev.get("generation", 0))) + 1
        prev_files: dict[str, str] = prev.get("twins", {})
        files: dict[str, str] = {}
        changed: dict[str, Any] = {}
        name = f"twins-{gen:012d}.json"
        for iid, tstate in state.get("twins", {}).items():
            if tstate is UNCHANGED:
                if iid not in prev_files:
                    raise ValueError(f"twin {iid!r} marked unchanged but the previous checkpoint has no file for it")
                files[iid] = prev_files[iid]
                continue
            changed[iid] = tstate
            files[iid] = name
        if changed:
            _write_atomic(pdir / name, _dumps({"generation": gen, "twins": changed}), sync_dir=False)
        doc = {"format": FORMAT, "topic": topic, "partition": partition, "generation": gen,
               **{k: v for k, v in state.items() if k != "twins"}, "twins": files}
        path = pdir / f"manifest-{gen:012d}.json"
        _write_atomic(path, _dumps(doc), sync_dir=True)  # also makes the twin files' renames durable
        self._last[tp] = doc
        self._prune(pdir)
        return path

    def _prune(self, pdir: Path) -> None:
        manifests = sorted((p for p in pdir.iterdir() if _MANIFEST.fullmatch(p.name)), key=lambda p: p.name,
                           reverse=True)
        if len(manifests) <= self.keep:
            return
        kept, referenced = manifests[: self.keep], set()
        for m in kept:
            try:
                referenced.update(json.loads(m.read_bytes()).get("twins", {}).values())
            except (OSError, ValueError, AttributeError):
                return  # cannot tell what an unreadable kept manifest needs: delete nothing
        for m in manifests[self.keep:]:
            m.unlink(missing_ok=True)
        for p in pdir.iterdir():
            if p.name.startswith("twins-") and p.name.endswith(".json") and p.name not in referenced:
                p.unlink(missing_ok=True)
            elif p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)

    # ---- reading --------------------------------------------------------------------------------------------
    def candidates(self, topic: str, partition: int) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Readable checkpoints of the partition, newest first, as ``(manifest path, state)`` with ``state`` in
        the shape ``save`` took (``twins`` holding the twin states). Unreadable ones are logged and skipped."""
        for path in self.manifests(topic, partition):
            try:
                state = self._read_checkpoint(path)
            except SnapshotError as exc:
                log.warning("snapshot %s unusable, trying an older one: %s", path, exc)
                continue
            yield path, state
        legacy = self.path(topic, partition)
        if legacy.exists():
            try:
                yield legacy, _check_structure(legacy, _read_json(legacy), LEGACY_FORMAT)
            except SnapshotError as exc:
                log.warning("snapshot %s unusable: %s", legacy, exc)

    def use(self, topic: str, partition: int, path: Path) -> None:
        """Record that the service resumed from ``path``: the next checkpoint builds on that manifest."""
        if path.name.startswith("manifest-"):
            self._last[(topic, partition)] = _read_json(path)
        else:
            self._last.pop((topic, partition), None)

    def load(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The newest readable checkpoint of ``topic``/``partition``, or None when there is none."""
        for _, state in self.candidates(topic, partition):
            return state
        return None

    def load_twin(self, topic: str, partition: int, instance_id: str) -> dict[str, Any] | None:
        """The state of one twin in the checkpoint in force (the last one written or resumed from), or None."""
        doc = self._last.get((topic, partition))
        if doc is None:
            doc = self._newest_manifest(topic, partition)
        if doc is None or instance_id not in doc.get("twins", {}):
            return None
        path = self.partition_dir(topic, partition) / doc["twins"][instance_id]
        state = _read_twins(path).get(instance_id)
        return state if isinstance(state, dict) else None

    def partitions(self) -> list[tuple[str, int]]:
        """Partitions with a checkpoint (a manifest, or a format-1 file)."""
        out = set()
        if not self.dir.is_dir():
            return []
        for p in self.dir.iterdir():
            topic, _, part = (p.stem if p.suffix == ".json" else p.name).rpartition("-")
            if not (part.isdigit() and topic):
                continue
            if (p.is_dir() and self.manifests(topic, int(part))) or (p.is_file() and p.suffix == ".json"):
                out.add((topic, int(part)))
        return sorted(out)

    def _newest_manifest(self, topic: str, partition: int) -> dict[str, Any] | None:
        for path in self.manifests(topic, partition):
            try:
                return _read_json(path)
            except SnapshotError:
                continue
        return None

    def _read_checkpoint(self, path: Path) -> dict[str, Any]:
        doc = _check_structure(path, _read_json(path), FORMAT)
        twins = {}
        files: dict[str, dict[str, Any]] = {}
        for iid, name in doc["twins"].items():
            if not isinstance(name, str) or "/" in name:
                raise SnapshotError(f"twin entry {iid!r} is not a file name")
            if name not in files:
                files[name] = _read_twins(path.parent / name)
            if not isinstance(files[name].get(iid), dict):
                raise SnapshotError(f"{path.parent / name} holds no state of twin {iid!r}")
            twins[iid] = files[name][iid]
        return {**doc, "twins": twins}


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


def _write_atomic(path: Path, data: bytes, *, sync_dir: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # an older .tmp may have had another mode
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        _fsync_dir(path.parent)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(f"{path} is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SnapshotError(f"{path} does not hold a JSON object")
    return doc


def _check_structure(path: Path, doc: dict[str, Any], fmt: int) -> dict[str, Any]:
    if doc.get("format") != fmt:
        raise SnapshotError(f"{path} has format {doc.get('format')!r}, expected {fmt}")
    off = doc.get("next_offset")
    if not isinstance(off, int) or isinstance(off, bool) or off < 0:
        raise SnapshotError(f"{path}: next_offset is {off!r}, not an offset")
    if not isinstance(doc.get("twins", {}), dict):
        raise SnapshotError(f"{path}: twins is not an object")
    dead = doc.get("dead_letters", {})
    if not isinstance(dead, dict) or not all(isinstance(v, int) for v in dead.values()):
        raise SnapshotError(f"{path}: dead_letters is not an object of counts")
    return {**doc, "twins": doc.get("twins", {}), "dead_letters": dead}


def _read_twins(path: Path) -> dict[str, Any]:
    doc = _read_json(path)
    if not isinstance(doc.get("twins"), dict):
        raise SnapshotError(f"{path} is not a file of twin states")
    return doc["twins"]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # some filesystems do not allow opening directories; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
