"""The scratch files of a run, who owns them, and cleaning up after a killed run.

A run writes scratch files beside its integral file (``OnDisk(DIR)``): the integral file
being written (``integrals-KEY.PID.TOKEN.partial``, renamed when complete), the doubles
amplitudes (``amplitudes-PID-TOKEN.h5``) and the DIIS vectors (``diis-PID-TOKEN.h5``);
a checkpoint is written through ``.NAME.PID.tmp`` beside it. Every name carries the
writer's process id. While a process has scratch files in a folder it holds a lock file
there, ``sequant-eval-PID.lock``, which says who it is: the process id, the host and the
process's start time (Linux: ``/proc/PID/stat``; a reused process id is then told apart).

The scratch files are removed on every exit of the code that made them (a ``finally``,
an error included; the command line turns SIGTERM into an ordinary exit). A run killed
outright (SIGKILL, a power cut) leaves them; the next run in the folder removes them
(:func:`clean` at the start of ``OnDisk.integrals``): a file is *stale* when its process
is gone — its lock names this host and a process id that is not running (or runs with
another start time), or it has no lock and its process id is not running here. Files of
a live run, or of a run on another host (a shared folder), are never touched.
``sequant-eval clean DIR`` does the same on demand and, with ``--all``, also removes the
integral files the package wrote.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .files import discard, storage_error

__all__ = ["Removed", "acquire", "release", "owned", "clean", "token", "scratch_header",
           "LOCK_PATTERN"]

LOCK_PATTERN = "sequant-eval-{pid}.lock"

#: (pattern, what it is). Group ``pid``: the writer's process id.
_SCRATCH = (
    (re.compile(r"^amplitudes-(?P<pid>\d+)-[0-9a-f]+\.h5$"), "amplitudes of a run"),
    (re.compile(r"^diis-(?P<pid>\d+)-[0-9a-f]+\.h5$"), "DIIS vectors of a run"),
    (re.compile(r"^integrals-[0-9a-f]{16}\.(?P<pid>\d+)(\.[0-9a-f]+)?\.partial$"),
     "an integral file being written"),
    (re.compile(r"^\..+\.(?P<pid>\d+)\.tmp$"), "a checkpoint being written"),
    (re.compile(r"^sequant-eval-(?P<pid>\d+)\.lock$"), "the lock of a run"),
)
_INTEGRALS = re.compile(r"^integrals-[0-9a-f]{16}\.h5$")

_held: dict[Path, int] = {}
_guard = threading.Lock()
_counter = [0]


def token() -> str:
    """A hex token unique within this process (scratch names: PID-TOKEN)."""
    with _guard:
        _counter[0] += 1
        return f"{_counter[0]:x}"


def scratch_header(h5, kind: str, made_from: str = "") -> None:
    """The header of a scratch file (amplitudes, DIIS vectors): the format, what it is,
    the integral file it belongs to (its name's key) and the process that owns it."""
    from .provenance import FORMAT

    h5.attrs["format"], h5.attrs["writer"], h5.attrs["kind"] = FORMAT, "sequant-eval", kind
    h5.attrs["made_from"], h5.attrs["pid"] = made_from, os.getpid()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), else None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()[19]


def _me() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid())}


def acquire(folder: str | os.PathLike) -> Path:
    """Hold this process's lock in ``folder`` (written on first use, counted after); a
    folder that cannot be written is a StorageError."""
    folder = Path(folder).resolve()
    path = folder / LOCK_PATTERN.format(pid=os.getpid())
    with _guard:
        if _held.get(folder, 0) == 0 or not path.exists():
            try:
                path.write_text(json.dumps(_me()) + "\n", encoding="utf-8")
            except OSError as err:
                raise storage_error("scratch files", path, err) from err
        _held[folder] = _held.get(folder, 0) + 1
    return path


def release(folder: str | os.PathLike) -> None:
    """Give back one hold of the lock; the last removes the lock file."""
    folder = Path(folder).resolve()
    with _guard:
        left = _held.get(folder, 0) - 1
        if left > 0:
            _held[folder] = left
            return
        _held.pop(folder, None)
    discard(folder / LOCK_PATTERN.format(pid=os.getpid()))


@contextmanager
def owned(folder: str | os.PathLike):
    """``with owned(folder):`` — :func:`acquire` and :func:`release` around a block."""
    lock = acquire(folder)
    try:
        yield lock
    finally:
        release(folder)


def _alive(pid: int, lock: Path) -> tuple[bool, str]:
    """Whether process ``pid`` (the owner of ``lock``, which may be missing) still runs:
    ``(alive, in words)``."""
    host, start = socket.gethostname(), None
    try:
        info = json.loads(lock.read_text(encoding="utf-8"))
        host, start = str(info.get("host", host)), info.get("start")
    except (OSError, ValueError, AttributeError):
        pass
    if host != socket.gethostname():
        return True, f"run {pid} on host {host} (not this one: left alone)"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False, f"run {pid} is gone"
    except PermissionError:
        pass                                          # it exists, another user's
    now = _start_time(pid)
    if start is not None and now is not None and now != str(start):
        return False, f"run {pid} is gone (its process id is another process's now)"
    return True, f"run {pid} is still running"


@dataclass(frozen=True)
class Removed:
    """A file :func:`clean` removed (or, ``kept``, left because its run is alive)."""

    path: Path
    size: int
    why: str
    kept: bool = False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _integral_file_state(path: Path) -> str | None:
    """Why an ``integrals-KEY.h5`` can never be reused (unreadable, incomplete, another
    format), or None when it is a complete file of this format."""
    from .provenance import FORMAT

    try:
        import h5py

        with h5py.File(path, "r") as h5:
            fmt, done = h5.attrs.get("format"), bool(h5.attrs.get("complete", False))
    except (OSError, ImportError) as err:
        return f"unreadable integral file ({str(err).splitlines()[0][:60]})"
    if fmt != FORMAT:
        return f"integral file of format {fmt} (this version reads {FORMAT}; never reused)"
    return None if done else "incomplete integral file"


def _judge(path: Path, everything: bool, scratch_only: bool) -> Removed | None:
    """What :func:`clean` does with one entry of the folder (None: not the package's, or
    nothing to do)."""
    name = path.name
    if _INTEGRALS.match(name):
        if scratch_only:
            return None
        why = _integral_file_state(path)
        if why is None and everything:
            why = "integral file (--all)"
        return None if why is None else Removed(path, _size(path), why)
    for pattern, what in _SCRATCH:
        found = pattern.match(name)
        if found:
            pid = int(found.group("pid"))
            alive, words = _alive(pid, path.parent / LOCK_PATTERN.format(pid=pid))
            return Removed(path, _size(path), f"{what}: {words}", kept=alive)
    return None


def clean(folder: str | os.PathLike, everything: bool = False, dry_run: bool = False,
          scratch_only: bool = False, strict: bool = True) -> list[Removed]:
    """Remove from ``folder`` the scratch files of runs that are gone and the integral
    files that can never be reused (unreadable, incomplete, of an older format) — with
    ``everything`` every integral file too, with ``scratch_only`` no integral file — and
    return what was removed and what was kept (``kept``: a live run's). Locks go last.
    A file that cannot be removed is a StorageError (``strict``; else it is skipped and
    left out of the list, as the start of a run does: cleaning never stops a run)."""
    folder = Path(folder)
    try:
        entries = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError as err:
        if strict:
            raise storage_error("clean", folder, err) from err
        return []
    found = [r for r in (_judge(p, everything, scratch_only) for p in entries)
             if r is not None]
    found.sort(key=lambda r: r.path.name.endswith(".lock"))
    done = []
    for item in found:
        if not item.kept and not dry_run:
            try:
                item.path.unlink(missing_ok=True)
            except OSError as err:
                if strict:
                    raise storage_error("clean", item.path, err) from err
                continue
        done.append(item)
    return done
