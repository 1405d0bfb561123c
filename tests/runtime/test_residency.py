"""Residency under a device budget (``runtime/gpu/residency.py``): idle values evicted to the
host after their last read before a gap and reloaded before their next reader.

Oracles: the NumPy run of the same forest (results), the strict device stand-in's own
byte count (``StrictDevice.peak_bytes``: what the "device" really held), and, for the
small graph, the eviction worked out by hand in its docstring.
"""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.errors import InfeasibleBudget, SequantEvalError
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.graph import Device, Op
from sequant_eval.runtime.gpu.placed import Placed
from sequant_eval.runtime.gpu.placement import Machine, gpu_profile
from sequant_eval.runtime.gpu.residency import ResidencyInfeasible, fit_residency
from sequant_eval.runtime.gpu.runs import lower_runs_arm0

from tests.runtime.graphs import Builder

CPU, GPU = Device.CPU, Device.GPU


# -- the hand-built graph --------------------------------------------------------------------


def _gap_graph(leaf: bool = False):
    """A used at X (step "1") and at Y (step "5"); B big, C made from B in between.

    Leaves are host slices (not device bytes); every contraction runs on the GPU. Bytes:
    A 800, X 8, B 3200, C 800, Y 800, Z 800. Device bytes along the route:
    A 800 · X 808 · B 4008 · C 4808 (B released) → 1608 · Y 2408 → 808 · Z 1608.
    Peak 4808 at C, where A (800) and X (8) are idle; C's own working set is B + C = 4000.
    """
    b = Builder()
    if leaf:                                     # A a device copy of a host leaf batch
        sl = b.add(Op.SLICE, (b.add(Op.INPUT, params=(0,), shape=(10, 10)),),
                   ((None, None),), (10, 10), CPU)
        a = b.add(Op.COPY, (sl,), (GPU.value,), (10, 10), GPU)
    else:
        a = b.add(Op.CONTRACT, (b.leaf(), b.leaf()), (0, 1e6), (10, 10), GPU)
    x = b.add(Op.CONTRACT, (a, b.leaf()), (0, 1e6), (1,), GPU)
    big = b.add(Op.CONTRACT, (b.leaf(), b.leaf()), (0, 1e9), (20, 20), GPU)
    c = b.add(Op.CONTRACT, (big, b.leaf()), (0, 1e9), (10, 10), GPU)
    y = b.add(Op.CONTRACT, (a, c), (0, 1e6), (10, 10), GPU)
    z = b.add(Op.CONTRACT, (x, y), (0, 1e6), (10, 10), GPU)
    return b.g, dict(a=a, x=x, big=big, c=c, y=y, z=z)


def test_the_hand_worked_eviction():
    """Budget 4100 B: only C's step binds (4808). Evicting A there leaves 4008 ≤ 4100;
    evicting X (8 B) would not do, and by the cost model A is the cheaper per byte (the
    transfer's latency spread over 100× the bytes; both round trips hide behind B and C's
    10⁹-flop contractions). So exactly one eviction and one reload: a copy of A to the host
    right after X (its last read before the gap) and before C, a copy back after C and
    before Y, which now reads the reload. Peak after: A 800 · X 808 · (A out) 8 · B 3208 ·
    C 4008 · 808 · reload 1608 · Y 2408 · … = 4008."""
    g, n = _gap_graph()
    roots = [n["z"]]
    assert gpu_profile(g, roots, lower_runs_arm0(g, roots)).peak == 4808
    res = fit_residency(g, roots, Machine(gpu=True, gpu_budget=4100))
    assert (res.evictions, res.reloads, res.count("copy")) == (1, 1, 1)
    (move,) = res.moves
    assert move.value == n["a"] and move.nbytes == 800
    out, back = g.nodes[move.out], g.nodes[move.back]
    assert out.op is Op.COPY and out.inputs == (n["a"],) and g.device[move.out] is CPU
    assert back.op is Op.COPY and back.inputs == (move.out,) and g.device[move.back] is GPU
    assert g.nodes[n["y"]].inputs == (move.back, n["c"])            # Y reads the reload
    order = lower_runs_arm0(g, roots)
    pos = {m: k for k, m in enumerate(order)}
    assert pos[n["x"]] < pos[move.out] < pos[n["big"]] < pos[n["c"]] < pos[move.back] \
        < pos[n["y"]]
    assert res.peak == gpu_profile(g, roots, order).peak == 4008
    assert "1 evictions (1 copied out" in res.dump()


def test_a_leaf_batch_is_fetched_again_rather_than_copied_out():
    """The same graph with A a device copy of a host leaf batch: fetching the batch again
    (one transfer and a host slice: 1.12e-5 s by the priors) beats a round trip
    (2 × 1.004e-5 s), so A is dropped after X and a fresh slice is copied over before Y."""
    g, n = _gap_graph(leaf=True)
    res = fit_residency(g, [n["z"]], Machine(gpu=True, gpu_budget=4100))
    (move,) = res.moves
    assert (move.kind, move.value, move.out) == ("refetch", n["a"], None)
    back = g.nodes[move.back]
    assert back.op is Op.COPY and g.device[move.back] is GPU
    fresh = g.nodes[back.inputs[0]]
    assert fresh.op is Op.SLICE and fresh.inputs == g.nodes[g.nodes[n["a"]].inputs[0]].inputs
    assert g.nodes[n["y"]].inputs[0] == move.back and res.peak == 4008


def test_a_budget_below_the_working_set_is_refused():
    """Budget 3900 B: after A and X leave, C's step still holds B + C = 4000 B, nothing of
    it idle: a typed refusal naming the step and the way out."""
    g, n = _gap_graph()
    with pytest.raises(ResidencyInfeasible, match=rf"n{n['c']} contract.*raise gpu_budget") \
            as info:
        fit_residency(g, [n["z"]], Machine(gpu=True, gpu_budget=3900))
    assert isinstance(info.value, InfeasibleBudget) and isinstance(info.value, SequantEvalError)
    assert info.value.budget == 3900 and info.value.minimum == 4000


def test_nothing_happens_when_the_budget_does_not_bind():
    """At or above the device peak (and with no GPU, or an infinite budget) the pass adds
    no node."""
    for machine in (Machine(gpu=True, gpu_budget=4808), Machine(gpu=True),
                    Machine(gpu=False, gpu_budget=100)):
        g, n = _gap_graph()
        size = len(g.nodes)
        res = fit_residency(g, [n["z"]], machine)
        assert res.evictions == 0 and len(g.nodes) == size


# -- placed CCSD on the strict device ----------------------------------------------------------


pyscf = pytest.importorskip("pyscf")


def _ccsd(budget: float = float("inf")):
    from sequant_eval.chem.equations import ccsd_equations

    from tests.runtime.test_two_devices import _fast_gpu, _water

    ints, tensors = _water()
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    placed = Placed(ev.batched)
    low, roots = placed.lowered(False, Machine(gpu=True, gpu_budget=budget, cost=_fast_gpu()))
    return ints, tensors, ev, placed, low, roots


def _device_peak(low, roots) -> float:
    return gpu_profile(low.graph, roots, lower_runs_arm0(low.graph, roots)).peak


def test_placed_ccsd_under_half_its_device_peak():
    """The packaged spin-orbital CCSD (water/6-31G, random amplitudes), placed on two
    devices with a fast GPU, under half the device peak it reaches without a budget.
    Oracles: the NumPy run (results, 1e-12 relative) and the strict device's own byte
    count (what the "device" held)."""
    from tests.runtime.test_two_devices import _run_strict

    *_, low0, roots0 = _ccsd()
    unplaced = _device_peak(low0, roots0)
    budget = unplaced / 2
    ints, tensors, ev, placed, low, roots = _ccsd(budget)
    res = placed.residency
    assert res.placed_peak == unplaced
    assert res.evictions > 0 and res.reloads == res.evictions
    assert res.peak <= budget and res.peak == _device_peak(low, roots)
    tags = [low.graph.nodes[n].tag for n in low.graph.order(roots)]
    assert sum(t.startswith("evict ") for t in tags) == res.count("copy")
    source, device, out, meter = _run_strict(ev, low, roots, tensors, ints)
    assert meter.device_peaks["gpu"] == res.peak          # the executor's accounting
    assert device.peak_bytes <= budget                     # what the device really held
    ref, _ = ev.batched.run("numpy", TensorSource(ev.forest, tensors, ints.extents))
    for name, node in low.roots.items():
        got = out[node]
        assert type(got) is np.ndarray
        assert np.abs(got - ref[name]).max() <= 1e-12 * max(1.0, np.abs(ref[name]).max())
    print(f"\nunplaced device peak {unplaced:.0f} B, budget {budget:.0f} B, predicted "
          f"{res.peak:.0f} B, measured {device.peak_bytes} B; {res.evictions} evictions, "
          f"{res.reloads} reloads, {res.waits} waits")


def test_placed_ccsd_adds_no_copy_when_the_budget_does_not_bind():
    """A budget at the device peak: the same graph as without a budget, node for node."""
    *_, low0, roots0 = _ccsd()
    *_, placed, low, roots = _ccsd(_device_peak(low0, roots0))
    assert placed.residency.evictions == 0
    assert low.graph.dump(roots) == low0.graph.dump(roots0)
