"""Graph passes, driven by a registry. Each returns new roots and is idempotent.

- ``cse``: one forward walk; a node whose (op, parameters by bit pattern, inputs) equals
  an earlier one is replaced by it. Operand order is never swapped (a swapped GEMM is not
  bitwise the same). Never folded: inputs, slices (a batch fetched again on purpose, so
  it need not be held), destinations, in-place ops, copies, branches, and any buffer that
  is later updated in place (two sums must not share one accumulator), and the roots
  (each result is its own array).
- ``simplify``: exact rewrites only — scale by 1, identity permutation, permutation of a
  permutation, reshape of a reshape, reshape to the same shape.
- ``order_inplace``: an in-place op (accumulate, scatter, scale) must run after every
  other reader of the buffer version it overwrites; those become ordering edges.
- ``insert_copies``: wherever a node reads a value placed on another device, one ``copy``
  per (producer, target device) is inserted and shared by every such reader.
- ``copy_roots_to_host``: a root placed on a device is copied back to the host.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from .graph import INPLACE, VIEWS, Device, Graph, Node, Op

__all__ = ["Pass", "PASSES", "run_passes", "cse", "simplify", "order_inplace",
           "insert_copies", "copy_roots_to_host"]

Pass = Callable[[Graph, Sequence[int]], list[int]]

_NO_CSE = {Op.INPUT, Op.SLICE, Op.ZEROS, Op.COPY, Op.BRANCH} | INPLACE


def _rewrite(g: Graph, roots: Sequence[int], visit) -> list[int]:
    """Walk in order; ``visit(node_id, node_with_remapped_inputs)`` returns the id to use."""
    remap: dict[int, int] = {}
    for n in g.order(roots):
        node = g.nodes[n]
        inputs = tuple(remap.get(i, i) for i in node.inputs)
        new = node if inputs == node.inputs else replace(node, inputs=inputs)
        remap[n] = visit(n, new)
    for n in list(g.after):                         # ordering edges follow rewrites too
        deps = {remap.get(x, x) for x in g.after[n]}
        g.after[remap.get(n, n)] = g.after.get(remap.get(n, n), set()) | deps
    for b, merge in list(g.branches.items()):      # branches follow their rewritten ends
        nb, nm = remap.get(b, b), remap.get(merge, merge)
        if (nb, nm) != (b, merge):
            del g.branches[b]
            g.nodes[nb] = replace(g.nodes[nb], params=(nm,))
            g.branches[nb] = nm
    return [remap.get(r, r) for r in roots]


def _keep_or_push(g: Graph, n: int, new: Node) -> int:
    if new == g.nodes[n]:
        return n
    out = g.push(new)
    if n in g.device:
        g.device[out] = g.device[n]
    if n in g.after:
        g.after[out] |= g.after[n]
    return out


def cse(g: Graph, roots: Sequence[int]) -> list[int]:
    seen: dict[tuple, int] = {}
    written = {g.owner(g.nodes[n].inputs[0], inplace=False) for n in g.order(roots)
               if g.nodes[n].op in INPLACE}          # buffers later updated in place
    results = set(roots)                             # each result is its caller's own array

    def visit(n: int, new: Node) -> int:
        if new.op in _NO_CSE or n in written or n in results:
            return _keep_or_push(g, n, new)
        key = (new.key(), g.device.get(n))
        if key in seen:
            return seen[key]
        out = _keep_or_push(g, n, new)
        seen[key] = out
        return out

    return _rewrite(g, roots, visit)


def simplify(g: Graph, roots: Sequence[int]) -> list[int]:
    def visit(n: int, new: Node) -> int:
        if new.op is Op.SCALE and new.params[0] == 1.0:
            return new.inputs[0]
        if new.op is Op.PERMUTE:
            perm = new.params[0]
            src = g.nodes[new.inputs[0]]
            if src.op is Op.PERMUTE:                 # x.permute(p).permute(q) = x.permute(p∘q)
                inner = src.params[0]
                perm = tuple(inner[k] for k in perm)
                new = replace(new, inputs=src.inputs, params=(perm,))
            if perm == tuple(range(len(perm))):
                return new.inputs[0]
        if new.op is Op.RESHAPE:
            src = g.nodes[new.inputs[0]]
            if src.op is Op.RESHAPE:
                new = replace(new, inputs=src.inputs)
                src = g.nodes[new.inputs[0]]
            if tuple(src.shape) == tuple(new.params[0]):
                return new.inputs[0]
        return _keep_or_push(g, n, new)

    return _rewrite(g, roots, visit)


def order_inplace(g: Graph, roots: Sequence[int]) -> list[int]:
    readers: dict[int, set[int]] = {}
    order = g.order(roots)
    for n in order:
        for i in g.nodes[n].inputs:
            readers.setdefault(g.owner(i, inplace=False), set()).add(n)
    for n in order:
        if g.nodes[n].op in INPLACE:
            version = g.owner(g.nodes[n].inputs[0], inplace=False)
            for r in readers.get(version, ()):
                if r != n and g.nodes[r].op not in VIEWS:
                    g.after[n].add(r)
    return list(roots)


def insert_copies(g: Graph, roots: Sequence[int]) -> list[int]:
    copies: dict[tuple[int, Device], int] = {}

    def visit(n: int, new: Node) -> int:
        target = g.device.get(n)
        if new.op in (Op.COPY, Op.BRANCH) or target is None:
            return _keep_or_push(g, n, new)
        inputs = list(new.inputs)
        for k, i in enumerate(inputs):
            src = g.device_of(i)
            if src is None or src is target:
                continue
            key = (i, target)
            if key not in copies:
                node = g.nodes[i]
                c = g.push(Node(Op.COPY, (i,), (target.value,), node.shape, node.seq + 0.5,
                                f"copy n{i} -> {target.value}"))
                g.device[c] = target       # its output lives on the target device
                copies[key] = c
            inputs[k] = copies[key]
        return _keep_or_push(g, n, replace(new, inputs=tuple(inputs)))

    return _rewrite(g, roots, visit)


def copy_roots_to_host(g: Graph, roots: Sequence[int]) -> list[int]:
    """Every root that lives on a device gets an explicit ``copy`` to the host, which
    becomes the root: results always leave the evaluation as host arrays, and the device
    buffer is released after that copy like any other."""
    out = []
    for r in roots:
        if g.device_of(r) in (None, Device.CPU):
            out.append(r)
            continue
        node = g.nodes[r]
        c = g.push(Node(Op.COPY, (r,), (Device.CPU.value,), node.shape, node.seq + 0.5,
                        f"copy n{r} -> cpu (result)"))
        g.device[c] = Device.CPU
        out.append(c)
    return out


PASSES: dict[str, Pass] = {"cse": cse, "simplify": simplify, "order_inplace": order_inplace}


def run_passes(g: Graph, roots: Sequence[int], names: Sequence[str] | None = None) -> list[int]:
    """The registered passes in order (all by default); each sees the previous one's graph."""
    roots = list(roots)
    for name in (PASSES if names is None else names):
        roots = PASSES[name](g, roots)
    return roots
