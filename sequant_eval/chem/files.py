"""The files the chemistry front end writes for the user (integral files, amplitude and
DIIS scratch, checkpoints): how a failure of the operating system is reported.

A write that fails (disk full, a read-only folder, a file that vanished) is a
:class:`~sequant_eval.errors.StorageError` naming the file, the reason in words and the
way out; the command line exits with status 3 for it. Removing a scratch file never hides
the error that made the run stop: :func:`discard` ignores a failure of its own.
"""
from __future__ import annotations

import errno as errnos
import os
import re
from pathlib import Path

from ..errors import StorageError

__all__ = ["discard", "os_errno", "storage_error"]

_REASONS = {
    errnos.ENOSPC: "the disk is full (no space left on device)",
    errnos.EDQUOT: "the disk quota is exceeded",
    errnos.EROFS: "the folder is on a read-only file system",
    errnos.EACCES: "permission denied (the folder is read-only for this user)",
    errnos.EPERM: "operation not permitted",
    errnos.ENOENT: "no such file or folder",
}


def os_errno(err: BaseException) -> int | None:
    """The error number of ``err``: ``err.errno``, or the ``errno = N`` h5py writes into
    its messages (its OSErrors carry none)."""
    number = getattr(err, "errno", None)
    if isinstance(number, int):
        return number
    found = re.search(r"errno\s*=\s*(\d+)", str(err))
    return int(found.group(1)) if found else None


def storage_error(what: str, path: str | os.PathLike, err: BaseException) -> StorageError:
    """A :class:`StorageError` for a failed read or write of ``path`` (``what``: "integrals
    on disk", "checkpoint", ...), the reason in words."""
    number = os_errno(err)
    reason = _REASONS.get(number) if number is not None else None
    if reason is None:
        reason = getattr(err, "strerror", None) or str(err).splitlines()[0] or type(err).__name__
    folder = Path(path).parent if not Path(path).is_dir() else Path(path)
    return StorageError(f"{what}: cannot write {path}: {reason}; free space or choose a "
                        f"writable folder (`df -h {folder}`)", path, number)


def discard(path: str | os.PathLike) -> None:
    """Remove a scratch file if it is there; a failure to remove it (a read-only folder) is
    ignored, so it never replaces the error being raised."""
    try:
        Path(path).unlink(missing_ok=True)
    except OSError:
        pass
