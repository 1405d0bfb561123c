"""The op-graph layer: runs, routes, passes (idempotent, with controls), placement.

Oracles for routes and runs, written here independently of ``Graph.order``: the nodes a
root needs (a depth-first walk over inputs and ordering edges), and the emission order of
the builder, which pushes every node after its inputs, so that the execution order (a
topological order, ties by emission position) of a graph built that way is its node ids
sorted.
"""
from __future__ import annotations

import itertools

import pytest

from sequant_eval.runtime.graph import Device, Op
from sequant_eval.runtime.gpu.passes import cse, insert_copies, order_inplace, simplify
from sequant_eval.runtime.gpu.placement import (ConvergenceOptimizer, Context, Machine,
                                                PlacementForkPathfinder, gpu_live_peak, place,
                                                run_lockstep)
from sequant_eval.runtime.gpu.runs import (branch_density, device_alternating_order,
                                           extract_runs, lower_picked_route,
                                           lower_picked_route_streaming, lower_runs_arm0,
                                           passes_fewness_gate)

from .graphs import Builder

CPU, GPU = Device.CPU, Device.GPU


def needed(g, roots, skip_branches: bool = True) -> set[int]:
    """Every node the roots need: inputs and ordering edges, walked depth-first."""
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack += list(g.nodes[n].inputs) + list(g.after.get(n, ()))
    return {n for n in seen if not (skip_branches and g.nodes[n].op is Op.BRANCH)}


def is_topological(g, order) -> bool:
    pos = {n: k for k, n in enumerate(order)}
    return len(pos) == len(order) and all(
        pos[i] < pos[n] for n in order for i in g.nodes[n].inputs if i in pos)


# -- runs ----------------------------------------------------------------------------------


def test_straight_chain_is_one_run_and_leaves_do_not_split_it():
    b = Builder()
    root = b.chain(5, CPU)
    (run,) = extract_runs(b.g, [root])
    assert run.exit == root and run.device is CPU
    assert list(run.members) == sorted(needed(b.g, [root]))     # all 11 nodes, emission order
    assert len(run.members) == 17 and b.g.nodes[run.entry].op is Op.CONTRACT   # 6 leaves x 2


def test_fan_in_starts_a_run():
    b = Builder()
    x, y = b.chain(2, CPU), b.chain(2, CPU)
    join = b.contract(x, y, CPU)
    runs = extract_runs(b.g, [join])
    assert len(runs) == 3 and runs[-1].entry == join


def test_cpu_gpu_cpu_gives_three_runs_and_exactly_two_copies():
    b = Builder()
    x = b.contract(b.leaf(), b.leaf(), CPU)
    y = b.contract(x, b.leaf(), GPU)
    y = b.contract(y, b.leaf(), GPU)
    z = b.contract(y, b.leaf(), CPU)
    roots = insert_copies(b.g, [z])
    order = b.g.order(roots)
    copies = [n for n in order if b.g.nodes[n].op is Op.COPY]
    assert len(copies) == 2
    runs = extract_runs(b.g, roots)
    compute = [r.device for r in runs if b.g.nodes[r.entry].op is not Op.COPY]
    assert compute == [CPU, GPU, CPU]
    assert len(runs) == 5                                   # 3 compute runs + 2 copy steps
    size = len(b.g)
    assert insert_copies(b.g, roots) == roots and len(b.g) == size      # idempotent


def test_branchless_route_is_the_topological_order():
    b = Builder()
    x, y = b.chain(3, CPU), b.chain(2, CPU)
    root = b.contract(x, y, CPU)
    route = lower_picked_route(b.g, [root])
    assert route == sorted(needed(b.g, [root])) == lower_runs_arm0(b.g, [root])
    assert is_topological(b.g, route)


def _two_diamonds():
    b = Builder()
    _, a0, a1, m = b.diamond(b.chain(1, CPU), CPU)
    _, c0, c1, m2 = b.diamond(m, CPU)
    root = b.contract(m2, b.leaf(), CPU)
    return b, root, [(a0, a1), (c0, c1)]


def test_route_follows_the_picked_arm_and_skips_the_other():
    b, root, arms = _two_diamonds()
    branches = sorted(b.g.branches)
    arm0 = lower_runs_arm0(b.g, [root])
    assert arms[0][0] in arm0 and arms[0][1] not in arm0
    picked = lower_picked_route(b.g, [root], {branches[0]: 1})
    assert arms[0][1] in picked and arms[0][0] not in picked
    def only(arm: int) -> set[int]:           # what an arm needs beyond its diverge node
        return needed(b.g, [arm]) - needed(b.g, [b.g.nodes[arm].inputs[0]])

    assert arm0 == sorted(needed(b.g, [root]))             # the merges read arm 0
    assert set(picked) == set(arm0) - only(arms[0][0]) | only(arms[0][1])
    assert len(only(arms[0][0])) == 3                     # the arm and its leaf's two nodes
    assert is_topological(b.g, arm0) and is_topological(b.g, picked)
    assert lower_picked_route(b.g, [root], {branches[0]: 99}) == arm0    # clamped to arm 0


@pytest.mark.parametrize("picks", list(itertools.product([0, 1], repeat=2)))
def test_streaming_equals_one_shot(picks):
    b, root, _ = _two_diamonds()
    branches = sorted(b.g.branches)
    chosen = dict(zip(branches, picks))
    calls = []

    def resolve(branch):
        calls.append(branch)
        return chosen[branch]

    assert lower_picked_route_streaming(b.g, [root], resolve) == \
        lower_picked_route(b.g, [root], chosen)
    assert calls == branches                     # once each, upstream first


def test_fewness_gate():
    b = Builder()
    _, _, _, m = b.diamond(b.chain(40, CPU), CPU)
    root = b.contract(m, b.leaf(), CPU)
    assert branch_density(b.g, [root]) < 0.05 and passes_fewness_gate(b.g, [root])
    b = Builder()
    x = b.chain(1, CPU)
    for _ in range(12):
        x = b.diamond(x, CPU)[3]
    assert not passes_fewness_gate(b.g, [x])


def test_device_alternating_order_single_device_is_identity():
    b = Builder()
    root = b.contract(b.chain(2, CPU), b.chain(2, CPU), CPU)
    runs = extract_runs(b.g, [root])
    assert device_alternating_order(b.g, runs) == list(range(len(runs)))


def test_device_alternating_order_is_a_valid_reordering():
    b = Builder()
    gpu = b.chain(6, GPU)
    cpu = b.chain(1, CPU)
    root = b.contract(gpu, cpu, CPU)
    roots = insert_copies(b.g, [root])
    runs = extract_runs(b.g, roots)
    perm = device_alternating_order(b.g, runs)
    order = [n for k in perm for n in runs[k].members]
    assert sorted(order) == sorted(b.g.order(roots))
    pos = {n: k for k, n in enumerate(order)}
    assert all(pos[i] < pos[n] for n in order for i in b.g.nodes[n].inputs if i in pos)
    assert runs[perm[0]].device is GPU          # the heavy GPU chain is enqueued first


# -- passes --------------------------------------------------------------------------------


def test_cse_folds_identical_contractions_but_not_swapped_operands_or_slices():
    b = Builder()
    x, y = b.leaf(), b.leaf()
    p, q = b.contract(x, y), b.contract(x, y)             # identical: folds
    r = b.contract(y, x)                                   # swapped operands: kept
    s1 = b.add(Op.SLICE, (b.g.nodes[x].inputs[0],), ((None, None),))   # refetch: kept
    root = b.add(Op.ACCUMULATE, (b.add(Op.ZEROS), p), (1.0,))
    root = b.add(Op.ACCUMULATE, (root, q), (1.0,))
    root = b.add(Op.ACCUMULATE, (root, r), (1.0,))
    root = b.add(Op.ACCUMULATE, (root, b.contract(s1, y)), (1.0,))
    (new,) = cse(b.g, [root])
    order = b.g.order([new])
    contracts = [n for n in order if b.g.nodes[n].op is Op.CONTRACT]
    assert len(contracts) == 3                             # p≡q folded; r and s1·y stay
    size = len(b.g)
    assert cse(b.g, [new]) == [new] and len(b.g) == size   # idempotent


def test_simplify_rules_and_controls():
    b = Builder()
    x = b.contract(b.leaf(), b.leaf())
    one = b.add(Op.SCALE, (x,), (1.0,))                    # removed
    two = b.add(Op.SCALE, (one,), (2.0,))                  # kept
    ident = b.add(Op.PERMUTE, (two,), ((0, 1),))           # removed
    p1 = b.add(Op.PERMUTE, (ident,), ((1, 0),))
    p2 = b.add(Op.PERMUTE, (p1,), ((1, 0),))               # p1∘p2 = identity: removed
    swap = b.add(Op.PERMUTE, (p2,), ((1, 0),))             # kept (a real transpose)
    r1 = b.add(Op.RESHAPE, (swap,), ((16,),), shape=(16,))
    r2 = b.add(Op.RESHAPE, (r1,), ((2, 8),), shape=(2, 8))  # reshape of reshape: one reshape
    (new,) = simplify(b.g, [r2])
    ops = [b.g.nodes[n].op for n in b.g.order([new])]
    assert ops.count(Op.SCALE) == 1 and ops.count(Op.PERMUTE) == 1 and ops.count(Op.RESHAPE) == 1
    assert b.g.nodes[b.g.nodes[new].inputs[0]].op is Op.PERMUTE
    size = len(b.g)
    assert simplify(b.g, [new]) == [new] and len(b.g) == size


def test_order_inplace_adds_edges_only_for_other_readers():
    b = Builder()
    acc = b.add(Op.ZEROS)
    x = b.contract(b.leaf(), b.leaf())
    reader = b.contract(acc, x)                            # reads the accumulator's old value
    upd = b.add(Op.ACCUMULATE, (acc, x), (1.0,))
    root = b.contract(upd, reader)
    order_inplace(b.g, [root])
    assert reader in b.g.after[upd]                        # positive: the reader goes first
    assert not b.g.after.get(reader)                       # negative: nothing else ordered
    before = {k: set(v) for k, v in b.g.after.items()}
    order_inplace(b.g, [root])
    assert {k: set(v) for k, v in b.g.after.items()} == before     # idempotent
    order = b.g.order([root])
    assert order.index(reader) < order.index(upd)


def test_insert_copies_dedups_per_producer_and_target():
    b = Builder()
    x = b.contract(b.leaf(), b.leaf(), CPU)
    same = b.contract(x, b.leaf(), CPU)                    # negative control: no copy
    g1 = b.contract(x, b.leaf(), GPU)
    g2 = b.contract(x, b.leaf(), GPU)                      # same producer, same target
    root = b.contract(b.contract(g1, g2, GPU), same, CPU)
    roots = insert_copies(b.g, [root])
    copies = [n for n in b.g.order(roots) if b.g.nodes[n].op is Op.COPY]
    assert len(copies) == 2                                # x → gpu once, (g1·g2) → cpu once
    size = len(b.g)
    assert insert_copies(b.g, roots) == roots and len(b.g) == size


# -- placement -----------------------------------------------------------------------------


def test_tiny_contractions_stay_on_the_cpu():
    b = Builder()
    root = b.chain(4)
    place(b.g, [root], Machine(gpu=True))
    assert all(b.g.device[n] is CPU for n in b.g.order([root])
               if b.g.nodes[n].op is Op.CONTRACT)


def test_a_large_gemm_chain_goes_to_the_gpu():
    b = Builder()
    x = b.add(Op.SLICE, (b.add(Op.INPUT, params=(0,), shape=(2000, 2000)),),
              ((None, None),), shape=(2000, 2000))
    for _ in range(6):
        w = b.add(Op.SLICE, (b.add(Op.INPUT, params=(1,), shape=(2000, 2000)),),
                  ((None, None),), shape=(2000, 2000))
        x = b.add(Op.CONTRACT, (x, w), (0, 2 * 2000.0**3), shape=(2000, 2000))
    place(b.g, [x], Machine(gpu=True))
    contracts = [n for n in b.g.order([x]) if b.g.nodes[n].op is Op.CONTRACT]
    assert all(b.g.device[n] is GPU for n in contracts)
    # by hand: one GEMM's operand and result (2000 x 2000 float64 each) live on the GPU at
    # once; the inputs are host slices, not GPU buffers
    assert gpu_live_peak(b.g, [x]) == 2 * 2000 * 2000 * 8
    b2 = Builder()           # the same chain with a GPU budget below its need: CPU
    b2.g.nodes, b2.g.device = list(b.g.nodes), {}
    place(b2.g, [x], Machine(gpu=True, gpu_budget=1e6))
    assert all(b2.g.device[n] is CPU for n in contracts)


def test_no_gpu_means_cpu_everywhere():
    b = Builder()
    root = b.chain(3)
    place(b.g, [root], Machine(gpu=False))
    assert {b.g.device[n] for n in b.g.order([root])} == {CPU}


def test_lockstep_forks_near_equal_runs_and_optimizer_never_strands():
    b = Builder()
    root = b.contract(b.chain(3, CPU), b.chain(1, CPU), CPU)    # two feeder runs and a join
    log: list = []
    even = Context(Machine(gpu=True), tolerance=1e9)          # every run counts as near-equal
    place(b.g, [root], Machine(gpu=True))
    run_lockstep(b.g, [root], even, [PlacementForkPathfinder()], [ConvergenceOptimizer()], log)
    assert log == [("propose", "PlacementForkPathfinder"), ("prune", "ConvergenceOptimizer")]
    assert b.g.branches
    (branch,) = list(b.g.branches)[:1]
    arms = b.g.nodes[branch].inputs
    assert b.g.device[arms[0]] is CPU and b.g.device[arms[1]] is GPU     # arm 0 = winner
    ConvergenceOptimizer().prune(b.g, [root], Context(Machine(gpu=False)))
    assert not b.g.branches                                  # GPU arm dropped, CPU arm kept
    route = lower_runs_arm0(b.g, [root])
    cpu_only = {n for n in needed(b.g, [root]) if b.g.device.get(n) is not GPU}
    assert cpu_only <= set(route) and is_topological(b.g, route)   # the CPU arm still runs


def test_a_pruned_gpu_arm_is_not_routed():
    """After ConvergenceOptimizer drops the GPU arms for a machine without a GPU, no GPU
    node is left on the route. Oracle: the devices placed on the graph."""
    b = Builder()
    root = b.contract(b.chain(3, CPU), b.chain(1, CPU), CPU)
    place(b.g, [root], Machine(gpu=True))
    run_lockstep(b.g, [root], Context(Machine(gpu=True), tolerance=1e9),
                 [PlacementForkPathfinder()], [ConvergenceOptimizer()], [])
    ConvergenceOptimizer().prune(b.g, [root], Context(Machine(gpu=False)))
    route = lower_runs_arm0(b.g, [root])
    assert [n for n in route if b.g.device.get(n) is GPU] == []


def test_route_picker_takes_the_cpu_arm_without_a_gpu_or_memory():
    from sequant_eval.runtime.gpu.placed import RoutePicker

    b = Builder()
    _, a0, a1, m = b.diamond(b.chain(1, CPU))
    b.g.device.update({a0: GPU, a1: CPU})
    (branch,) = list(b.g.branches)
    assert RoutePicker(b.g, gpu=True)(branch) == 0
    assert RoutePicker(b.g, gpu=False)(branch) == 1
    assert RoutePicker(b.g, gpu=True, free_gpu_bytes=10.0)(branch) == 1
