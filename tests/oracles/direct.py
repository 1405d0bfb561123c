"""Test oracles, independent of the package's execution path.

``direct_evaluate``: every forest value by plain ``np.einsum`` from its definition, sums by
explicit loops over entries. ``unbatched_walk``: the peak bytes and flops of the
demand-driven unbatched walk (children before parents, intermediates before leaves, each
term added to its sum at once, the first one moved in), computed from the forest alone.
"""
from __future__ import annotations

from math import prod

import numpy as np

from sequant_eval.forest.values import ValueKind

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def direct_evaluate(forest, source) -> dict:
    cache: dict[int, np.ndarray] = {}

    def value(v: int) -> np.ndarray:
        if v in cache:
            return cache[v]
        val = forest.values[v]
        if val.kind is ValueKind.LEAF:
            out = np.asarray(source.fetch(v))
        elif val.kind is ValueKind.CONTRACT:
            sub = (f"{''.join(LETTERS[m] for m in val.left.modes)},"
                   f"{''.join(LETTERS[m] for m in val.right.modes)}->"
                   f"{''.join(LETTERS[m] for m in val.result)}")
            out = np.einsum(sub, value(val.left.value), value(val.right.value))
        else:
            out = np.zeros(source.shape_of(v) if hasattr(source, "shape_of") else ())
            parts = [float(e.coefficient) * value(e.value).transpose(e.perm)
                     for e in val.entries]
            out = sum(parts[1:], parts[0]) if parts else out
        cache[v] = out
        return out

    return {root.name: value(root.value) for root in forest.roots}


def unbatched_walk(forest, shapes, itemsize: int = 8, scratch=None) -> tuple[int, int]:
    values = forest.values
    order: list[tuple[str, int, int]] = []
    done: set[int] = set()

    def need(v: int) -> None:
        if v in done:
            return
        val = values[v]
        if val.kind is ValueKind.CONTRACT:
            for c in sorted(val.children, key=lambda c: values[c].kind is ValueKind.LEAF):
                need(c)
            order.append(("make", v, -1))
        elif val.kind is ValueKind.SUM:
            for k, e in enumerate(val.entries):
                need(e.value)
                order.append(("add", v, k))
        else:
            order.append(("make", v, -1))
        done.add(v)

    for r in forest.roots:
        need(r.value)

    def reads(step):
        kind, v, k = step
        if kind == "add":
            return [values[v].entries[k].value]
        return list(values[v].children) if values[v].kind is ValueKind.CONTRACT else []

    last = {}
    for s, step in enumerate(order):
        for r in reads(step):
            last[r] = s
    roots = {r.value for r in forest.roots}
    size = {v: prod(shapes[v]) * itemsize for v in range(len(values))}
    live = peak = flops = 0
    alive: set[int] = set()
    for s, step in enumerate(order):
        kind, v, k = step
        scaled = False
        if kind == "add":
            e = values[v].entries[k]
            moved = (k == 0 and last[e.value] == s and values[e.value].kind is not ValueKind.LEAF
                     and e.perm == tuple(range(len(e.perm))) and e.value not in roots)
            if not (moved and e.coefficient == 1):
                flops += 2 * prod(shapes[e.value])
            if moved:
                alive.discard(e.value)
                live -= size[e.value]
            # an add into an existing sum with a coefficient other than ±1 makes alpha * x
            scaled = v in alive and not moved and abs(e.coefficient) != 1
            if v not in alive:
                alive.add(v)
                live += size[v]
        else:
            val = values[v]
            if val.kind is ValueKind.CONTRACT:
                ext = dict(zip(val.left.modes, shapes[val.left.value])) | dict(
                    zip(val.right.modes, shapes[val.right.value]))
                flops += 2 * prod(ext.values())
            alive.add(v)
            live += size[v]
        extra = (scratch or {}).get(v, 0) * itemsize if kind == "make" else (
            size[values[v].entries[k].value] if scaled else 0)
        peak = max(peak, live + extra)
        for r in reads(step):
            if last[r] == s and r not in roots and r in alive:
                alive.discard(r)
                live -= size[r]
    return peak, flops
