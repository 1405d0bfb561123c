"""Eval forest: binarized products interned into one DAG of values."""
from __future__ import annotations

from .build import build_forest, mode_extent
from .values import (Forest, Occurrence, Operand, Root, SumEntry, TermNode, TermTree, Value,
                     ValueKind)

__all__ = ["Forest", "Value", "ValueKind", "Operand", "SumEntry", "Occurrence", "Root", "TermNode", "TermTree",
           "build_forest", "mode_extent"]
