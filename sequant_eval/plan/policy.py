"""What may be batched, how finely, and under which byte budget."""
from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..budget import Budget
from ..errors import BudgetError, PolicyError

__all__ = ["BatchPolicy", "parse_bytes", "DEFAULT_BATCHES", "SINK_KINDS"]

#: With no explicit block size a space is cut into this many batches.
DEFAULT_BATCHES = 4

#: How a result sink takes its writes: added into in place (an array, a memmap, a dataset:
#: a result summed over several writes is accumulated there), or each slice once (a
#: callable).
SINK_KINDS = ("accumulate", "once")


def parse_bytes(value) -> float:
    """``"4GiB"``, ``"25GB"``, ``"25e9"``, ``25e9`` → bytes; ``None`` or ``"inf"`` → inf.

    Read by ``sequant_eval.budget.Budget.parse`` (one parser, one ``BudgetError`` for the
    API, the command line and the chemistry front end); a share such as ``"25%"`` is
    refused here: only a caller that knows the unbatched peak can resolve it."""
    budget = Budget.parse(value)
    if budget.share is not None:
        raise BudgetError(f"budget {value!r} is a share of the unbatched peak, which this "
                          f"caller cannot know; give bytes ('25GB'), or resolve the share "
                          f"first with Budget.parse({value!r}).bytes_for(unbatched_peak)",
                          value)
    return math.inf if budget.fixed is None else budget.fixed


def _space_names(value, what: str, noun: str = "space") -> frozenset[str]:
    """A collection of names; a bare string is refused (it would be read as its characters)."""
    if isinstance(value, str):
        raise PolicyError(f"{what} must be a collection of {noun} names, got the string "
                          f"{value!r}, which would be read as its characters; write "
                          f"{what}={{{value!r}}} (or a tuple of names)")
    if isinstance(value, Mapping) or not isinstance(value, Collection):
        raise PolicyError(f"{what} must be a collection of {noun} names (a set, tuple or "
                          f"list of str), got {type(value).__name__} {value!r}")
    for name in value:
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{what} holds {name!r}, which is not a {noun} name (a non-empty "
                              f"str)")
    return frozenset(value)


def _sink_kinds(value) -> tuple[tuple[str, str], ...]:
    """Result name → sink kind, as sorted pairs (a stable repr: the fitter's cache key)."""
    try:
        pairs = list(value.items() if isinstance(value, Mapping) else value)
        if any(isinstance(p, str) for p in pairs):
            raise TypeError("a name is no (name, kind) pair")      # ["R2"], split in letters
        out = tuple(sorted((str(k), v) for k, v in pairs))
    except (TypeError, ValueError):
        raise PolicyError(f"sinks must map result names to a sink kind ({', '.join(SINK_KINDS)}), "
                          f"e.g. sinks={{'R2': 'accumulate'}}; got {value!r}") from None
    for name, kind in out:
        if kind not in SINK_KINDS:
            raise PolicyError(f"sink of {name!r} has kind {kind!r}; a sink is one of "
                              f"{', '.join(SINK_KINDS)}")
    return out


def _block_size(space, size) -> int:
    ok = (isinstance(size, numbers.Integral) and not isinstance(size, bool)) or (
        isinstance(size, float) and math.isfinite(size) and size.is_integer())
    if not ok or size < 1:
        raise PolicyError(f"block size of space {space!r} must be a positive integer number "
                          f"of elements, got {size!r}; e.g. block={{{space!r}: 16}}")
    return int(size)


@dataclass(frozen=True)
class BatchPolicy:
    """Batching knobs.

    ``contracted`` / ``external``: space names that may be batched where summed at a node /
    where open on a term's result. ``block``: elements per batch per space (the last batch
    may be shorter); a space without an entry is cut into ``DEFAULT_BATCHES`` batches.
    ``volatile``: tensors that change between evaluations (CC amplitudes); none by default
    (the caller names them: ``Evaluator(..., persist=True, volatile=...)``).
    ``accumulation_factor`` scales the in-flight partial beside an accumulator.
    ``program``: the budget also covers the runtime program itself (its ops, the executor's
    tables, kernel plans; ``runtime/program.py``), so the arrays get the budget less the
    program's reserve. ``False`` gives the arrays the whole budget (the program comes on
    top): for studies of array planning on forests too small to carry a program.
    ``sinks``: results written batch by batch to the caller's destination instead of being
    held (result name → ``"accumulate"`` or ``"once"``, see ``SINK_KINDS``); ``se.evaluate(...,
    out=)`` sets it from the destinations given.
    """

    budget: float | int | str | None = None
    contracted: Collection[str] = ()
    external: Collection[str] = ()
    block: Mapping[str, int] | None = None
    volatile: Collection[str] = ()
    accumulation_factor: float = 1.0
    itemsize: int = 8
    max_loops: int = 3
    program: bool = True
    sinks: Mapping[str, str] | tuple = ()
    budget_bytes: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget_bytes", parse_bytes(self.budget))
        object.__setattr__(self, "contracted", _space_names(self.contracted, "contracted"))
        object.__setattr__(self, "external", _space_names(self.external, "external"))
        object.__setattr__(self, "volatile", _space_names(self.volatile, "volatile", "tensor"))
        block = {} if self.block is None else self.block
        if not isinstance(block, Mapping):
            raise PolicyError(f"block must map space names to block sizes, e.g. "
                              f"{{'i': 16}}, got {type(block).__name__} {block!r}")
        for space in block:
            if not isinstance(space, str) or not space:
                raise PolicyError(f"block has the key {space!r}, which is not a space name")
        object.__setattr__(self, "block", {k: _block_size(k, v) for k, v in block.items()})
        factor = self.accumulation_factor
        if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not (
                0 <= factor < math.inf):
            raise PolicyError(f"accumulation_factor must be a finite number >= 0, got "
                              f"{factor!r}")
        object.__setattr__(self, "sinks", _sink_kinds(self.sinks))
        if not isinstance(self.program, bool):
            raise PolicyError(f"program must be True (the budget covers the program too) or "
                              f"False (the arrays only), got {self.program!r}")
        for name, low in (("itemsize", 1), ("max_loops", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise PolicyError(f"{name} must be an integer >= {low}, got {value!r}"
                                  + (" (bytes per element: 8 for float64, 16 for complex128)"
                                     if name == "itemsize" else ""))

    @property
    def finite(self) -> bool:
        """Whether a budget is in force (an infinite one sets no limit)."""
        return math.isfinite(self.budget_bytes)

    @classmethod
    def everything(cls, budget, extents: Mapping[str, int], **kw) -> BatchPolicy:
        """Every space batchable in both roles (the default of ``se.analyze(budget=...)``)."""
        spaces = [s for s in extents if "<" not in s]
        return cls(budget=budget, contracted=spaces, external=spaces, **kw)

    def check(self, extents) -> None:
        """Refuse spaces the extents do not know (they would be silently ignored).

        ``extents``: a mapping of plain space names to extents, or a ``Regime``. Call it
        where the policy first meets the extents (``Evaluator``, the CLI)."""
        known = getattr(extents, "extents", extents)
        if not isinstance(known, Mapping):
            return          # extents are validated by their own owner
        for what, spaces in (("contracted", self.contracted), ("external", self.external),
                             ("block", self.block)):
            unknown = sorted(s for s in spaces if s not in known)
            if unknown:
                raise PolicyError(
                    f"{what} names space{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))} that the extents do not have (known: "
                    f"{', '.join(map(str, known)) or 'none'}); fix the name or add its extent")

    def block_of(self, space: str, extent: int) -> int:
        """Elements per batch of ``space`` at this extent: its ``block`` entry, else an even
        cut into ``DEFAULT_BATCHES``, clamped to 1..extent."""
        size = self.block.get(space)
        if size is None:
            size = math.ceil(extent / DEFAULT_BATCHES)
        return max(1, min(int(size), extent))

    def nbatches(self, space: str, extent: int) -> int:
        """Batches of a loop over ``space`` at this extent (the last may be shorter)."""
        return math.ceil(extent / self.block_of(space, extent))

    def dump(self) -> str:
        """One line: budget, batchable spaces in both roles, block sizes, volatile tensors and
        accumulation factor."""
        blocks = ",".join(f"{k}={v}" for k, v in sorted(self.block.items()))
        return (f"policy: budget {self.budget_bytes:g} B; contracted {{{','.join(sorted(self.contracted))}}}"
                f"; external {{{','.join(sorted(self.external))}}}; block {{{blocks}}}; "
                f"volatile {{{','.join(sorted(self.volatile))}}}; accumulation "
                f"{self.accumulation_factor:g}")
