"""What the package remembers between runs: its parsed equation files, equation transforms
and fitted schedules (with their kernel plans).

Deriving a method's equations (exchange folding, the search for common factors) and fitting
their schedule to a budget cost more than a small molecule's whole CC run, and give the same
answer every time for the same equations, extents and budget (so does parsing the packaged
equation files, 12 ms of a cold H2O run). ``remembered(kind, key, make)`` returns ``make()``'s
value, made once per key:

- in this process, a small store per kind (least recently used out, ``ENTRIES`` kept);
- across processes, when a cache folder is set (``SEQUANT_EVAL_CACHE=DIR`` or
  ``set_folder(DIR)``): one file per key, named after a hash of the key.

A key is a tuple of plain values (text, numbers, tuples of them) holding everything the
value depends on — the equations as text, extents, the policy, the budget. A file is used
only when its header matches: the file format, the package's code (a hash of its source and
data files' paths, sizes and modification times, so an upgraded or edited package never
reads an older one's plans), the whole key (not only its hash), and a checksum of the stored
value; anything else — another key, a truncated or edited file, one that does not unpickle —
is made again and the file rewritten. A folder that cannot be written is left alone (the run
goes on; the value is made in memory). The folder holds pickles: point it only at a folder
you own.

A bottom helper: it imports only ``errors``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .errors import InputTypeError

__all__ = ["remembered", "set_folder", "folder", "clear", "reset", "stats", "ENTRIES", "FORMAT"]

T = TypeVar("T")

#: Values kept in memory per kind.
ENTRIES = 16
#: The layout of a cache file (changes when the header does).
FORMAT = 1

_log = logging.getLogger("sequant_eval.memo")
_memory: dict[str, OrderedDict] = {}
_stats: dict[str, dict[str, int]] = {}
_folder: list[Path | None] = []          # set_folder's choice (empty: the environment's)
_code: list[str] = []


def set_folder(path: str | os.PathLike | None) -> None:
    """Keep remembered values in ``path`` across processes (``None``: in memory only,
    whatever ``SEQUANT_EVAL_CACHE`` says)."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"the cache folder must be a path or None, got "
                             f"{type(path).__name__} {path!r}")
    _folder[:] = [Path(path) if path is not None else None]


def folder() -> Path | None:
    """The cache folder in force (``set_folder``, else ``SEQUANT_EVAL_CACHE``), or None."""
    if _folder:
        return _folder[0]
    env = os.environ.get("SEQUANT_EVAL_CACHE")
    return Path(env) if env else None


def clear() -> None:
    """Forget what this process remembers (files in a cache folder stay) and the counts."""
    _memory.clear()
    _stats.clear()


def reset() -> None:
    """``clear()``, and the cache folder back to the environment's (``SEQUANT_EVAL_CACHE``)."""
    clear()
    _folder.clear()


def stats(kind: str) -> dict[str, int]:
    """How often ``kind`` was ``made``, found in ``memory`` and read from ``disk``, and how
    many of its files were ``rejected`` (another key, a bad checksum, unreadable)."""
    return dict(_stats.get(kind, {"made": 0, "memory": 0, "disk": 0, "rejected": 0}))


def remembered(kind: str, key: tuple, make: Callable[[], T]) -> T:
    """``make()`` for ``key``, made once (see the module docstring)."""
    text = repr((kind, key))
    count = _stats.setdefault(kind, {"made": 0, "memory": 0, "disk": 0, "rejected": 0})
    store = _memory.setdefault(kind, OrderedDict())
    if text in store:
        store.move_to_end(text)
        count["memory"] += 1
        return store[text]
    where = folder()
    path = where / f"{kind}-{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}" \
        ".pickle" if where is not None else None
    value = _read(path, text, count) if path is not None else _MISSING
    if value is _MISSING:
        value = make()
        count["made"] += 1
        if path is not None:
            _write(path, text, value)
    else:
        count["disk"] += 1
    store[text] = value
    while len(store) > ENTRIES:
        store.popitem(last=False)
    return value


_MISSING: Any = object()


def _code_hash() -> str:
    """A hash of the package's source and data files — each one's path, size and
    modification time, what Python's own bytecode cache trusts — made once per process
    (reading and hashing every file instead took 7-10 ms of a cold run)."""
    if not _code:
        h = hashlib.blake2b(digest_size=16)
        for path, st in sorted(_package_files(os.path.dirname(os.path.abspath(__file__)))):
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        _code.append(h.hexdigest())
    return _code[0]


def _package_files(folder: str, rel: str = ""):
    """``(relative path, stat)`` of every ``.py`` and ``.txt`` file under ``folder``."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                yield from _package_files(entry.path, f"{rel}{entry.name}/")
        elif entry.name.endswith((".py", ".txt")):
            yield f"{rel}{entry.name}", entry.stat()


def _read(path: Path, text: str, count: dict[str, int]):
    try:
        raw = path.read_bytes()
    except OSError:
        return _MISSING                                   # not there (or not readable)
    try:
        head = pickle.loads(raw)
        ok = (isinstance(head, dict) and head.get("format") == FORMAT
              and head.get("code") == _code_hash() and head.get("key") == text
              and hashlib.blake2b(head["value"], digest_size=32).hexdigest()
              == head.get("checksum"))
        if ok:
            return pickle.loads(head["value"])
    except Exception:                 # any damage reads as "not there": made again
        pass
    count["rejected"] += 1
    _log.info("cache file %s does not match its key or is damaged: made again", path)
    return _MISSING


def _write(path: Path, text: str, value: Any) -> None:
    try:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        head = {"format": FORMAT, "code": _code_hash(), "key": text, "value": blob,
                "checksum": hashlib.blake2b(blob, digest_size=32).hexdigest()}
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".partial-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(pickle.dumps(head, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except (OSError, pickle.PicklingError, AttributeError, TypeError) as err:
        _log.warning("cache folder %s not written (%s): the value stays in memory only",
                     path.parent, err)
