"""Residency under a device budget: values idle across a gap leave the device and come back.

Placement (``placement.py``) moves ops back to the host only until every step's working
set fits the GPU budget; what still binds is values live but idle — touched before a step,
read again after it. ``fit_residency`` sweeps the route the executor takes
(``gpu_profile``) and, while the GPU peak exceeds the budget, relieves the binding step of
its cheapest idle value by one of three moves, explicit nodes with ordering edges:

- ``copy``: a ``copy`` to the host after every read before the gap (and before the route's
  next step and the step it relieves, so the device buffer is released there) and a
  ``copy`` back before the next reader: ``2 × transfer``;
- ``refetch``: a device copy of a leaf batch is dropped and the batch sliced again from
  the source and copied over: ``transfer`` plus the host slice;
- ``recompute``: a contraction whose operands are still resident and unchanged at the
  next read is made again there: its own time on the device.

Keeping is free and is what happens wherever the budget does not bind. The cost model
ranks idle values by the time per byte not hidden behind the gap's own ops, then time per
byte, then byte-steps relieved (the reference's bytes × gap). A reload is ordered after
the route's node just before its reader, so it lands as late as it can; a step the route
put before an eviction it needs is made to wait for it (a ``wait``, no copy). The profile
is swept again after every move, so the predicted device peak is the final graph's; a
binding step with nothing idle is refused (``ResidencyInfeasible``). The same sweep over
host buffers with a file as the far side would spill to disk; it is not built.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ...errors import InfeasibleBudget
from ..graph import VIEWS, Device, Graph, Node, Op
from .placement import Machine, gpu_profile, node_bytes, node_flops
from .runs import arm_nodes, effective_roots, lower_runs_arm0

__all__ = ["Move", "Residency", "ResidencyInfeasible", "fit_residency"]


class ResidencyInfeasible(InfeasibleBudget):
    """A device budget that even evicting every idle value cannot meet: the binding step's
    own working set does not fit (``minimum``: what is resident there, a lower bound)."""


@dataclass(frozen=True)
class Move:
    """One value off the device across a gap of the route (steps ``gap``: its last touch
    before, its next read after), ``out`` the copy to the host (``copy`` moves only) and
    ``back`` the node that brings it back; ``cost`` in predicted seconds."""

    kind: str                  # "copy", "refetch" or "recompute"
    value: int
    nbytes: float
    gap: tuple[int, int]
    out: int | None
    back: int
    cost: float

    def dump(self) -> str:
        """One line: the kind of move, the value, its idle gap, the nodes and the cost."""
        out = f"n{self.out} out, " if self.out is not None else ""
        return (f"{self.kind} n{self.value} ({self.nbytes:.0f} B) idle over steps "
                f"{self.gap[0]}..{self.gap[1]}: {out}n{self.back} back, {self.cost:.3g} s")


@dataclass(frozen=True)
class Residency:
    """What the pass did: the budget, the device peak as placed and as predicted after the
    moves, and the moves in the order they were made."""

    budget: float
    placed_peak: float
    peak: float
    moves: tuple[Move, ...] = field(default=())
    waits: int = 0             # steps made to wait for an eviction the route put after them

    @property
    def evictions(self) -> int:
        """Values taken off the device across a gap (by any move)."""
        return len(self.moves)

    @property
    def reloads(self) -> int:
        """Values brought back before their next reader (one per eviction)."""
        return sum(1 for m in self.moves if m.back is not None)

    def count(self, kind: str) -> int:
        """Moves of one kind."""
        return sum(1 for m in self.moves if m.kind == kind)

    def dump(self) -> str:
        """The budget, peaks and move counts, then one line per move."""
        head = (f"residency: gpu budget {self.budget:.0f} B, device peak "
                f"{self.placed_peak:.0f} -> {self.peak:.0f} B; {self.evictions} evictions "
                f"({self.count('copy')} copied out, {self.count('refetch')} refetched, "
                f"{self.count('recompute')} recomputed), {self.reloads} reloads\n")
        return head + "".join(f"  {m.dump()}\n" for m in self.moves)


def fit_residency(g: Graph, roots: Sequence[int], machine: Machine) -> Residency:
    """Evict idle values until the route's GPU peak fits ``machine.gpu_budget`` (nothing
    when there is no GPU, the budget is infinite or ``machine.evict`` is off, or it does
    not bind); the graph gains the moves' nodes, the roots are unchanged."""
    budget = machine.gpu_budget
    if not machine.gpu or not machine.evict or budget == float("inf"):
        return Residency(budget, 0.0, 0.0)
    order = lower_runs_arm0(g, roots)
    placed = prof = gpu_profile(g, roots, order)
    moves: list[Move] = []
    waits = 0
    while prof.peak > budget:
        if len(moves) + waits > 4 * len(order):
            raise ResidencyInfeasible(f"gpu budget {budget:.0f} B: eviction did not converge "
                                      f"(device peak {prof.peak:.0f} B); raise gpu_budget",
                                      budget, prof.peak)
        best = _cheapest(g, roots, order, prof, machine)
        if best is None:
            node = g.nodes[order[prof.step]]
            raise ResidencyInfeasible(
                f"gpu budget {budget:.0f} B is below what evicting every idle value reaches: "
                f"step {prof.step} (n{order[prof.step]} {node.op.value} {node.tag}) holds "
                f"{prof.peak:.0f} B on the device, none of it evictable (buffers "
                f"{', '.join(f'n{o}' for o in prof.live)}); raise gpu_budget to at least "
                f"{prof.peak:.0f} B, or plan with a smaller batch budget so each op's "
                f"arrays are smaller", budget, prof.peak)
        if best[1] == "wait":                     # an eviction the route put late
            g.after[order[prof.step]].add(best[0].value)
            waits += 1
        else:
            moves.append(_apply(g, order, *best))
        order = lower_runs_arm0(g, roots)
        prof = gpu_profile(g, roots, order)
    return Residency(budget, placed.peak, prof.peak, tuple(moves), waits)


@dataclass
class _Gap:
    """An idle value at the binding step: its version, the steps either side, the nodes
    touching it before the gap and the readers after it to rewire."""

    value: int
    step: int
    first: int
    next: int
    before: list[int]
    after: list[int]


def _cheapest(g: Graph, roots: Sequence[int], order: Sequence[int], prof, machine: Machine):
    """The idle value at the binding step with the cheapest move, or None."""
    p = prof.step
    pos = {n: k for k, n in enumerate(order)}
    reach = g.reachable(effective_roots(g, roots))
    owner = {n: g.owner(n) for n in reach}
    readers: dict[int, list[int]] = {}
    for n in reach:
        if g.nodes[n].op is Op.BRANCH:            # never executed: reads nothing
            continue
        for i in g.nodes[n].inputs:
            readers.setdefault(owner[i], []).append(n)
    spent = [0.0]                          # predicted seconds of the route up to each step
    for n in order:
        spent.append(spent[-1] + _op_time(g, n, machine))
    side = _sides(g, pos, p)
    best = None
    for o in prof.live:
        gap = _gap(g, o, p, pos, owner, readers.get(o, []), order, side)
        if gap is None:
            continue
        b = prof.size[o]
        options = _options(g, gap, b, pos, owner, machine) if gap.after else [("wait", 0.0)]
        kind, t = min(options, key=lambda x: x[1])
        hidden = spent[gap.next] - spent[gap.first + 1]
        key = (max(0.0, t - hidden) / b, t / b, -b * (gap.next - gap.first), o)
        if best is None or key < best[0]:
            best = (key, gap, kind, b, t)
    return None if best is None else best[1:]


def _gap(g: Graph, o: int, p: int, pos, owner, readers, order, side) -> _Gap | None:
    """Buffer ``o`` idle at step ``p``, or None: touched at ``p``, read in an arm not taken
    that straddles ``p``, or read after the gap through a view made before it. An arm not
    taken counts on the side of ``p`` its arm 0 is on (``side``: -1 before, +1 after)."""
    chain = [n for n in order if owner.get(n) == o]
    nodes = set(chain + readers)
    touch = [n for n in nodes if n in pos]
    off = nodes - set(touch)
    if any(side.get(n, 0) == 0 for n in off) or any(pos[n] == p for n in touch):
        return None
    before = [n for n in touch if pos[n] < p] + [n for n in off if side[n] < 0]
    after = [n for n in touch if pos[n] > p]
    if not before or not after:
        return None
    v = max((n for n in chain if pos[n] < p and g.nodes[n].op not in VIEWS),
            key=pos.__getitem__)
    out = [u for u in after if g.nodes[u].op is Op.COPY and g.nodes[u].inputs[0] == v
           and g.device.get(u) is Device.CPU]
    if out:                                       # it leaves for the host anyway: the step
        if order[p] in g.reachable(out[:1]):      # can wait for that (unless it feeds it)
            return None
        return _Gap(out[0], p, p, p, [], [])
    rewire = []
    for u in set(after) | {n for n in off if side[n] > 0}:
        old = [i for i in g.nodes[u].inputs if owner.get(i) == o and pos.get(i, p) < p]
        if any(i != v for i in old):
            return None
        if old:
            rewire.append(u)
    first = max(pos[n] for n in before if n in pos)
    return _Gap(v, p, first, min(pos[n] for n in after), sorted(before), sorted(rewire))


def _sides(g: Graph, pos, p: int) -> dict[int, int]:
    """For every node of an arm not taken: -1 (+1) when arm 0 of its branch runs wholly
    before (after) step ``p``, 0 when it straddles it."""
    side: dict[int, int] = {}
    arms, _ = arm_nodes(g)
    for nodes in arms.values():
        at = [pos[n] for n in nodes[0] if n in pos] if nodes else []
        mark = 0 if not at else (-1 if max(at) < p else (1 if min(at) > p else 0))
        for arm in nodes[1:]:
            side.update((n, mark) for n in arm - nodes[0])
    return side


def _options(g: Graph, gap: _Gap, b: float, pos, owner, machine: Machine):
    """The moves that can take this value off the device, with their predicted seconds."""
    cost, node = machine.cost, g.nodes[gap.value]
    yield "copy", 2 * cost.transfer_time(b)
    leaf = node.inputs[0] if node.inputs else None
    if node.op is Op.COPY and g.nodes[leaf].op is Op.SLICE and \
            g.device.get(leaf) is Device.CPU:
        yield "refetch", cost.transfer_time(b) + cost.op_time(0.0, 2 * b, Device.CPU)
    if node.op is Op.CONTRACT and owner[gap.value] == gap.value and all(
            _resident_at(g, i, gap, pos, owner) for i in node.inputs):
        io = b + sum(node_bytes(g, i) for i in node.inputs)
        yield "recompute", cost.op_time(node_flops(g, gap.value), io, Device.GPU)


def _resident_at(g: Graph, i: int, gap: _Gap, pos, owner) -> bool:
    """Whether operand ``i`` is still on the device, unchanged, at the gap's next read."""
    o = owner[i]
    if g.device_of(i) is not Device.GPU or g.nodes[o].op is Op.INPUT:
        return False
    later = [n for n, w in owner.items() if w == o and n in pos and pos[n] > pos[gap.value]]
    if any(pos[n] < gap.next and g.nodes[n].op not in VIEWS for n in later):
        return False                              # written in place since: not the same
    reads = [n for n in pos if o in {owner.get(x) for x in g.nodes[n].inputs}]
    return any(pos[n] >= gap.next for n in reads)


def _op_time(g: Graph, n: int, machine: Machine) -> float:
    node = g.nodes[n]
    if node.op in (Op.INPUT, Op.SLICE, Op.BRANCH) or node.op in VIEWS:
        return 0.0
    if node.op is Op.COPY:
        return machine.cost.transfer_time(node_bytes(g, n))
    io = node_bytes(g, n) + sum(node_bytes(g, i) for i in node.inputs)
    return machine.cost.op_time(node_flops(g, n), io, g.device.get(n, Device.CPU))


def _apply(g: Graph, order: Sequence[int], gap: _Gap, kind: str, b: float, t: float) -> Move:
    """Push the move's nodes, order them, rewire the readers after the gap."""
    v, node = gap.value, g.nodes[gap.value]
    anchor = order[gap.next - 1]                  # the reload lands just before its reader
    seq = g.nodes[order[gap.next]].seq - 0.25
    span = f"(idle steps {gap.first}..{gap.next})"
    out = None
    if kind == "copy":
        out = g.push(Node(Op.COPY, (v,), (Device.CPU.value,), node.shape,
                          g.nodes[order[gap.first]].seq + 0.25, f"evict n{v} -> cpu {span}"))
        g.device[out] = Device.CPU
        g.after[out].update(n for n in gap.before if n != v)
        g.after[order[gap.first + 1]].add(out)        # it goes at once, and before the
        g.after[order[gap.step]].add(out)             # step it relieves, however reordered
        src = out
    elif kind == "refetch":
        leaf = g.nodes[node.inputs[0]]
        src = g.push(replace(leaf, seq=seq - 0.125, tag=f"{leaf.tag} refetch {span}".strip()))
        g.device[src] = Device.CPU
        g.after[src].add(anchor)
    if kind == "recompute":
        back = g.push(replace(node, seq=seq, tag=f"{node.tag} recompute {span}".strip()))
    else:
        back = g.push(Node(Op.COPY, (src,), (Device.GPU.value,), node.shape, seq,
                           f"reload n{v} -> gpu {span}"))
    g.device[back] = Device.GPU
    g.after[back].add(anchor)
    for u in gap.after:
        g.rewrite_input(u, v, back)
    return Move(kind, v, b, (gap.first, gap.next), out, back, t)
