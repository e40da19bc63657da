"""A query's checkpoint directory: the offset log, the commit log and state snapshots (§9).

Layout under the directory::

    offsets/<k>.json   written before epoch k runs: what epoch k reads (per input and partition
                       the offset range), the arrival floor, and whether it stops the query
    commits/<k>        written once epoch k's output was delivered: the output items through it
    state/<k>/         the state after epoch k: ``state.json`` (numbers, the structure), one
                       Parquet directory per DataFrame of state (held events, pending output) and
                       ``manifest.json``, written last: every Parquet file with its size and
                       SHA-256
    shape.json         the query the checkpoint belongs to (engine.streaming), written at its
                       first start and checked at every restart
    lock               held (``flock``) by the process that runs the query, named in it

Every file (but ``lock``, which holds nothing to keep) is written to a temporary name and renamed,
so a crash leaves either the old or the new version, never half of one. A restarted query loads the
newest complete ``state/<k>`` and replays epochs ``k+1 ..`` exactly as their offset-log entries say,
so their output is the same; outputs skip the items they already hold
(:meth:`engine.contracts.OutputAdapter.progress`: a count of the query's output items); an output
that reports nothing skips the items the commit log records as delivered.

Damage is detected, never silently used (§9). Every file the engine writes here (and an output's
progress record, :mod:`adapters.files`) goes through :func:`write_checked`, which puts a header
with the body's SHA-256 and length in front of it; :func:`read_checked` verifies it. A snapshot is
used only when its manifest and ``state.json`` verify and its directory holds exactly the files the
manifest lists, each of the listed size and digest; otherwise the previous snapshot is restored,
with a warning naming the damaged file, and its later epochs replayed from the offset log. An
offset-log entry that a restart reads (those it replays, and the last one, which says whether the
query stopped) and that is missing or damaged, or no intact snapshot at all, is a
:class:`engine.errors.CheckpointDamageError` naming the file and the fix. A damaged commit marker
is ignored with a warning (the output's own progress then decides what it still lacks).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import shutil
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctistream.engine.errors import CheckpointDamageError, EngineError, QueryBuildError
from ctistream.engine.rows import checkpoint
from pyspark.sql import DataFrame, SparkSession

__all__ = ["CheckpointDir", "DamagedFile", "read_checked", "warn_damage", "write_checked"]

log = logging.getLogger("ctistream.checkpoint")

_KEEP = 2  # state snapshots kept: the newest, and the one restored when the newest is damaged
_HEADER = b"#ctistream sha256="  # + 64 hex digits, " bytes=", the body's length, "\n"
_MANIFEST = "manifest.json"
_STATE = "state.json"
_SHAPE = "shape.json"  # the query's shape (engine.streaming), written at its first start
_LOCK = "lock"  # held (flock) by the process running the query
_UNLOCKED = (
    "query {query!r}: the checkpoint {path!r} cannot be locked ({why}), so nothing stops a "
    "second run from starting on it while this one runs: both would deliver every item. Fix: "
    "put the checkpoint on a local file system, or make sure one run at a time uses it"
)
#: the file that records the epoch of the newest state snapshot written (:meth:`save_state`)
_NEWEST = "newest-state"

_FIX_NEW = (
    "or start the query with a new checkpoint directory (it reads its inputs from their start; "
    "its outputs then need to start empty too)"
)


class DamagedFile(ValueError):
    """A checked file is not what :func:`write_checked` wrote: ``problem`` says how."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{str(path)!r} {problem}")


def write_checked(path: Path | str, body: bytes | str) -> None:
    """Write ``body`` to ``path`` behind a header with its SHA-256 and length (driver): to a
    temporary name, fsync, rename, fsync of the directory, so a crash leaves the old file or the
    new one. Read it back with :func:`read_checked`."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    head = _HEADER + f"{hashlib.sha256(data).hexdigest()} bytes={len(data)}\n".encode()
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(head + data)
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(path)
    _fsync_dir(path.parent)


def read_checked(path: Path | str) -> bytes:
    """The body :func:`write_checked` wrote to ``path``. Raises FileNotFoundError when the file
    is missing and :class:`DamagedFile` when its header is gone or its body was cut short,
    lengthened or changed."""
    with open(path, "rb") as f:
        data = f.read()
    head, newline, body = data.partition(b"\n")
    fields = head[len(_HEADER) :].split(b" bytes=")
    if not (newline and head.startswith(_HEADER) and len(fields) == 2 and fields[1].isdigit()):
        raise DamagedFile(path, f"has no checksum header (it holds {len(data)} bytes)")
    digest, length = fields[0].decode("ascii", "replace"), int(fields[1])
    if len(body) != length:
        raise DamagedFile(path, f"holds {len(body)} bytes where its header says {length}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise DamagedFile(path, "does not match its SHA-256")
    return body


def warn_damage(message: str) -> None:
    """Say that a damaged checkpoint file was set aside: a :class:`RuntimeWarning` and a WARNING
    on the ``ctistream.checkpoint`` logger."""
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class CheckpointDir:
    """One query's checkpoint directory (driver)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        for sub in ("offsets", "commits", "state"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        self._lock: Any = None

    # -- one running query at a time ----------------------------------------------------------
    def lock(self, query: str) -> None:
        """Take the checkpoint for ``query``, run by this process, until :meth:`unlock` or the
        process ends (an exclusive ``flock`` on its ``lock`` file, which the system releases
        when the process dies, however it dies). Raises :class:`EngineError` when another run
        holds it: two runs on one checkpoint would both write its logs and both deliver."""
        try:
            import fcntl
        except ImportError:  # not a POSIX system: nothing to lock with
            warn_damage(_UNLOCKED.format(query=query, path=str(self.path), why="no flock here"))
            return
        f = open(self.path / _LOCK, "a+")  # noqa: SIM115 - held open while the query runs
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise EngineError(
                f"query {query!r}: the checkpoint {str(self.path)!r} is in use by a running "
                f"query ({holder}); expected a checkpoint no running query holds (two runs on "
                "one checkpoint would each deliver every item). Fix: stop the running query "
                "first (its process releases the checkpoint when it stops or ends), or give "
                "this one its own checkpoint directory and output"
            ) from None
        except OSError as e:  # a file system without locks (NFS without lockd, some FUSE)
            f.close()
            warn_damage(_UNLOCKED.format(query=query, path=str(self.path), why=e.strerror))
            return
        f.truncate(0)
        f.write(f"query {query!r} in process {os.getpid()}\n")
        f.flush()
        self._lock = f

    def unlock(self) -> None:
        """Release what :meth:`lock` took (nothing if it took nothing)."""
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    # -- the query's shape --------------------------------------------------------------------
    def shape(self) -> list[str] | None:
        """The shape recorded by :meth:`write_shape`, or None when none is. Raises
        :class:`CheckpointDamageError` when its file is damaged."""
        path = self.path / _SHAPE
        try:
            return json.loads(read_checked(path))
        except FileNotFoundError:
            return None
        except DamagedFile as e:
            raise CheckpointDamageError(
                f"checkpoint {str(self.path)!r}: {e}; it records the query the checkpoint "
                "belongs to, and a restart checks against it. Fix: if the query is the one that "
                f"wrote the checkpoint, delete {str(path)!r} (the next start records it again), "
                f"{_FIX_NEW}"
            ) from None

    def write_shape(self, shape: list[str]) -> None:
        write_checked(self.path / _SHAPE, json.dumps(shape))

    # -- offset and commit logs ---------------------------------------------------------------
    def write_offsets(self, epoch: int, entry: dict[str, Any]) -> None:
        write_checked(self._offsets(epoch), json.dumps(entry, sort_keys=True))

    def replay(self, first: int) -> list[tuple[int, dict[str, Any]]]:
        """The offset-log entries of epochs ``first`` .. the last logged or committed one, in
        order: what a restart replays after a snapshot taken before epoch ``first``. Raises
        :class:`CheckpointDamageError` when one of them is missing or damaged."""
        last = max(
            [*_epochs(self.path / "offsets", ".json"), *_epochs(self.path / "commits", "")],
            default=first - 1,
        )
        why = (
            f"A restart replays epochs {first}..{last} from the offset log (what each epoch "
            "read) and needs each entry as it was written"
        )
        return [(k, self.entry(k, why)) for k in range(first, last + 1)]

    def entry(self, epoch: int, why: str) -> dict[str, Any]:
        """The offset-log entry of ``epoch``. Raises :class:`CheckpointDamageError` naming it,
        ``why`` the restart needs it and the fix when it is missing or damaged."""
        path = self._offsets(epoch)
        try:
            return json.loads(read_checked(path))
        except (FileNotFoundError, DamagedFile) as e:
            problem = "is missing" if isinstance(e, FileNotFoundError) else e.problem
            raise CheckpointDamageError(
                f"checkpoint {str(self.path)!r}: the offset-log entry {str(path)!r} of epoch "
                f"{epoch} {problem}. {why}. Fix: restore the file from a backup, {_FIX_NEW}"
            ) from None

    def commit(self, epoch: int, items: int, ended: list[int]) -> None:
        """Record ``epoch`` as delivered, the query's output items through it being ``items``,
        and the inputs at CTI +inf after it (``ended``: their binding indices)."""
        body = {"items": items, "ended": ended}
        write_checked(self.path / "commits" / str(epoch), json.dumps(body))

    def ended(self, epoch: int) -> list[int]:
        """The inputs the commit marker of ``epoch`` records at CTI +inf after it (none when the
        marker is missing or damaged, or an older version wrote it)."""
        try:
            marker = json.loads(read_checked(self.path / "commits" / str(epoch)))
            return list(marker.get("ended", []))
        except (FileNotFoundError, DamagedFile, ValueError, AttributeError):
            return []

    def committed(self) -> tuple[int, int] | None:
        """The last epoch whose commit marker verifies and the output items through it, or None.
        A damaged marker is ignored with a warning."""
        for k in sorted(_epochs(self.path / "commits", ""), reverse=True):
            path = self.path / "commits" / str(k)
            try:
                body = read_checked(path)
                try:
                    items = json.loads(body)["items"]
                    if not isinstance(items, int) or isinstance(items, bool) or items < 0:
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    raise DamagedFile(path, 'does not hold {"items": <count>}') from None
            except DamagedFile as e:
                warn_damage(
                    f"checkpoint {str(self.path)!r}: the commit marker {e.path!r} {e.problem}; "
                    "it is ignored (the output's own progress decides what it still lacks)"
                )
                continue
            return k, items
        return None

    def commit_path(self, epoch: int) -> Path:
        return self.path / "commits" / str(epoch)

    # -- state snapshots ----------------------------------------------------------------------
    def save_state(self, epoch: int, state: dict[str, Any]) -> None:
        """Write ``state`` (dataclasses, lists, dicts, Counters, numbers, strings, None and
        DataFrames) as the state after ``epoch``, its manifest last; drop older snapshots beyond
        the newest two."""
        final = self.path / "state" / str(epoch)
        tmp = self.path / "state" / f"{epoch}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        frames: list[DataFrame] = []

        def dump(value: Any) -> Any:
            if isinstance(value, DataFrame):
                frames.append(value)
                name = f"df{len(frames)}"
                value.write.parquet(str(tmp / name))
                return {"__df__": name}
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                fields = {f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
                kind = type(value)
                return {"__dc__": f"{kind.__module__}:{kind.__qualname__}", "fields": fields}
            if isinstance(value, Counter):
                return {"__counter__": {k: v for k, v in value.items()}}
            if isinstance(value, dict):
                return {"__dict__": [[dump(k), dump(v)] for k, v in value.items()]}
            if isinstance(value, list | tuple):
                return [dump(v) for v in value]
            if value is None or isinstance(value, bool | int | float | str):
                return value
            raise TypeError(f"cannot checkpoint a {type(value).__name__}: {value!r}")

        write_checked(tmp / _STATE, json.dumps(dump(state)))
        # Spark wrote the Parquet files: the manifest takes their sizes and digests on the driver
        write_checked(tmp / _MANIFEST, json.dumps(_listing(tmp)))
        _fsync_dir(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _fsync_dir(final.parent)
        # outside state/: a restart that finds no snapshot this new knows one was lost
        write_checked(self.path / _NEWEST, json.dumps({"epoch": epoch}))
        for old in self._snapshots()[:-_KEEP]:
            shutil.rmtree(self.path / "state" / str(old), ignore_errors=True)

    def states(self, spark: SparkSession) -> Iterator[tuple[int, dict[str, Any]]]:
        """The intact snapshots, newest first, as (epoch, state), each loaded when asked for. A
        damaged or incomplete one is passed over with a warning naming the damaged file, and so
        is the newest one written when it was deleted since (its record, :data:`_NEWEST`); when
        no snapshot is intact but one was written, raises :class:`CheckpointDamageError` (a
        query is not replayed from epoch 0 then: its sources may no longer hold that epoch)."""
        snaps = self._snapshots()
        damaged: list[str] = []
        passed: list[tuple[int, str]] = []  # damaged newer snapshots, said once one is intact
        lost = self._lost_snapshot(snaps)
        if lost is not None:
            problem = f"{str(self.path / 'state' / str(lost))!r} is missing"
            damaged.append(problem)
            passed.append((lost, problem))
        yielded = False
        for n, epoch in enumerate(reversed(snaps)):
            base = self.path / "state" / str(epoch)
            try:
                _verify(base)
                text = read_checked(base / _STATE)
            except (FileNotFoundError, DamagedFile) as e:
                problem = (
                    f"{e.filename!r} is missing"
                    if isinstance(e, FileNotFoundError)
                    else f"{e.path!r} {e.problem}"
                )
                damaged.append(problem)
                if n + 1 < len(snaps):
                    passed.append((epoch, problem))
                elif yielded:  # a newer one was passed over: say why not this
                    warn_damage(
                        f"checkpoint {str(self.path)!r}: the state snapshot of epoch {epoch}, "
                        f"the oldest kept, is damaged ({problem}); it cannot be restored"
                    )
                continue
            for newer, problem in passed:
                warn_damage(
                    f"checkpoint {str(self.path)!r}: the state snapshot of epoch {newer} is "
                    f"damaged ({problem}); restoring the snapshot of epoch {epoch} instead "
                    f"and replaying the epochs after it from the offset log"
                )
            passed.clear()
            yielded = True
            yield epoch, self._load(spark, epoch, base, json.loads(text))
        if damaged and not yielded:
            raise CheckpointDamageError(
                f"checkpoint {str(self.path)!r}: no state snapshot is intact: "
                f"{'; '.join(damaged)}. Expected a snapshot whose files match its manifest. "
                f"Fix: restore the snapshot's files from a backup, {_FIX_NEW}"
            )

    def latest_state(self, spark: SparkSession) -> tuple[int, dict[str, Any]] | None:
        """The newest intact snapshot (:meth:`states`), or None when there is none."""
        return next(self.states(spark), None)

    def _load(self, spark: SparkSession, epoch: int, base: Path, tree: Any) -> dict[str, Any]:
        def load(value: Any) -> Any:
            if isinstance(value, list):
                return [load(v) for v in value]
            if not isinstance(value, dict):
                return value
            if "__df__" in value:
                return checkpoint(spark.read.parquet(str(base / value["__df__"])))
            if "__counter__" in value:
                return Counter(value["__counter__"])
            if "__dict__" in value:
                return {load(k): load(v) for k, v in value["__dict__"]}
            module, name = value["__dc__"].split(":")
            kind: Any = importlib.import_module(module)
            for part in name.split("."):
                kind = getattr(kind, part)
            fields = value["fields"]
            expected = {f.name for f in dataclasses.fields(kind)}
            if set(fields) != expected:
                raise QueryBuildError(
                    f"checkpoint {self.path}: the state snapshot of epoch {epoch} holds a "
                    f"{name} with fields {sorted(fields)}, written by another version of the "
                    f"engine; this version's {name} has {sorted(expected)}. Expected a snapshot "
                    "this version wrote. Fix: restart the query with a new checkpoint directory "
                    "(it replays its inputs from their start), or resume it with the version "
                    "that wrote this one"
                )
            return kind(**{k: load(v) for k, v in fields.items()})

        return load(tree)

    def _lost_snapshot(self, snaps: list[int]) -> int | None:
        """The epoch of the newest snapshot written (its record, :data:`_NEWEST`) when none that
        new is in ``snaps``: deleted since. None when it is there, or nothing records one (a
        damaged record is passed over with a warning: the snapshots still verify)."""
        try:
            epoch = int(json.loads(read_checked(self.path / _NEWEST))["epoch"])
        except FileNotFoundError:
            return None
        except (DamagedFile, ValueError, KeyError, TypeError) as e:
            problem = e.problem if isinstance(e, DamagedFile) else "does not hold an epoch"
            warn_damage(
                f"checkpoint {str(self.path)!r}: the record of its newest state snapshot "
                f"{str(self.path / _NEWEST)!r} {problem}; it is ignored"
            )
            return None
        return None if any(e >= epoch for e in snaps) else epoch

    def _snapshots(self) -> list[int]:
        """The epochs of the snapshots written to the end (renamed into place), oldest first."""
        return sorted(_epochs(self.path / "state", ""))

    def _offsets(self, epoch: int) -> Path:
        return self.path / "offsets" / f"{epoch}.json"


def _epochs(directory: Path, suffix: str) -> list[int]:
    """The epochs named by the entries ``<k><suffix>`` of ``directory``."""
    names = (p.name for p in directory.iterdir())
    return [int(n[: len(n) - len(suffix)]) for n in names if _is_epoch(n, suffix)]


def _is_epoch(name: str, suffix: str) -> bool:
    return name.endswith(suffix) and name[: len(name) - len(suffix)].isdigit()


def _listing(base: Path) -> dict[str, list[Any]]:
    """Every file under ``base`` but the self-checked ones: relative path -> [size, SHA-256]."""
    out: dict[str, list[Any]] = {}
    for f in sorted(base.rglob("*")):
        rel = f.relative_to(base).as_posix()
        if f.is_file() and rel not in (_STATE, _MANIFEST):
            out[rel] = [f.stat().st_size, _digest(f)]
    return out


def _verify(base: Path) -> None:
    """Raise :class:`DamagedFile` (or FileNotFoundError) unless the snapshot in ``base`` holds
    exactly the files its manifest lists, each of the listed size and SHA-256."""
    manifest = json.loads(read_checked(base / _MANIFEST))
    present = {
        f.relative_to(base).as_posix()
        for f in base.rglob("*")
        if f.is_file() and f.relative_to(base).as_posix() not in (_STATE, _MANIFEST)
    }
    for rel, (size, digest) in manifest.items():
        path = base / rel
        if rel not in present:
            raise DamagedFile(path, "is missing (the snapshot's manifest lists it)")
        got = path.stat().st_size
        if got != size:
            raise DamagedFile(path, f"holds {got} bytes where the manifest says {size}")
        if _digest(path) != digest:
            raise DamagedFile(path, "does not match its SHA-256 in the manifest")
    extra = sorted(present - set(manifest))
    if extra:
        raise DamagedFile(base / extra[0], "is not in the snapshot's manifest")


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
