"""What may be batched, how finely, and under which byte budget."""
from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..errors import SequantEvalError

__all__ = ["BatchPolicy", "parse_bytes", "DEFAULT_BATCHES"]

#: With no explicit block size a space is cut into this many batches.
DEFAULT_BATCHES = 4

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value: float | int | str | None) -> float:
    """``"4GiB"``, ``"25GB"``, ``"25e9"``, ``25e9`` → bytes; ``None`` or ``"inf"`` → inf."""
    if value is None:
        return math.inf
    if isinstance(value, (int, float)):
        if value != value or value <= 0:
            raise SequantEvalError(f"a budget must be a positive number of bytes, got {value!r}")
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?|inf)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise SequantEvalError(f"cannot read {value!r} as bytes; use e.g. 25e9, '25GB', '4GiB'")
    return parse_bytes(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class BatchPolicy:
    """Batching knobs.

    ``contracted`` / ``external``: space names that may be batched where summed at a node /
    where open on a term's result. ``block``: elements per batch per space (the last batch
    may be shorter); a space without an entry is cut into ``DEFAULT_BATCHES`` batches.
    ``volatile``: tensors that change between evaluations (CC amplitudes).
    ``accumulation_factor`` scales the in-flight partial beside an accumulator.
    """

    budget: float | int | str | None = None
    contracted: Collection[str] = ()
    external: Collection[str] = ()
    block: Mapping[str, int] | None = None
    volatile: Collection[str] = ("t", "t1", "t2")
    accumulation_factor: float = 1.0
    itemsize: int = 8
    max_loops: int = 3
    budget_bytes: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget_bytes", parse_bytes(self.budget))
        object.__setattr__(self, "contracted", frozenset(self.contracted))
        object.__setattr__(self, "external", frozenset(self.external))
        object.__setattr__(self, "volatile", frozenset(self.volatile))
        object.__setattr__(self, "block", dict(self.block or {}))
        for space, size in self.block.items():
            if int(size) != size or size < 1:
                raise SequantEvalError(f"block size of space {space!r} must be a positive "
                                       f"integer, got {size!r}")
        if self.accumulation_factor < 0:
            raise SequantEvalError("accumulation_factor must be >= 0")

    @property
    def finite(self) -> bool:
        return math.isfinite(self.budget_bytes)

    @classmethod
    def everything(cls, budget, extents: Mapping[str, int], **kw) -> BatchPolicy:
        """Every space batchable in both roles (the default of ``se.analyze(budget=...)``)."""
        spaces = [s for s in extents if "<" not in s]
        return cls(budget=budget, contracted=spaces, external=spaces, **kw)

    def block_of(self, space: str, extent: int) -> int:
        size = self.block.get(space)
        if size is None:
            size = math.ceil(extent / DEFAULT_BATCHES)
        return max(1, min(int(size), extent))

    def nbatches(self, space: str, extent: int) -> int:
        return math.ceil(extent / self.block_of(space, extent))

    def dump(self) -> str:
        blocks = ",".join(f"{k}={v}" for k, v in sorted(self.block.items()))
        return (f"policy: budget {self.budget_bytes:g} B; contracted {{{','.join(sorted(self.contracted))}}}"
                f"; external {{{','.join(sorted(self.external))}}}; block {{{blocks}}}; "
                f"volatile {{{','.join(sorted(self.volatile))}}}; accumulation "
                f"{self.accumulation_factor:g}")
