"""Indices and index spaces.

An index is a space name (``i``, ``a``, ``Κ``, ``μ̃``) and an ordinal (``i_1``); a composite
(cluster-specific) index carries the indices it depends on, its protos: ``a_3<i_1,i_2>``.
Two indices are the same label exactly when space, ordinal and protos agree.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

__all__ = ["Index", "mode_space"]


@dataclass(frozen=True, order=True)
class Index:
    """An index label: a space and a number, optionally composite (with protos, e.g.
    ``a_3<i_1,i_2>``)."""

    space: str
    number: int | None = None
    protos: tuple[Index, ...] = ()

    @property
    def label(self) -> str:
        """The plain label without protos, e.g. ``a_3``."""
        return self.space if self.number is None else f"{self.space}_{self.number}"

    def __str__(self) -> str:
        if self.protos:
            return f"{self.label}<{','.join(str(p) for p in self.protos)}>"
        return self.label

    def __repr__(self) -> str:
        return f"Index({str(self)!r})"


def mode_space(index: Index) -> str:
    """The space whose extent sizes a mode labelled by ``index``.

    A composite index is named by its base space plus the number of its protos, e.g.
    ``a<2>`` for a pair (PNO) virtual: its size is not the plain extent of ``a``.
    """
    if index.protos:
        return f"{index.space}<{len(index.protos)}>"
    return index.space


def check_extents(extents: Mapping[str, int]) -> dict[str, int]:
    """Validate a space → extent mapping and return it as an ordered dict."""
    from ..errors import UnknownSpace

    import numbers

    if not isinstance(extents, Mapping):
        raise UnknownSpace(f"extents must map space names to integers, e.g. {{'i': 10, "
                           f"'a': 38}}, got {type(extents).__name__} {extents!r}")
    out: dict[str, int] = {}
    for name, extent in extents.items():
        if not isinstance(name, str) or not name:
            raise UnknownSpace(f"space names must be non-empty strings, got {name!r}")
        if isinstance(extent, bool) or not isinstance(extent, numbers.Real):
            raise UnknownSpace(f"extent of space {name!r} must be a positive integer, got "
                               f"{extent!r}")
        try:
            value = int(extent)
        except (TypeError, ValueError, OverflowError):
            raise UnknownSpace(f"extent of space {name!r} must be an integer, got {extent!r}") from None
        if value != extent or value < 1:
            raise UnknownSpace(f"extent of space {name!r} must be a positive integer, got {extent!r}")
        out[name] = value
    return out
