"""A memory budget as one value, read once: bytes, a text such as ``"5MB"``, a share such as
``"25%"`` of the unbatched peak, or none.

    Budget.parse("25GB")          # 25e9 bytes (decimal units; "4GiB" binary)
    Budget.parse(25e9)            # the same
    Budget.parse("25%")           # a quarter of the unbatched peak, resolved by the caller
    Budget.parse(None)            # no budget: unbatched
    Budget.megabytes(4000)        # PySCF's ``max_memory`` (MB = 10**6 bytes)

Whoever knows the unbatched peak resolves the budget to bytes with
``budget.bytes_for(unbatched_peak, reserve)``; everything else reads ``fixed``, ``share``
and ``unlimited``. A value that is none of these is a :class:`~sequant_eval.errors.BudgetError`
with one message, whoever parses it (the API, the command line, the chemistry front end).

A bottom helper: it imports only ``errors`` and ``units``.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from .errors import BudgetError
from .units import format_bytes

__all__ = ["Budget", "BYTE_UNITS"]

#: Units a byte count may carry (case-insensitive): decimal ``kB``..``TB``, binary
#: ``KiB``..``TiB``.
BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?"
_BYTES = re.compile(rf"\s*([+-]?{_NUMBER}|inf)\s*([A-Za-z]*)\s*")
_SHARE = re.compile(rf"\s*([+-]?{_NUMBER})\s*%\s*")
_HOW = ("give a positive number of bytes (25e9, '25GB', '4GiB'), a share of the unbatched "
        "peak ('25%') or None (no budget)")


def _float(value) -> float:
    """``value`` as a float; an integer too large for one is a ``BudgetError``."""
    try:
        return float(value)
    except OverflowError:
        raise _refuse(value, "overflows a float (write 'inf' for no budget)") from None


def _refuse(value, why: str) -> BudgetError:
    shown = repr(value)
    if len(shown) > 40:                        # a 400-digit integer: its start and length
        shown = f"{shown[:12]}... ({len(shown)} characters)"
    return BudgetError(f"budget {shown} {why}; {_HOW}", value)


@dataclass(frozen=True)
class Budget:
    """A memory budget: ``fixed`` bytes, or a ``share`` (a fraction, ``"25%"`` → 0.25) of
    the unbatched peak, or neither (``unlimited``). ``text`` is how it was given.

    Build with :meth:`parse` (any accepted spelling, a ``Budget`` included) or
    :meth:`megabytes`; compare, print and hash it like any frozen value."""

    fixed: float | None = None
    share: float | None = None
    text: str = ""

    # ------------------------------------------------------------------ construction
    @classmethod
    def parse(cls, value) -> "Budget":
        """``None``, ``inf`` or ``"inf"`` → no budget; a positive number or a text with a
        unit (``"25GB"``, ``"4GiB"``, ``"25e9"``) → that many bytes; ``"25%"`` → a share
        of the unbatched peak (above 0 %); a ``Budget`` → itself. Anything else (a bool,
        zero, a negative or NaN count, malformed text) is a ``BudgetError``."""
        if value is None or isinstance(value, Budget):
            return value if value is not None else cls()
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
            raise _refuse(value, f"is a {type(value).__name__}")
        if isinstance(value, numbers.Real):
            return cls._of_bytes(_float(value), value, "")
        share = _SHARE.fullmatch(value)
        if share:
            fraction = float(share.group(1)) / 100
            if not 0 < fraction < math.inf:
                raise _refuse(value, "is not a share above 0%")
            return cls(share=fraction, text=value.strip())
        m = _BYTES.fullmatch(value)
        if not m or m.group(2).lower() not in BYTE_UNITS:
            raise _refuse(value, "is not a byte count or a share")
        number = float(m.group(1)) * BYTE_UNITS[m.group(2).lower()]
        if math.isinf(number) and m.group(1) != "inf":
            raise _refuse(value, "overflows a float (write 'inf' for no budget)")
        return cls._of_bytes(number, value, value.strip())

    @classmethod
    def _of_bytes(cls, n: float, given, text: str) -> "Budget":
        if not n > 0:                                 # zero, negative, NaN
            raise _refuse(given, "is not a positive number of bytes")
        return cls(text=text) if math.isinf(n) else cls(fixed=n, text=text)

    @classmethod
    def megabytes(cls, mb) -> "Budget":
        """PySCF's ``max_memory``: ``mb`` megabytes of 10**6 bytes (None: no budget)."""
        if mb is None:
            return cls()
        if isinstance(mb, bool) or not isinstance(mb, numbers.Real) or not mb > 0:
            raise _refuse(mb, "is not a positive number of megabytes (max_memory)")
        n = _float(mb) * 1e6
        if math.isinf(n) and not math.isinf(mb):
            raise _refuse(mb, "overflows a float (max_memory=None for no budget)")
        return cls._of_bytes(n, mb, f"{mb:g} MB")

    # ------------------------------------------------------------------ reading
    @property
    def unlimited(self) -> bool:
        """No budget: evaluate unbatched."""
        return self.fixed is None and self.share is None

    def bytes_for(self, unbatched_peak: float, reserve: float = 0) -> float:
        """The budget in bytes: ``fixed`` as it is; a share of ``unbatched_peak`` (the
        arrays' peak with no batching) plus ``reserve`` (what no batching makes smaller,
        e.g. the program's own bytes); ``inf`` when unlimited."""
        if self.fixed is not None:
            return self.fixed
        if self.share is not None:
            return self.share * float(unbatched_peak) + float(reserve)
        return math.inf

    def __str__(self) -> str:
        if self.unlimited:
            return "no budget"
        if self.share is not None:
            return self.text or f"{self.share * 100:g}%"
        shown = f"{format_bytes(self.fixed)} ({self.fixed:.0f} B)"
        return f"{self.text} = {shown}" if self.text and self.text[-1].isalpha() else shown
