"""Batched execution overhead: one CCSD residual unbatched vs under 50 % and 25 % budgets.

Side by side in one process, for H2O/cc-pVDZ and (H2O)2/cc-pVDZ, at fixed amplitudes (the
MP2 guess, ``t1 = 0.01 · uniform(-1, 1)`` with a fixed seed, as in ``ccsd_iteration.py``):

* **unbatched** — ``se.Evaluator(ccsd_equations(), extents)``;
* **batched** — ``se.Evaluator(..., budget=frac · top)`` where ``top`` is the unbatched
  predicted peak (``se.analyze(...).peak_bytes``) and ``frac`` is 0.5 and 0.25.

Planning (the first access of ``Evaluator.batched``, which fits the schedule to the budget)
and lowering to the op graph are timed on their own, apart from evaluation. Every case is
warmed up once (which also fills the integral provider's block cache, so cached blocks are
never counted as evaluation memory), then timed best of ``--repeats``; the timed runs are
interleaved round-robin over the cases so that background load hits all of them alike.
Reported per case: time and the ratio to unbatched (target ≤ 1.15×), loops, flops and
recompute overhead, the predicted peak, the meter's accounted peak (must equal the
prediction), and the ``tracemalloc`` peak of one evaluation (NumPy reports its data buffers
to tracemalloc) as a ratio to the prediction (target ≤ 1.10×). The batched results must
equal the unbatched ones to 1e-12 (max |Δ| / max |ref| per equation).

tracemalloc sees only memory allocated during the evaluation; a contiguous batch slice of a
leaf is a view of the caller's block (no allocation) but a buffer to the meter. Instrumented
evaluations of the same op graph (:class:`TracingBackend`) therefore add the bytes of live
slice views to the traced level ("resident" peak), record for every backend call the
transient memory it allocated and freed again, and time every call; they say which
operations cause the excess over the prediction and the time over unbatched.

Run ``python benchmarks/batched_overhead.py [--repeats N] [--profile-runs N] [--write]``;
``--write`` replaces the section "Batched execution overhead" of ``docs/benchmarks.md``
(other sections are kept).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.chem.integrals import SpinOrbitalIntegrals
from sequant_eval.forest.values import ValueKind
from sequant_eval.runtime import Device, NumpyBackend, TensorSource, run_graph
from sequant_eval.runtime.gpu import Machine, Placed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ccsd_iteration import amplitudes, machine  # noqa: E402  (sibling benchmark)
from doc_section import write_section  # noqa: E402

SYSTEMS = {"water": "H2O/cc-pVDZ", "water_dimer": "(H2O)2/cc-pVDZ"}
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SECTION = "## Batched execution overhead"
FRACTIONS = (0.5, 0.25)
TOLERANCE = 1e-12          # batched vs unbatched, max |Δ| / max |ref| per equation
TIME_TARGET = 1.15         # batched / unbatched evaluation time
MEMORY_TARGET = 1.10       # tracemalloc peak / predicted peak
MIB = 1 << 20


@dataclass
class Trace:
    """An instrumented evaluation of one case: memory (under tracemalloc) and time per call.

    Bookkeeping is kept per distinct call, not per call, so that the tracer's own traced
    allocations stay negligible next to the arrays it measures.
    """

    resident_peak: int = 0           # traced + live slice views, transients included
    resident_at: str = ""            # the call during which it was reached
    held_peak: int = 0               # traced + live slice views between calls (no transients)
    transients: dict[tuple[str, str], int] = field(default_factory=dict)  # (op, call) -> max
    seconds: dict[str, float] = field(default_factory=dict)    # time per op / per contraction
    plans: dict[str, str] = field(default_factory=dict)        # contraction key -> plan dump
    total_s: float = 0.0

    def worst(self, n: int = 3) -> list[tuple[str, str, int]]:
        """The ``n`` largest transients: (op, call, bytes)."""
        top = sorted(self.transients.items(), key=lambda kv: -kv[1])[:n]
        return [(op, detail, b) for (op, detail), b in top if b > 0]

    def by_op(self) -> dict[str, int]:
        """Largest transient per backend operation."""
        out: dict[str, int] = {}
        for (op, _), b in self.transients.items():
            out[op] = max(out.get(op, 0), b)
        return out

    def op_seconds(self) -> dict[str, float]:
        """Time per backend operation (contractions summed), and the executor's own."""
        out: dict[str, float] = {}
        for key, s in self.seconds.items():
            op = key.split(" ", 1)[0]
            out[op] = out.get(op, 0.0) + s
        out["executor"] = self.total_s - sum(out.values())
        return out


def fastest(traces: list[Trace]) -> Trace:
    """Per key the least time over several timing runs (noise only ever adds)."""
    out = Trace(plans=traces[0].plans, total_s=min(t.total_s for t in traces))
    for key in {k for t in traces for k in t.seconds}:
        out.seconds[key] = min(t.seconds.get(key, 0.0) for t in traces)
    return out


@dataclass(frozen=True)
class Case:
    system: str
    label: str                       # "unbatched", "50 %", "25 %"
    budget: int | None
    plan_s: tuple[float, float]      # fitting the schedule, lowering it to the op graph
    eval_s: float
    unbatched_s: float
    loops: int
    flops: int
    recompute: float
    predicted: int
    metered: int
    traced: int
    rel_diff: dict[str, float]
    memory: Trace                    # instrumented run under tracemalloc
    timing: Trace                    # instrumented runs without it (least time per key)

    @property
    def ratio(self) -> float:
        return self.eval_s / self.unbatched_s

    @property
    def traced_ratio(self) -> float:
        return self.traced / self.predicted

    @property
    def resident_ratio(self) -> float:
        return self.memory.resident_peak / self.predicted

    @property
    def exact(self) -> bool:
        return self.metered == self.predicted and max(self.rel_diff.values()) <= TOLERANCE


def _owner(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


class TracingBackend(NumpyBackend):
    """The NumPy backend, timing every call and, while tracemalloc traces, metering it.

    Memory: tracemalloc's level before and after each call and its peak during the call
    give the call's transient (allocated and freed within it). ``resident`` are the arrays
    that own the caller's leaf memory (allocated before tracing). The meter counts every
    batch ``slice`` of an input as a buffer, but ``take`` of a contiguous slice is a view of
    the caller's block and allocates nothing; such a view is added at its ``nbytes`` while
    it is alive (a view object of our own per slice, released by a weakref finalizer).
    Whole input blocks are the caller's, and neither the meter nor this counts them.
    """

    def __init__(self, resident: list[np.ndarray]) -> None:
        super().__init__()
        self.resident = {id(a): a for a in resident}
        self.memory = tracemalloc.is_tracing()
        self.views = 0
        self.trace = Trace()

    def _drop(self, nbytes: int) -> None:
        self.views -= nbytes

    def _held(self, arr):
        if isinstance(arr, np.ndarray) and id(_owner(arr)) in self.resident:
            arr = arr[...]                       # a view object of our own, same memory
            self.views += arr.nbytes
            weakref.finalize(arr, self._drop, arr.nbytes)
        return arr

    def _call(self, key: str, detail, fn, *args):
        t = self.trace
        if self.memory:
            before = tracemalloc.get_traced_memory()[0]
            views = self.views
            tracemalloc.reset_peak()
        start = time.perf_counter()
        out = fn(*args)
        t.seconds[key] = t.seconds.get(key, 0.0) + time.perf_counter() - start
        if self.memory:
            after, peak = tracemalloc.get_traced_memory()
            op = key.split(" ", 1)[0]
            detail = detail() if callable(detail) else detail
            key2 = (op, detail)
            t.transients[key2] = max(t.transients.get(key2, 0), peak - max(before, after))
            t.held_peak = max(t.held_peak, before + views, after + self.views)
            resident = max(peak + views, after + self.views)
            if resident > t.resident_peak:
                t.resident_peak, t.resident_at = resident, f"{op} {detail}"
        return out

    def asarray(self, x):
        return self._call("input", "", super().asarray, x)

    def take(self, block, index, shape):
        out = self._call("take", f"{tuple(block.shape)} -> {tuple(shape)}", super().take,
                         block, index, shape)
        return self._held(out)

    def zeros(self, shape):
        return self._call("zeros", str(tuple(shape)), super().zeros, shape)

    def contract(self, values, vid, a, b, out_shape, layout=None):
        key = f"contract v{vid}"
        plan_key = (vid, a.shape, b.shape, tuple(out_shape), layout)
        out = self._call(key, lambda: self.plans[plan_key].dump(), super().contract, values,
                         vid, a, b, out_shape, layout)
        self.trace.plans.setdefault(key, self.plans[plan_key].dump())
        return out

    def scale_(self, x, alpha):
        return self._call("scale", f"{tuple(x.shape)} by {alpha:g}", super().scale_, x, alpha)

    def accumulate_(self, target, src, alpha):
        kind = "+=" if alpha in (1.0, -1.0) else "+= alpha*"
        layout = "" if src.flags.c_contiguous else " (transposed view)"
        return self._call("accumulate", f"{kind} {tuple(src.shape)}{layout}",
                          super().accumulate_, target, src, alpha)

    def scatter_(self, target, src, index):
        return self._call("scatter", str(tuple(src.shape)), super().scatter_, target, src,
                          index)

    def init(self, src, alpha):
        return self._call("init", f"{tuple(src.shape)} by {alpha:g}", super().init, src,
                          alpha)


def best_times(cases: dict[str, se.Evaluator], tensors, repeats: int) -> dict[str, float]:
    """Best of ``repeats`` per case, interleaved round-robin."""
    best = {k: float("inf") for k in cases}
    for _ in range(repeats):
        for k, ev in cases.items():
            start = time.perf_counter()
            ev.evaluate(tensors)
            best[k] = min(best[k], time.perf_counter() - start)
    return best


def traced_peak(ev: se.Evaluator, tensors) -> int:
    """tracemalloc's peak over one evaluation (memory allocated before it is not seen)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = ev.evaluate(tensors)
        peak = tracemalloc.get_traced_memory()[1]
        del result
    finally:
        tracemalloc.stop()
    return peak


_PLACED: dict[int, Placed] = {}


def placed(ev: se.Evaluator) -> Placed:
    """The Evaluator's program as the GPU layer's unrolled op graph (made once per program)."""
    key = id(ev.batched)
    if key not in _PLACED:
        _PLACED[key] = Placed(ev.batched)
    return _PLACED[key]


def instrumented(ev: se.Evaluator, tensors, resident: list[np.ndarray], memory: bool,
                 plans: dict) -> Trace:
    """One evaluation of the Evaluator's unrolled op graph (the GPU layer's, placed on the
    host alone) on :class:`TracingBackend`, under tracemalloc when ``memory``.
    ``plans`` is the kernel-plan cache shared by the runs of one case, as ``Compiled.run``
    keeps its backend's, so that only the first run plans contractions."""
    program = ev.batched
    low, roots = placed(ev).lowered(False, Machine())
    if memory:
        tracemalloc.start()
    try:
        backend = TracingBackend(resident)
        backend.plans = plans
        source = TensorSource(ev.forest, tensors, ev.extents)
        start = time.perf_counter()
        result = run_graph(low.graph, roots, ev.forest, {Device.CPU: backend}, source,
                           program.store, None, low.form_of)
        backend.trace.total_s = time.perf_counter() - start
        del result
    finally:
        if memory:
            tracemalloc.stop()
    return backend.trace


def resident_leaves(ev: se.Evaluator, tensors) -> list[np.ndarray]:
    """Owners of the leaf blocks the source hands out (cached blocks, t1, t2)."""
    source = TensorSource(ev.forest, tensors, ev.extents)
    out = {}
    for v in ev.forest.values:
        if v.kind is ValueKind.LEAF:
            owner = _owner(source.fetch(v.id))
            out[id(owner)] = owner
    return list(out.values())


def relative_differences(ours: dict, ref: dict) -> dict[str, float]:
    out = {}
    for name, r in ref.items():
        r = np.asarray(r)
        scale = max(float(np.max(np.abs(r))), 1e-300)
        out[name] = float(np.max(np.abs(np.asarray(ours[name]) - r))) / scale
    return out


def run_system(molecule: str, repeats: int, profile_runs: int) -> list[Case]:
    system = SYSTEMS[molecule]
    ints = SpinOrbitalIntegrals.from_molecule(molecule, "cc-pvdz")
    t1, t2 = amplitudes(ints)
    tensors = dict(ints.tensors(), t1={("a", "i"): t1}, t2={("a", "a", "i", "i"): t2})
    eqs = ccsd_equations()
    top = se.analyze(eqs, ints.extents).peak_bytes

    evaluators: dict[str, se.Evaluator] = {}
    budgets: dict[str, int | None] = {}
    plan_s: dict[str, tuple[float, float]] = {}
    for label, frac in (("unbatched", None), *((f"{100 * f:g} %", f) for f in FRACTIONS)):
        budgets[label] = None if frac is None else int(frac * top)
        ev = se.Evaluator(eqs, ints.extents, budget=budgets[label])
        start = time.perf_counter()
        ev.batched                                # fits the schedule to the budget
        lowering = time.perf_counter()
        placed(ev).lowered(False, Machine())      # the op graph (otherwise on the first run)
        plan_s[label] = (lowering - start, time.perf_counter() - lowering)
        evaluators[label] = ev

    results, meters = {}, {}
    for label, ev in evaluators.items():      # warm-up (fills the integral block cache)
        results[label], meters[label] = ev.evaluate(tensors, return_meter=True)
    ref = results["unbatched"]
    times = best_times(evaluators, tensors, repeats)
    resident = resident_leaves(evaluators["unbatched"], tensors)

    cases = []
    for label, ev in evaluators.items():
        report = ev.analyze()
        traced = traced_peak(ev, tensors)
        plans: dict = {}
        instrumented(ev, tensors, resident, False, plans)      # plans the contractions
        memory = instrumented(ev, tensors, resident, True, plans)
        timing = fastest([instrumented(ev, tensors, resident, False, plans)
                          for _ in range(profile_runs)])
        cases.append(Case(system, label, budgets[label], plan_s[label], times[label],
                          times["unbatched"], len(report.loops), report.flops,
                          report.recompute_overhead, report.peak_bytes,
                          meters[label].peak_bytes, traced,
                          relative_differences(results[label], ref), memory, timing))
        print(f"{system} {label}: {times[label]:.3f} s, predicted {report.peak_bytes / MIB:.1f}"
              f" MiB, traced {traced / MIB:.1f} MiB, resident "
              f"{memory.resident_peak / MIB:.1f} MiB (at {memory.resident_at})", flush=True)
    return cases


def _mib(n: int) -> str:
    return f"{n / MIB:.1f}"


def table(cases: list[Case]) -> str:
    head = ("| system | case (budget MiB) | plan + lower s | eval s | / unbatched | loops | "
            "GFLOP | recompute | predicted peak MiB | meter peak MiB | traced MiB (/ pred) | "
            "resident MiB (/ pred) | max rel diff E / R1 / R2 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cases:
        budget = "" if c.budget is None else f" ({_mib(c.budget)})"
        plan = f"{c.plan_s[0]:.2f} + {c.plan_s[1]:.2f}"
        meter = _mib(c.metered) + (" (=)" if c.metered == c.predicted else " (**≠**)")
        diff = " / ".join(f"{c.rel_diff[k]:.0e}" for k in ("E", "R1", "R2") if k in c.rel_diff)
        lines.append(
            f"| {c.system} | {c.label}{budget} | {plan} | {c.eval_s:.3f} | {c.ratio:.2f}× | "
            f"{c.loops} | {c.flops / 1e9:.2f} | {c.recompute:.4f} | {_mib(c.predicted)} | "
            f"{meter} | {_mib(c.traced)} ({c.traced_ratio:.2f}×) | "
            f"{_mib(c.memory.resident_peak)} ({c.resident_ratio:.2f}×) | {diff} |")
    return "\n".join(lines)


def transients(cases: list[Case]) -> str:
    """Per case: held vs resident peak and the largest transients (what the meter omits)."""
    lines = []
    for c in cases:
        m = c.memory
        ops = ", ".join(f"{op} {_mib(b)}" for op, b in sorted(m.by_op().items(),
                                                            key=lambda x: -x[1]) if b)
        lines.append(f"- {c.system} {c.label}: held between calls {_mib(m.held_peak)} MiB "
                     f"({m.held_peak / c.predicted:.2f}× pred); resident peak "
                     f"{_mib(m.resident_peak)} MiB during `{m.resident_at}`; largest transient "
                     f"MiB per op: {ops or 'none'}")
        for op, detail, b in m.worst():
            lines.append(f"  - {_mib(b)} MiB in `{op} {detail}`")
    return "\n".join(lines)


OPS = ("contract", "take", "accumulate", "scatter", "init", "scale", "zeros", "input",
       "executor")


def time_table(cases: list[Case]) -> str:
    """Where the time goes: seconds per backend operation (least over the timing runs)."""
    head = "| system | case | total s | " + " | ".join(OPS) + " |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cases:
        ops = c.timing.op_seconds()
        lines.append(f"| {c.system} | {c.label} | {c.timing.total_s:.3f} | "
                     + " | ".join(f"{ops.get(op, 0.0):.3f}" for op in OPS) + " |")
    return "\n".join(lines)


def slower_contractions(cases: list[Case], n: int = 3) -> str:
    """Per batched case: the contractions whose time (all batches) grew most vs unbatched."""
    base = {c.system: c for c in cases if c.label == "unbatched"}
    lines = []
    for c in cases:
        if c.label == "unbatched":
            continue
        ref = base[c.system].timing
        keys = [k for k in c.timing.seconds if k.startswith("contract ")]
        grown = sorted(keys, key=lambda k: ref.seconds.get(k, 0.0) - c.timing.seconds[k])[:n]
        items = [f"`{k[9:]}` {1e3 * ref.seconds.get(k, 0.0):.1f} → "
                 f"{1e3 * c.timing.seconds[k]:.1f} ms (batched: {c.timing.plans[k]}; "
                 f"unbatched: {ref.plans.get(k, '—')})" for k in grown]
        lines.append(f"- {c.system} {c.label}: " + "; ".join(items))
    return "\n".join(lines)


def verdict(cases: list[Case]) -> list[str]:
    batched = [c for c in cases if c.label != "unbatched"]
    out = []
    for c in batched:
        time_ok = "met" if c.ratio <= TIME_TARGET else "missed"
        mem_ok = "met" if c.traced_ratio <= MEMORY_TARGET else "missed"
        out.append(f"{c.system} {c.label}: time {c.ratio:.2f}× ({time_ok}, ≤ {TIME_TARGET}×), "
                   f"traced memory {c.traced_ratio:.2f}× ({mem_ok}, ≤ {MEMORY_TARGET}×), "
                   f"meter == prediction: {c.metered == c.predicted}, max rel diff "
                   f"{max(c.rel_diff.values()):.1e}")
    return out


HELD_SLACK = 1.05    # held / predicted above this: arrays outlive their release


def section(cases: list[Case], repeats: int, profile_runs: int,
            load: tuple[float, float]) -> str:
    info = machine()
    leaking = [c for c in cases if c.memory.held_peak > HELD_SLACK * c.predicted]
    text = [
        SECTION,
        "",
        "One spin-orbital CCSD residual at the same fixed amplitudes as above, unbatched and",
        "under a byte budget of 50 % and 25 % of the unbatched predicted peak",
        f"(`se.Evaluator(ccsd_equations(), extents, budget=...)`), best of {repeats} runs,",
        "interleaved round-robin over the cases after one warm-up each. Written by",
        "`benchmarks/batched_overhead.py --write`.",
        "",
        "- **plan + lower s**: the first access of `Evaluator.batched` (fits the schedule to",
        "  the budget), then lowering it to the unrolled op graph (`runtime.gpu.Placed.lowered`,",
        "  what the instrumented runs execute); neither is part of **eval s**. **/ unbatched**",
        f"  is eval s over the unbatched eval s (target ≤ {TIME_TARGET}×).",
        "- **loops**, **GFLOP**, **recompute**, **predicted peak**: `Evaluator.analyze()`",
        "  (`len(loops)`, `flops`, `recompute_overhead`, `peak_bytes`); **meter peak**: the",
        "  `Meter` of the real NumPy run, `(=)` when it equals the prediction to the byte.",
        "- **traced**: `tracemalloc` peak of one evaluation after `reset_peak` (NumPy",
        "  registers its buffers with tracemalloc), over the predicted peak (target ≤",
        f"  {MEMORY_TARGET}×). It sees only what the evaluation allocates: a batch slice of a",
        "  leaf that is contiguous is a view of the caller's block (no allocation) but a",
        "  buffer in the prediction.",
        "- **resident**: an instrumented run (`TracingBackend` in the script) adds the bytes of",
        "  those live slice views to the traced level, so it compares with the prediction",
        "  like for like; what it exceeds the prediction by is memory the meter does not model",
        "  (below).",
        "- **max rel diff**: batched vs unbatched, max |Δ| / max |ref| per equation (must be",
        f"  ≤ {TOLERANCE:g}).",
        "",
        table(cases),
        "",
        "Targets (batched cases):",
        "",
        *[f"- {line}" for line in verdict(cases)],
        "",
        "### Where the time goes",
        "",
        "Seconds per backend operation in an instrumented evaluation of the same op graph",
        f"(`TracingBackend`, least per operation over {profile_runs} run(s); **executor** is the",
        "rest: `runtime/engine.py::run_graph`'s own Python).",
        "",
        time_table(cases),
        "",
        "Contractions whose time (all batches together) grew most against unbatched:",
        "",
        slower_contractions(cases),
        "",
        "- **take** (`NumpyBackend.take`): a batch slice on any but the leading axis of a",
        "  leaf is strided, and `np.ascontiguousarray` copies it; the loops here open on",
        "  virtual modes that are not the leading axis of ⟨ab‖cd⟩ (`g` over four virtual",
        "  spaces), so its slices are copied every batch, while unbatched reads the cached",
        "  block in place.",
        "- **contract**: for the sliced shapes `runtime/kernels.py::plan_contraction` may pick",
        "  another plan than unbatched, e.g. one GEMM after a transposing copy of the (already",
        "  copied) slice (`copy right`) where unbatched ran a strided batched GEMM without a",
        "  copy — the same integral data copied twice per batch. Smaller GEMMs per batch run",
        "  at a lower rate as well.",
        "- **scatter / zeros**: assembling batches into their destinations; **executor**: the",
        "  walk over a graph that is unrolled batch by batch (more nodes).",
        "",
        "### What the traced peak includes beyond the prediction",
        "",
        "The prediction (and the meter) count the buffers the schedule holds; they leave out",
        "memory a backend call allocates and frees again (a *transient*), and buffers kept",
        "alive after the walk released them. Per case: the peak of traced + live slice views",
        "measured *between* calls (**held**; above 1.00× only when a buffer outlives its",
        "release), the resident peak with transients, and the largest transients:",
        "",
        transients(cases),
        "",
        "Where these come from:",
        "",
        "- `contract` (`runtime/backends.py::NumpyBackend._run`): a planned transposing copy",
        "  of an operand (`_operand`, `ArrayView.perm` set) or the result temporary",
        "  (`out.buffer_shape`: computed in GEMM order and copied transposed into place, or",
        "  partial products summed over split modes). They are known at planning time",
        "  (`ContractPlan`) but are not graph nodes, so neither the prediction nor the meter",
        "  counts them. Where the resident peak exceeds the held one, it does so during the",
        "  call named under *resident peak during*, by that call's transient.",
        "- `accumulate` (`NumpyBackend.accumulate_`): `target += alpha * src` materializes",
        "  the scaled term (an array the size of the term, e.g. R2) before adding.",
        "- `take`: a non-contiguous batch slice is copied — but the copy *is* the slice the",
        "  meter counts, so it is no excess (a contiguous slice is a view: no allocation).",
    ]
    if leaking:
        text += [
            "- **held** above the prediction ("
            + ", ".join(f"{c.system} {c.label} {c.memory.held_peak / c.predicted:.2f}×"
                        for c in leaking) + "): buffers outlive their release. Cause at the",
            "  time of writing: `runtime/engine.py::run_graph` stores every node's result in",
            "  `out`, including view nodes (`permute`, `reshape`) and in-place nodes (`scale`,",
            "  `accumulate`, `scatter`) that return their input's buffer, but on release pops",
            "  only the owner (`out.pop(o)`), so the alias entries keep each such buffer alive",
            "  to the end of the run. Popping the aliases with the owner brings held down to",
            "  the prediction (checked on a patched copy of `run_graph`).",
        ]
    text += [
        "",
        f"Load average (1 min) at start / end of the run: {load[0]:.2f} / {load[1]:.2f} "
        f"on {info['cpus (nproc)']} cpus (other jobs on the machine inflate times); "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}; "
        f"{info['date']}, numpy {info['numpy']}, {info['BLAS']}.",
        "",
        "```bash",
        f"python benchmarks/batched_overhead.py --repeats {repeats} "
        f"--profile-runs {profile_runs} --write",
        "```",
        "",
    ]
    return "\n".join(text)


def write_doc(text: str) -> None:
    """Replace (or append) this script's section; every other section is kept as it is."""
    write_section(SECTION, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="timed runs per case (best kept)")
    p.add_argument("--profile-runs", type=int, default=1,
                   help="instrumented runs per case for the time breakdown (least kept)")
    p.add_argument("--molecules", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--write", action="store_true",
                   help=f"replace the section {SECTION[3:]!r} of "
                        f"{DOC.relative_to(DOC.parents[1])}")
    args = p.parse_args(argv)

    load0 = os.getloadavg()[0]
    cases = []
    for molecule in args.molecules:
        cases += run_system(molecule, args.repeats, args.profile_runs)
    load = (load0, os.getloadavg()[0])
    print(table(cases))
    print(time_table(cases))
    print(slower_contractions(cases))
    print(transients(cases))
    print("\n".join(verdict(cases)))
    print(f"load average (1 min) start / end: {load[0]:.2f} / {load[1]:.2f}")
    if args.write:
        write_doc(section(cases, args.repeats, args.profile_runs, load))
        print(f"wrote {DOC}")
    bad = [f"{c.system} {c.label}" for c in cases if not c.exact]
    if bad:
        print(f"meter ≠ prediction or results differ beyond {TOLERANCE:g}: {', '.join(bad)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
