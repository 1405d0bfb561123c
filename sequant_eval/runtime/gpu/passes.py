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
- ``bridge_arms``: an arm exit on another device than its merge is copied there.
- ``copy_roots_to_host``: a root placed on a device is copied back to the host.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..graph import INPLACE, VIEWS, Device, Graph, Node, Op

__all__ = ["Pass", "PASSES", "run_passes", "cse", "simplify", "order_inplace",
           "insert_copies", "bridge_arms", "copy_roots_to_host"]

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
    after: dict[int, set[int]] = {}                 # ordering edges follow rewrites too,
    for n, deps in g.after.items():                 # none left on a superseded node (it
        after.setdefault(remap.get(n, n), set()).update(remap.get(x, x) for x in deps)
    g.after.clear()                                 # would be pulled back into the route)
    g.after.update(after)
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
    """Common subexpressions folded (see the module docstring for what never is)."""
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
    """Exact rewrites only: scale by 1, identity or composed permutations, reshapes."""
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
    """Ordering edges so an in-place op runs after every other reader of the version it
    overwrites."""
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
    """One ``copy`` per (producer, target device) wherever a node reads a value of another
    device."""
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


def bridge_arms(g: Graph, roots: Sequence[int]) -> list[int]:
    """Every branch arm hands its exit over on the device of the merge that reads it: an
    arm exit placed elsewhere gets a ``copy`` there, which becomes the arm's exit (and the
    merge reads arm 0's). So whichever arm is picked, the merge reads a value of its own
    device."""
    for b in list(g.branches):
        node, merge = g.nodes[b], g.branches[b]
        target = g.device.get(merge)
        exits = []
        for e in node.inputs:
            if target is None or g.device_of(e) in (None, target):
                exits.append(e)
                continue
            src = g.nodes[e]
            c = g.push(Node(Op.COPY, (e,), (target.value,), src.shape, src.seq + 0.5,
                            f"copy n{e} -> {target.value} (arm exit)"))
            g.device[c] = target
            exits.append(c)
        if tuple(exits) == node.inputs:
            continue
        if exits[0] != node.inputs[0]:
            g.rewrite_input(merge, node.inputs[0], exits[0])
        del g.branches[b]
        new = g.push(replace(node, inputs=tuple(exits)))
        g.branches[new] = merge
        for e, c in zip(node.inputs, exits):          # the merge waits for either arm
            if e != c and e in g.after.get(merge, ()):
                g.after[merge].discard(e)
                g.after[merge].add(c)
    return list(roots)


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
