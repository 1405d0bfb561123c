"""A progress line on stderr for planning that takes longer than a second."""
from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Call with (what, done, total); draws a bar once the work has run for ``delay`` s."""

    def __init__(self, delay: float = 1.0, stream=None, width: int = 30) -> None:
        self.start = time.perf_counter()
        self.delay = delay
        self.stream = stream or sys.stderr
        self.width = width
        self.shown = False

    def __call__(self, what: str, done: int, total: int) -> None:
        if time.perf_counter() - self.start < self.delay:
            return
        filled = int(self.width * done / max(total, 1))
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{what:<24} [{bar}] {done}/{total}")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """End the progress line (a newline) if it was ever drawn."""
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
