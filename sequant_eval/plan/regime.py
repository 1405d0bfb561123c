"""Size regimes: the extents of plain spaces and the power means of composite domains.

A composite (cluster-specific) index such as ``a_3<i_1,i_2>`` has a different range for
each pair (or orbital) it depends on, so a dense extent is not defined. Following the
water-20 data, a tensor's size multiplies the extents of its plain modes and, for each
group of ``k`` composite modes sharing one proto set, the power mean ``M_k**k`` of the
domain table chosen by the number of protos (2: PNO pair domains, 1: OSV orbital domains),
``M_k = (mean(d**k))**(1/k)``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil, prod
from pathlib import Path

from ..errors import UnknownSpace
from ..expr.index import Index, mode_space

__all__ = ["Regime", "load_regime", "footprint_bytes"]


def footprint_bytes(sizes: Sequence[float], itemsize: int) -> int:
    """Bytes of an array with these (possibly fractional, mean-sized) mode extents."""
    total = prod(sizes) * itemsize
    return int(total) if float(total).is_integer() else ceil(total)


@dataclass(frozen=True)
class Regime:
    """Extents of the index spaces (plain ones) and, for composite (PNO-like) spaces, the
    moments M_0..M_4 of their sizes by number of protos; a dry run sizes arrays from them."""

    extents: dict[str, int]                                   # plain spaces, ordered
    moments: dict[int, tuple[float, ...]] = field(default_factory=dict)  # protos → M_0..M_4
    name: str = ""

    @classmethod
    def from_extents(cls, extents: Mapping[str, int]) -> Regime:
        """A regime of plain extents only (no composite domain tables)."""
        return cls(dict(extents))

    def plain(self, space: str) -> int:
        """Extent of a plain space; a composite space (``a<2>``) takes its base space's."""
        if space in self.extents:
            return self.extents[space]
        base = space.split("<", 1)[0]
        if base in self.extents:
            return self.extents[base]
        raise UnknownSpace(f"space {space!r} has no extent (known: {', '.join(self.extents)})")

    def _composite(self, space: str, group_size: int) -> float:
        nprotos = int(space.split("<", 1)[1].rstrip(">"))
        table = self.moments.get(nprotos)
        if table is None:
            return self.plain(space)          # no domain table: sized like the plain space
        if group_size >= len(table):
            raise UnknownSpace(f"regime {self.name or '?'}: no power mean M_{group_size} for "
                               f"{group_size} composite modes of {space}")
        return table[group_size]

    def mode_sizes(self, spaces: Sequence[str], groups: Sequence[int]) -> tuple[float, ...]:
        """Per-mode sizes of a value (``groups``: equal ids share one proto set, -1 plain)."""
        count: dict[int, int] = {}
        for g in groups:
            count[g] = count.get(g, 0) + 1
        return tuple(self.plain(s) if g < 0 else self._composite(s, count[g])
                     for s, g in zip(spaces, groups))

    def label_sizes(self, labels: Sequence[Index]) -> tuple[float, ...]:
        """Per-mode sizes of these labels, composite ones sharing a proto set grouped for
        their power mean."""
        protos = [ix.protos for ix in labels]
        groups = [-1 if not p else protos.index(p) for p in protos]
        return self.mode_sizes([mode_space(ix) for ix in labels], groups)

    def to_json(self) -> str:
        """The regime as JSON, in the format ``load_regime`` reads."""
        return json.dumps({"name": self.name, "extents": self.extents,
                           "power_means": {str(k): list(v) for k, v in self.moments.items()}},
                          ensure_ascii=False, indent=2)


def load_regime(path: str | Path) -> Regime:
    """A regime from JSON: ``{"extents": {...}, "power_means": {"2": [M0..M4], "1": [...]}}``."""
    from ..errors import UsageError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"cannot read regime file {str(path)!r}: {err}; it must be JSON such "
                         f"as data/water20/regime.json") from err
    try:
        means = {int(k): tuple(float(x) for x in v)
                 for k, v in data.get("power_means", {}).items()}
        extents = {str(k): int(v) for k, v in data["extents"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise UsageError(f"regime file {str(path)!r} needs an object with \"extents\" (space "
                         f"-> integer) and optional \"power_means\" (proto count -> [M0..M4]); "
                         f"{type(err).__name__}: {err}") from err
    return Regime(extents, means, data.get("name", Path(path).stem))
