"""Small hand-built op graphs for the graph-layer tests."""
from __future__ import annotations

from sequant_eval.runtime.graph import Device, Graph, Node, Op


class Builder:
    def __init__(self) -> None:
        self.g = Graph()
        self.seq = 0

    def add(self, op: Op, inputs=(), params=(), shape=(4, 4), device: Device | None = None) -> int:
        self.seq += 1
        n = self.g.push(Node(op, tuple(inputs), tuple(params), tuple(shape), self.seq))
        if device is not None:
            self.g.device[n] = device
        return n

    def leaf(self) -> int:
        inp = self.add(Op.INPUT, params=(self.seq,))
        return self.add(Op.SLICE, (inp,), ((None, None),))

    def contract(self, a: int, b: int, device: Device | None = None, flops: float = 128.0) -> int:
        return self.add(Op.CONTRACT, (a, b), (0, flops), device=device)

    def chain(self, length: int, device: Device | None = None) -> int:
        x = self.leaf()
        for _ in range(length):
            x = self.contract(x, self.leaf(), device)
        return x

    def diamond(self, x: int, device: Device | None = None) -> tuple[int, int, int, int]:
        """x → diverge → (arm0 | arm1) → merge; returns (diverge, arm0, arm1, merge) with a
        Branch over the two arms, arm 0 read by the merge."""
        d = self.contract(x, self.leaf(), device)
        a0 = self.contract(d, self.leaf(), device)
        a1 = self.contract(d, self.leaf(), device)
        m = self.contract(a0, self.leaf(), device)
        b = self.add(Op.BRANCH, (a0, a1), (m,))
        self.g.branches[b] = m
        return d, a0, a1, m
