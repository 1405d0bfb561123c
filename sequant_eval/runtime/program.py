"""A compiled evaluation: forest + walk + one contraction plan per contraction value.

Compiling is the expensive, once-per-equation-set part (binarization, interning, layout
decisions); running a program many times (CC iterations) only executes precomputed steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from collections.abc import Mapping

from ..forest.build import mode_extent
from ..forest.values import Forest, ValueKind
from .kernels import ContractPlan, plan_contraction
from .walk import Walk, build_walk

__all__ = ["Program", "compile_program"]


@dataclass(frozen=True)
class Program:
    forest: Forest
    walk: Walk
    extents: dict[str, int]
    shapes: tuple[tuple[int, ...], ...]          # per value id
    plans: dict[int, ContractPlan]                # per contraction value id

    def value_bytes(self, vid: int, itemsize: int = 8) -> int:
        return prod(self.shapes[vid]) * itemsize

    def dump(self) -> str:
        return self.forest.dump() + "walk:\n" + self.walk.dump(self.forest)


def compile_program(forest: Forest, extents: Mapping[str, int]) -> Program:
    extents = dict(extents)
    shapes = tuple(tuple(mode_extent(s, extents) for s in v.spaces) for v in forest.values)
    plans = {}
    for v in forest.values:
        if v.kind is ValueKind.CONTRACT:
            plans[v.id] = plan_contraction(v, forest.values[v.left.value],
                                           forest.values[v.right.value], shapes[v.id],
                                           shapes[v.left.value], shapes[v.right.value])
    return Program(forest, build_walk(forest), extents, shapes, plans)
