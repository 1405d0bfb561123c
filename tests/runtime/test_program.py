"""The loop program: its size does not depend on the number of batches, it runs exactly as
the unrolled op graph does, and the first evaluation — program build included — stays
within the prediction and the budget.

Oracles: the unrolled op graph (``lower_schedule``, run by the graph executor ``run_graph``)
for values, meters and builds; ``tracemalloc`` for memory (NumPy registers its buffers);
the batch counts from the loops themselves.
"""
from __future__ import annotations

import gc
import random
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.backends import get_backend
from sequant_eval.runtime.engine import run_graph
from sequant_eval.runtime.graph import Device
from sequant_eval.runtime.interpreter import _tables
from sequant_eval.runtime.lower import lower_schedule
from sequant_eval.runtime.program import PLAN_BYTES, PROGRAM_BYTES_PER_NODE

from tests.oracles.spin_orbital import (EXT, block_mappings, random_arrays, refill_tuple_cache,
                                       traced_peak)
from tests.properties.forests import equation_sets


def _unrolled(program, source):
    """The same schedule unrolled batch by batch (no rewriting passes) and run by the
    graph executor."""
    low = lower_schedule(program.analysis)
    out, meter = run_graph(low.graph, low.root_nodes(), program.forest,
                           {Device.CPU: get_backend("numpy")}, source, None, None, low.form_of)
    return {name: out[n] for name, n in low.roots.items()}, meter, len(low.graph)


@pytest.fixture(scope="module")
def arrays():
    return random_arrays(3)


@pytest.fixture(scope="module")
def top():
    return se.analyze(ccsd_equations(), EXT).peak_bytes


@pytest.mark.parametrize("share", [0.5, 0.1])
def test_program_runs_as_the_unrolled_graph(arrays, top, share):
    """Same ops in the same order: bitwise the same results, the same metered peak (= the
    static prediction), flops and builds per form — while the unrolled graph has many
    times the program's nodes at 10 % (84 loops) and the program about as many as at 50 %."""
    ev = se.Evaluator(ccsd_equations(), EXT, budget=share * top)
    program = ev.batched
    source = TensorSource(ev.forest, arrays, EXT)
    out, meter = program.run("numpy", source)
    ref, ref_meter, unrolled_nodes = _unrolled(program, source)
    for name in ref:
        assert np.array_equal(out[name], ref[name]), name
    assert meter.peak_bytes == ref_meter.peak_bytes == program.analysis.peak_bytes
    assert meter.flops == ref_meter.flops
    assert meter.builds == ref_meter.builds
    nodes = program.program().nodes
    batches = max(np.prod([program.sched.loops[l].nbatches for l in f.scope])
                  for f in program.sched.forms)
    if share == 0.1:
        assert batches >= 16 and unrolled_nodes > 10 * nodes
    assert nodes < 500


def test_program_size_does_not_depend_on_the_batch_count():
    """One schedule shape, blocks of 2 or of 19 virtual orbitals (19 or 2 batches per loop):
    the program has the same nodes; the unrolled graph grows with the batches."""
    text = "R{a_1,a_2;i_1,i_2} = g{a_1,a_2;a_3,a_4} * t{a_3,a_4;i_1,i_2}"
    ext = {"i": 4, "a": 38}
    sizes = {}
    for block in (2, 19):
        policy = se.BatchPolicy(budget=12e6, contracted=("a",), block={"a": block},
                                max_loops=1, program=False)
        ev = se.Evaluator(text, ext, policy=policy)
        program = ev.batched
        loops = program.sched.loops
        assert loops and all(lp.nbatches == 38 // block for lp in loops.values())
        sizes[block] = (program.program().nodes, len(lower_schedule(program.analysis).graph),
                        tuple((lp.space, lp.kind) for lp in loops.values()))
    assert sizes[2][2] == sizes[19][2]                     # the same loops
    assert sizes[2][0] == sizes[19][0]                     # the same program
    assert sizes[2][1] > 5 * sizes[19][1]                  # the unrolled graph grows
    # g{a,a;a,a} (16.7 MB) cannot be held whole: the contracted a_3 loop reads it per batch


CASES = equation_sets(max_terms=5, max_factors=5)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(CASES, st.floats(0.05, 0.9), st.integers(1, 3), st.integers(0, 2**16))
def test_random_forests_run_as_the_unrolled_graph(case, position, block, seed):
    """Random forests at random budgets (arrays only: ``program=False``, the forests are a
    few hundred bytes): the program's results equal the unrolled graph's bitwise, its meter
    equals the static prediction and the unrolled meter. About two thirds of the examples
    run batched (``event`` counts them); the rest check the loop-free path."""
    text, extents = case
    top = se.analyze(text, extents).peak_bytes
    policy = se.BatchPolicy.everything(max(1.0, position * top), extents,
                                       block={s: block for s in extents}, program=False)
    ev = se.Evaluator(text, extents, policy=policy)
    try:
        program = ev.batched
    except se.InfeasibleBudget as err:
        ev = se.Evaluator(text, extents, policy=replace(policy, budget=err.minimum))
        program = ev.batched
    event("batched" if program.sched.loops else "no loop")
    rng = np.random.default_rng(seed)
    tensors = {}
    for v in ev.forest.values:
        if v.tensor is not None and v.tensor not in tensors:
            tensors[v.tensor] = {v.spaces: rng.standard_normal(
                tuple(extents[s] for s in v.spaces))}
        elif v.tensor is not None:
            tensors[v.tensor].setdefault(v.spaces, rng.standard_normal(
                tuple(extents[s] for s in v.spaces)))
    source = TensorSource(ev.forest, tensors, extents)
    out, meter = program.run("numpy", source)
    ref, ref_meter, _ = _unrolled(program, source)
    _, dry = program.run("dryrun")
    for name in ref:
        assert np.array_equal(out[name], ref[name]), name
    assert meter.peak_bytes == ref_meter.peak_bytes == dry.peak_bytes == \
        program.analysis.peak_bytes
    assert meter.flops == ref_meter.flops == dry.flops


# -- memory: the first evaluation, program build included ------------------------------------


def _shuffled():
    """The packaged CCSD with its terms shuffled: mirror terms far apart in the text."""
    rng = random.Random(7)
    out = []
    for eq in ccsd_equations():
        terms = list(eq.terms)
        rng.shuffle(terms)
        out.append(replace(eq, terms=tuple(terms)))
    return out


def _first_traced(ev, tensors) -> int:
    """Traced peak of the first evaluation: the program is built and the kernel plans
    made inside it; planning (``ev.batched``) is done before. CPython's tuple free lists
    are refilled first (``gc.collect`` empties them; the evaluation's small tuples would
    refill them inside the trace, ~0.3 MB of the interpreter's cache, not the evaluation's
    — see ``test_real_memory.test_traced_peak_at_ten_percent_in_a_fresh_process``)."""
    program = ev.batched
    program._programs.clear()                 # built inside the trace, as a first run
    gc.collect()
    return traced_peak(lambda: ev.evaluate(tensors))[1]


@pytest.fixture(scope="module")
def h5(arrays, tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    path = tmp_path_factory.mktemp("h5") / "ints.h5"
    with h5py.File(path, "w") as f:
        for name, a in arrays.items():
            f[name] = a
    with h5py.File(path, "r") as f:
        yield {k: f[k] for k in arrays}


@pytest.mark.parametrize("equations", ["packaged", "mirror terms far apart"])
@pytest.mark.parametrize("kind", [
    "full arrays",
    # slow: their second evaluations at 10 % are traced every run (test_real_memory)
    pytest.param("block mappings", marks=pytest.mark.slow),
    pytest.param("h5py datasets", marks=pytest.mark.slow)])
def test_first_evaluation_at_ten_percent_is_within_the_prediction(arrays, h5, top, equations,
                                                                  kind):
    """At 10 % of the unbatched peak the arrays and the program's reserve together fit the
    budget, and what the first evaluation allocates (program, kernel plans and arrays)
    stays within 1.05x of their sum."""
    eqs = ccsd_equations() if equations == "packaged" else _shuffled()
    budget = 0.1 * top
    ev = se.Evaluator(eqs, EXT, budget=budget)
    report = ev.analyze()
    assert report.program_bytes > 0
    assert report.total_bytes <= budget
    tensors = {"full arrays": arrays, "block mappings": block_mappings(arrays, ev.forest),
               "h5py datasets": h5}[kind]
    traced = _first_traced(ev, tensors)
    assert ev.last_meter.peak_bytes == report.peak_bytes
    assert traced <= 1.05 * report.total_bytes, (traced, report.peak_bytes,
                                                 report.program_bytes)


def _program_bytes(ev) -> tuple[int, int]:
    """Traced bytes of building the loop program and the executor's tables, and nodes
    (the tuple free lists refilled first: the tuples the build frees are not held)."""
    program = ev.batched
    program._programs.clear()
    gc.collect()
    refill_tuple_cache()
    tracemalloc.start()
    prog = program.program()
    _tables(prog)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return size, prog.nodes


def test_program_bytes_hardly_grow_as_the_budget_shrinks(top):
    """The program at 10 % (54 loops) holds at most 1.2x what it holds at 50 % (2 loops):
    it grows with the loops it has (blocks, destinations, the symbolic shapes and ranges of
    sliced nodes; measured 1.19x: 136 against 114 KiB; 1.23x while a node's tag repeated
    the loops of the block around it and an add into a sum named its target and entry,
    which its input and parameters already say; 1.29x while block bodies kept the lists
    they were built in and a destination repeated its shape as a parameter; 1.39x when
    symbolic values named the loop rather than its depth, so sibling loops shared no
    tuple), never with the batches they run (the unrolled graph of the 84-loop schedule:
    6.6 MiB against 0.15). Each node stays within the per-node bound the reserve charges."""
    small, small_nodes = _program_bytes(se.Evaluator(ccsd_equations(), EXT, budget=0.1 * top))
    half, half_nodes = _program_bytes(se.Evaluator(ccsd_equations(), EXT, budget=0.5 * top))
    assert small <= 1.2 * half, (small, half)
    assert small <= PROGRAM_BYTES_PER_NODE * small_nodes
    assert half <= PROGRAM_BYTES_PER_NODE * half_nodes


def test_nothing_of_an_evaluation_outlives_its_results(arrays, top):
    """With the garbage collector off, the arrays an evaluation made, and its inputs, are
    freed as soon as the caller drops them: no reference cycle (a recursive walk's
    closure) holds them until a collection that, in a loop of evaluations with no
    planning between them, may not come before the next evaluation peaks (seen as one extra o³v³
    array in the second of two (T) evaluations). The evaluator's last meter and kernel
    plans are kept on purpose; they hold no array buffers."""
    ev = se.Evaluator(ccsd_equations(), EXT, budget=0.1 * top)
    ev.evaluate(arrays)                         # the program and kernel plans made
    gc.collect()
    gc.disable()
    arrays_only = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    try:
        tracemalloc.start()
        before = tracemalloc.take_snapshot().filter_traces(arrays_only)
        given = {name: np.array(x) for name, x in arrays.items()}    # inputs of its own
        out = ev.evaluate(given)
        made = sum(x.nbytes for x in out.values())
        del out, given
        after = tracemalloc.take_snapshot().filter_traces(arrays_only)
        tracemalloc.stop()
    finally:
        gc.enable()
    left = sum(st.size_diff for st in after.compare_to(before, "filename"))
    assert made > 1_000_000
    assert left < 0.01 * made, (left, made)    # array buffers (NumPy's domain) only


def test_kernel_plans_stay_within_their_share(arrays, top):
    """The NumPy backend keeps each contraction's first plan and at most the program's
    plan cap more (one per contraction), however many batch shapes the loops make: two
    per contraction, each within ``PLAN_BYTES`` (measured by making the held plans again
    in a fresh backend); a short batch's plan, made from the first one's grouping, gives
    the unbatched evaluation's numbers (1e-12)."""
    ev = se.Evaluator(ccsd_equations(), EXT, budget=0.1 * top)
    out = ev.evaluate(arrays)
    program = ev.batched
    backend = program._backends["numpy"]
    prog = program.program()
    assert len(backend.plans) == prog.plan_cap            # more shapes than the cap: full
    assert len(backend.first) <= prog.contractions
    held = list(backend.plans)                            # keys (value, a, b, out, layout)
    fresh = get_backend("numpy")
    gc.collect()
    tracemalloc.start()
    for vid, a, b, res, layout in held:
        fresh.contract(program.forest.values, vid, np.zeros(a), np.zeros(b), res, layout)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    plans = {id(p) for p in list(fresh.plans.values()) + list(fresh.first.values())}
    assert size <= PLAN_BYTES * len(plans), size / len(plans)
    ref = se.evaluate(ccsd_equations(), arrays, EXT)
    for name in ref:
        assert np.abs(out[name] - ref[name]).max() <= 1e-12 * np.abs(ref[name]).max(), name


def test_a_streamed_leaf_is_a_loop_of_the_program_not_a_node_pair_per_chunk():
    """A leaf entry of a sum is read into it chunk by chunk (``stream_rows`` rows a
    pass). The chunks were unrolled in the loop program, a slice and an add each, so the
    program grew with the data (``R2 = g - 1/2 g``: 202 nodes at a = 300, 300,002 at
    a = 100,000, whose reserve of 229 MiB made a 1 MB budget's refusal take seconds, and
    minutes at a = 10**7). Now they are one block run once per chunk: the same nodes at
    every size. Oracles: NumPy for the values, the prediction for the meter."""
    text = "R2{a_1,a_2;i_1,i_2} = g{a_1,a_2;i_1,i_2} - 1/2 g{a_2,a_1;i_1,i_2}"
    nodes = {a: se.Evaluator(text, {"i": 4, "a": a}, budget="1 TB").batched.program().nodes
             for a in (300, 3000, 30000)}
    assert len(set(nodes.values())) == 1, nodes
    ev = se.Evaluator(text, {"i": 4, "a": 300}, budget="1 TB")
    assert "loop rows of" in ev.batched.program().dump()
    g = np.random.default_rng(3).random((300, 300, 4, 4))
    got = ev.evaluate({"g": g})["R2"]
    assert np.abs(got - (g - 0.5 * g.transpose(1, 0, 2, 3))).max() <= 1e-12
    assert ev.last_meter.peak_bytes == ev.analyze().peak_bytes
    with pytest.raises(se.InfeasibleBudget) as info:
        se.analyze(text, {"i": 4, "a": 10 ** 7}, budget="1MB")
    import re
    reserve = int(re.search(r"\((\d+) B\) is the program itself", str(info.value)).group(1))
    assert reserve < 100_000, reserve               # 68.7 KiB (229 MiB at a = 10**5 before)


def test_an_unbatched_evaluator_lowers_its_program_once(arrays, monkeypatch):
    """The reserve a budget would charge (``program_reserve``, read by the CC methods'
    ``max_memory`` check) is measured on the unbatched program, which is also what an
    unbatched evaluator runs: one lowering serves both (7-10 ms of a cold H2O CCSD run).
    The reserve equals the bound of a lowering made apart, and the values the unbatched
    walk of a fresh evaluator (1e-12)."""
    from sequant_eval.api import evaluator
    from sequant_eval.runtime import compiled, lower
    from sequant_eval.runtime.program import reserve_bound

    monkeypatch.setattr(evaluator, "_UNBATCHED", {})        # nothing from earlier tests
    lowered = []
    real = lower.lower_program
    monkeypatch.setattr(compiled, "lower_program", lambda *a: lowered.append(a) or real(*a))
    monkeypatch.setattr(lower, "lower_program", lambda *a: lowered.append(a) or real(*a))
    ev = se.Evaluator(ccsd_equations(), EXT)
    ev.analyze()
    reserve = ev.program_reserve()
    out = ev.evaluate(arrays)
    assert len(lowered) == 1
    assert reserve == reserve_bound(real(ev.batched.analysis))
    ref = se.Evaluator(ccsd_equations(), EXT).evaluate(arrays)
    for name in ref:
        assert np.abs(out[name] - ref[name]).max() <= 1e-12 * np.abs(ref[name]).max(), name
