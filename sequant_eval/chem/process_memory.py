"""The process's resident memory, as the kernel counts it (Linux ``/proc/self/status``).

``RSSWatch.start()`` takes the current resident set (``VmRSS``) as the baseline and resets
the kernel's high-water mark (``VmHWM``, by writing ``5`` to ``/proc/self/clear_refs``);
``growth()`` is then the peak resident set since the start minus the baseline: what the
work since the start added to the process at its worst moment, page-cache reads of files
excluded (they are not resident in the process). Elsewhere (no ``/proc``, or the reset
refused) the values are ``None``.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RSSWatch", "rss_bytes", "peak_rss_bytes", "map_large_allocations",
           "release_free_memory"]


def _status(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """The resident set now (``VmRSS``), bytes."""
    return _status("VmRSS")


def peak_rss_bytes() -> int | None:
    """The resident set's high-water mark (``VmHWM``), bytes."""
    return _status("VmHWM")


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _LIBC = False
    return _LIBC


_LIBC = None
_M_MMAP_THRESHOLD = -3


def map_large_allocations(threshold: int = 1 << 20) -> bool:
    """Have glibc map every allocation of ``threshold`` bytes or more on its own
    (``mallopt(M_MMAP_THRESHOLD)``; it also stops glibc raising the threshold as large
    blocks are freed), so a freed array leaves the resident set at once instead of staying
    in the heap for later, differently sized batches to fragment around. Process-wide;
    returns whether it was set (False off glibc)."""
    lib = _libc()
    return bool(lib) and bool(lib.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def release_free_memory() -> None:
    """Hand freed heap memory back to the system (glibc ``malloc_trim``; else a no-op)."""
    lib = _libc()
    if lib:
        lib.malloc_trim(0)


@dataclass
class RSSWatch:
    """Peak resident-set growth over a baseline; see the module docstring."""

    baseline: int | None
    reset: bool

    @classmethod
    def start(cls) -> "RSSWatch":
        """Record the resident set now as the baseline and reset the kernel's high-water
        mark (``/proc/self/clear_refs``; ``reset`` says whether that worked)."""
        baseline = rss_bytes()
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
                fh.write("5")
            reset = True
        except OSError:
            reset = False
        return cls(baseline, reset)

    def growth(self) -> int | None:
        """Peak resident set since :meth:`start` minus the baseline, bytes (``None`` when
        the high-water mark could not be reset or read)."""
        peak = peak_rss_bytes()
        if not self.reset or peak is None or self.baseline is None:
            return None
        return max(0, peak - self.baseline)
