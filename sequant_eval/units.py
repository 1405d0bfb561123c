"""Human-readable units for byte counts and flops (a bottom layer: any stage may use it)."""
from __future__ import annotations

__all__ = ["format_bytes", "format_budget", "format_flops"]


def format_bytes(n: float) -> str:
    """``1536`` → ``1.50 KiB``; binary prefixes, three significant figures."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def format_budget(given, n: float) -> str:
    """A budget in the unit it was given in and in binary units: ``'25GB' = 23.28 GiB
    (25000000000 B)``; a number of bytes shows as ``23.28 GiB (25000000000 B)``."""
    shown = f"{format_bytes(n)} ({n:.0f} B)"
    return f"{given.strip()!r} = {shown}" if isinstance(given, str) else shown


def format_flops(n: float) -> str:
    """``2.5e9`` → ``2.5 GFLOP``; decimal prefixes, three significant figures."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} FLOP"
