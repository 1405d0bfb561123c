"""The ``Evaluator`` and the one-call ``evaluate``, ``analyze``, ``min_budget``: equations to
results and a memory report, through the pipeline below."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache, partial

from ..errors import (DistributedError, InfeasibleBudget, InputTypeError, PolicyError,
                     SequantEvalError, SinkError, UnsupportedFeature)
from ..expr import Equation, check_extents
from ..expr.stages import as_equations as _as_equations, equation_stages
from ..forest import Forest, build_forest
from ..plan import BatchPlan, BatchPolicy, Loop, plan_forest
from ..budget import Budget
from ..expr.printer import to_text
from ..memo import remembered
from ..plan.regime import Regime
from ..runtime import TensorSource
from ..runtime.sinks import make_sinks
from ..runtime.fingerprint import fingerprint
from ..schedule import ScheduleAnalysis, analyze_schedule
from ..schedule.analysis import term_peak
from ..schedule.budget import fit_forest, minimum_budget
from .staged import StagedEvaluator

__all__ = ["Evaluator", "Report", "evaluate", "analyze", "min_budget", "resolve_policy"]


def resolve_policy(budget, policy: BatchPolicy | None,
                   extents: Mapping[str, int]) -> BatchPolicy | None:
    """The policy in force: ``budget`` overrides the policy's own; with a budget and no
    policy every space is batchable in both roles. ``None`` means: unbatched. A share
    (``"25%"``) must be resolved to bytes first (``Evaluator`` does)."""
    if policy is not None and not isinstance(policy, BatchPolicy):
        raise PolicyError(f"policy must be a se.BatchPolicy, got {type(policy).__name__}")
    if policy is None:
        return None if budget is None else BatchPolicy.everything(budget, extents)
    return policy if budget is None else replace(policy, budget=budget)


@dataclass(frozen=True)
class Report:
    """What a dry run predicts: peak memory, where it is reached, flops, loops."""

    peak_bytes: int
    flops: int
    unbatched_flops: int
    binding_point: int
    live_at_binding: tuple[int, ...]
    loops: tuple[Loop, ...]
    forest: Forest
    schedule: ScheduleAnalysis         # the analysis the figures come from
    cluster: object = None             # ClusterPlan when a cluster was named (workers=...)
    program_bytes: int = 0             # the budget's share charged to the program itself

    @property
    def stages(self) -> tuple[Report, ...]:
        """One stage: this report (equations read in stages report each, ``StagedReport``)."""
        return (self,)

    @property
    def total_bytes(self) -> int:
        """What the budget bounds: the arrays' peak plus the program's reserve."""
        return self.peak_bytes + self.program_bytes

    @property
    def worker_peak_bytes(self) -> int | None:
        """Predicted peak of one cluster worker (one task per thread); None: no cluster."""
        return None if self.cluster is None else self.cluster.worker_peak_bytes

    @property
    def client_peak_bytes(self) -> int | None:
        """Predicted peak of the client of a cluster run (its steps and reduction buffers)."""
        return None if self.cluster is None else self.cluster.client_peak_bytes

    def memory(self, title: str = ""):
        """The peak-memory report (text, JSON, plot) of a planned dry run."""
        from ..report.memory import memory_report

        budget = self.schedule.plan.policy.budget_bytes + self.program_bytes
        return memory_report(self.schedule, self.unbatched_flops, title,
                             budget if budget != float("inf") else None, self.program_bytes)

    @property
    def recompute_overhead(self) -> float:
        """Flops relative to the unbatched evaluation (1.0 = no recompute)."""
        return self.flops / self.unbatched_flops if self.unbatched_flops else 1.0

    def dump(self) -> str:
        """Stable text: peak and binding point, flops and recompute overhead, the loops and
        what is live at the peak (then the cluster plan, if any)."""
        from ..units import format_bytes, format_flops

        lines = [f"peak {format_bytes(self.peak_bytes)} ({self.peak_bytes} B) at point "
                 f"{self.binding_point}",
                 f"flops {format_flops(self.flops)} ({self.flops}); recompute overhead "
                 f"{self.recompute_overhead:.4f}x vs unbatched",
                 f"forest: {self.forest.binary_contractions} binary contractions -> "
                 f"{self.forest.distinct_contractions} distinct values"]
        if self.program_bytes:
            lines.append(f"program reserve {format_bytes(self.program_bytes)} "
                         f"({self.program_bytes} B, charged to the budget); arrays + program "
                         f"{format_bytes(self.total_bytes)}")
        lines += [f"  {lp}" for lp in self.loops]
        if self.schedule is not None:
            forms = self.schedule.rich.forms
            live = ", ".join(f"f{f}=v{forms[f].value}" for f in self.live_at_binding)
        else:
            live = ", ".join(f"v{v}" for v in self.live_at_binding)
        lines.append(f"live at the peak: {live}")
        text = "\n".join(lines) + "\n"
        return text + (self.cluster.dump() if self.cluster is not None else "")


class Evaluator:
    """Equations compiled once for given extents; evaluate many times (e.g. CC iterations).

    Equations that read other equations' results (``expr.factor.factor_common`` writes
    such intermediates) are evaluated in stages (``api/staged.py``): each stage one fused
    program, the results a later stage reads held between them, the budget bounding every
    stage plus what is held across it; ``analyze`` then reports the stages (``stages``).

    ``share_subproducts=True`` binarizes the terms together: a sub-product several terms
    contain is joined first in each of them where that lowers the summed flops, so it is
    one value of the forest (the (T) energy's 232 terms read four triples values instead of
    building their own); off, each term's contraction order is the cheapest for that term
    alone (``forest/build.py``)."""

    def __init__(self, eqs: str | Equation | Sequence[Equation],
                 extents: Mapping[str, int] | Regime, budget=None,
                 policy: BatchPolicy | None = None, persist: bool = False,
                 progress=None, gpu_budget: float = float("inf"),
                 volatile: Sequence[str] | None = None, client=None,
                 share_subproducts: bool = False) -> None:
        if progress is not None and not callable(progress):
            raise InputTypeError(f"progress must be a callable progress(what, done, total), "
                                 f"got {type(progress).__name__} {progress!r}")
        self.progress = progress
        self.client = client            # a distributed.Client: evaluate on its cluster
        self.last_meter = None          # the Meter (ClusterMeter) of the latest evaluation
        self.gpu_budget = gpu_budget
        self.equations = _as_equations(eqs)
        self._staged = None
        self.share_subproducts = bool(share_subproducts)
        if len(equation_stages(self.equations)) > 1:      # reads other equations' results
            self._stage(extents, budget, policy, persist, volatile)
            return
        if isinstance(extents, Regime):
            self.regime = Regime(check_extents(extents.extents), dict(extents.moments),
                                 extents.name)
        else:
            self.regime = Regime.from_extents(check_extents(extents))
        self.extents = self.regime.extents
        self.persist = persist
        self.forest = _forest(self.equations, tuple(self.extents.items()),
                              tuple(sorted(self.regime.moments.items())), self.share_subproducts)
        parsed = Budget.parse(budget)                        # refuses bad values
        self._share = parsed if parsed.share is not None else None
        budget = parsed.fixed
        if self._share is not None:       # "25%" of the unbatched peak (at 8-byte elements
            budget = self._share_bytes(8, policy)             # until the inputs say more)
        self.policy = resolve_policy(budget, policy, self.extents)
        if volatile is not None:
            self.policy = replace(self.policy or BatchPolicy(), volatile=volatile)
        if self.policy is not None:
            self.policy.check(self.regime)
        if persist and not (self.policy and self.policy.volatile):
            raise PolicyError("persist=True keeps what does not depend on the tensors that "
                              "change between evaluations: name them, e.g. "
                              "volatile=('t1', 't2')")
        self._programs: dict[tuple, object] = {}   # (element size, sinks) → fitted program
        self._placed: dict = {}                    # program → the same placed for a GPU
        self._itemsize = (self.policy or BatchPolicy()).itemsize
        self._fingerprints: dict[str, tuple] | None = None
        self._unbatched_flops: int | None = None
        self._partitions: dict[int, object] = {}   # element size → the cut for a cluster
        self._budgets: dict[int, float] = {}       # element size → the budget in bytes

    def _stage(self, extents, budget, policy, persist, volatile) -> None:
        if isinstance(extents, Regime):
            raise UnsupportedFeature("equations evaluated in stages take plain extents "
                                     "(space -> int), not a Regime")
        stage = partial(Evaluator, share_subproducts=self.share_subproducts)
        self._staged = StagedEvaluator(self.equations, extents, budget, policy, persist,
                                       volatile, stage=stage)
        self.extents = self._staged.extents
        self.persist = persist
        self.policy = policy

    @property
    def stages(self) -> tuple[tuple[Equation, ...], ...]:
        """The equations in evaluation order: one stage unless some read others' results."""
        if self._staged is not None:
            return self._staged.stage_equations
        return (self.equations,)

    def _single(self, what: str) -> None:
        if self._staged is not None:
            raise UnsupportedFeature(
                f"{what} is per program, and these equations run in "
                f"{len(self._staged.stage_equations)} stages (they read other equations' "
                f"results); use analyze() (its stages) or evaluate()")

    @property
    def batched(self):
        """The fitted schedule, compiled to a runnable program (planned on first use; raises
        InfeasibleBudget before any array is touched).

        A finite budget covers the program too: the arrays are planned under the budget
        less the program's reserve (``program_bytes``)."""
        self._single("the compiled program")
        return self._compiled()

    def _compiled(self, sinks: tuple = ()):
        """The fitted program at the current element size; ``sinks`` (result name → kind
        pairs) replace the policy's own sinks when given (``evaluate(out=...)``)."""
        sinks = sinks or (self.policy.sinks if self.policy is not None else ())
        key = (self._itemsize, sinks)
        if key not in self._programs:
            from ..runtime.compiled import Compiled

            policy = replace(self.policy or BatchPolicy(), itemsize=self._itemsize)
            if sinks:
                policy = replace(policy, sinks=sinks)
            if self._share is not None:
                policy = replace(policy, budget=self._share_bytes(self._itemsize, policy))
            self._budgets[self._itemsize] = policy.budget_bytes
            if not policy.finite or not policy.program:
                fitted = self._fitted(policy)
                program = Compiled(fitted, policy.volatile, self.persist)
                if not policy.finite and not policy.sinks:     # the reserve's, once
                    _unbatched(self.forest, self.regime, self._itemsize, fitted, program)
            else:
                reserve = self.program_bytes
                fitted = self._fit(policy, reserve)
                program = Compiled(fitted, policy.volatile, self.persist)
                actual = program.program().reserved_bytes
                if actual > reserve:                  # more nodes than the bound: refit
                    program = Compiled(self._fit(policy, actual), policy.volatile,
                                       self.persist)
            self._programs[key] = program
        return self._programs[key]

    @property
    def program_bytes(self) -> int:
        """Bytes of a finite budget charged to the program itself (its nodes, the
        executor's tables, kernel plans): a bound from the unbatched program's size
        (``runtime/program.py: reserve_bound``), the same at every budget. 0 unbatched."""
        if self.policy is None or not self.policy.finite or not self.policy.program:
            return 0
        return self.program_reserve()

    def program_reserve(self) -> int:
        """The reserve a finite budget charges for the program of these equations (what
        ``program_bytes`` is under a budget), whatever the policy; in stages, all theirs."""
        if self._staged is not None:
            return self._staged.program_reserve()
        return _reserve(self.forest, self.regime, self._itemsize)

    def prepare(self) -> list:
        """Every (stage's) program fitted and lowered now, not on first use (evaluators
        sharing forests and fits may then run in threads); the programs, in stage order."""
        return [ev.batched.program() for ev in
                (self._staged.evaluators if self._staged is not None else (self,))]

    def _fit(self, policy: BatchPolicy, reserve: int):
        """The forest fitted under the policy's budget less ``reserve`` (a refusal names
        the whole budget and a minimum that includes the reserve). Where the unbatched
        schedule (known: the reserve is measured on it) fits, it is the fit, not planned again."""
        budget = policy.budget_bytes
        arrays = replace(policy, budget=max(1.0, budget - reserve))
        top = _unbatched(self.forest, self.regime, policy.itemsize)
        if not policy.sinks and top.peak_bytes <= arrays.budget_bytes:
            return replace(top, plan=replace(top.plan, policy=arrays))
        try:
            return self._fitted(arrays)
        except InfeasibleBudget as err:
            raise _with_reserve(err, budget, reserve) from None

    def _fitted(self, policy: BatchPolicy):
        """``fit_forest`` under ``policy``, remembered (``memo.py``) for the same equations,
        extents and policy: a CC run plans each stage once, and a cache folder keeps the
        fit across processes."""
        key = (to_text(self.equations), tuple(sorted(self.regime.extents.items())),
               tuple(sorted(self.regime.moments.items())), _policy_key(policy),
               self.share_subproducts)
        return remembered("fit", key, lambda: fit_forest(self.forest, self.regime, policy,
                                                         self.progress))

    def _share_bytes(self, itemsize: int, policy: BatchPolicy | None) -> float:
        """A share budget in bytes: that share of the arrays' unbatched peak, plus the
        program's reserve (which no batching makes smaller) unless the policy says the
        budget is for the arrays only."""
        peak = self._unbatched_peak(itemsize)
        if policy is not None and not policy.program:
            return self._share.bytes_for(peak)
        return self._share.bytes_for(peak, _reserve(self.forest, self.regime, itemsize))

    def _unbatched_peak(self, itemsize: int) -> int:
        """The unbatched peak at ``itemsize``-byte elements (what a share is a share of)."""
        return _unbatched(self.forest, self.regime, itemsize).peak_bytes

    def min_budget(self) -> int:
        """The smallest budget (bytes) under which these equations can be evaluated batched
        (``se.min_budget``): the policy's spaces and blocks (default: every space in both
        roles), never its budget; the program's reserve included unless the policy says
        the budget is for the arrays only."""
        if self._staged is not None:
            return self._staged.min_budget()
        policy = replace(self.policy, budget=None) if self.policy is not None else \
            BatchPolicy.everything(None, self.extents)
        reserve = _reserve(self.forest, self.regime, policy.itemsize) if policy.program else 0
        return minimum_budget(self.forest, self.regime, policy, run=False)[0] + reserve

    def plan(self) -> BatchPlan:
        """The batch plan under the policy in force (unbatched with none), each term's peak
        that of the term scheduled alone (modelled where the model is that sweep, else
        measured: ``plan.menu.peak_rule``)."""
        policy = self.policy or BatchPolicy()
        checker = term_peak(self.forest, BatchPlan(policy, self.regime, (), ()))
        return plan_forest(self.forest, self.regime, policy, exact=checker)

    def evaluate(self, tensors: Mapping[str, object], backend: str = "numpy",
                 return_meter: bool = False, client=None, trace_tasks: bool = False,
                 out: Mapping[str, object] | None = None):
        """``{equation: array}``; batched through the fitted schedule when a policy (or a
        finite budget) is in force, else the unbatched walk.

        ``out`` maps results to sinks (``runtime/sinks.py``): a NumPy array, an
        ``np.memmap``, an h5py dataset or zarr array of the result's shape (zeroed, then
        accumulated into in place) or a callable ``sink(spaces, ranges, block)`` (each slice
        once). Such a result is written there batch by batch and never held whole: the
        budget covers only what a write holds, and the returned mapping holds the
        destination itself. A destination that cannot take its result raises
        ``SinkError`` before any work, the destinations untouched. An error found while the
        evaluation runs (a provider or a file failing at a read, a callable sink raising)
        leaves them partly written; its message says so.

        With ``client`` (a ``distributed.Client``; default: the evaluator's own) the batches
        of the outermost loops run as Dask tasks on its workers, the rest on the client
        (``runtime/cluster/``); the meter is then a ``ClusterMeter``, and
        ``trace_tasks=True`` has every task measure its allocations with tracemalloc."""
        client = client if client is not None else self.client
        if self._staged is not None:
            if client is not None or out:
                raise UnsupportedFeature("equations evaluated in stages run in this process "
                                         "and return their results whole: evaluate without "
                                         "client= and out=")
            got = self._staged.evaluate(tensors, backend, return_meter=True)
            self.last_meter = got[1]
            return got if return_meter else got[0]
        if client is not None:
            if out:
                raise SinkError("result sinks (out=) are written by this process; a cluster "
                                "run (client=) returns its results whole: evaluate without "
                                "client=, or without out=")
            return self._evaluate_on(client, tensors, backend, return_meter, trace_tasks)
        source = TensorSource(self.forest, tensors, self.extents)
        self._itemsize = source.dtype().itemsize      # planned for the inputs' element size
        sinks = make_sinks(out, self.forest, self.extents, source.dtype(), tensors)
        program = self._compiled(tuple(sorted((n, s.kind) for n, s in sinks.items())))
        if self.persist:
            self._check_kept(program, tensors)
        try:
            results, meter = self._run(program, backend, source, sinks)
        except SequantEvalError as err:
            if sinks and err.args and isinstance(err.args[0], str):
                err.args = (f"{err.args[0]} [the evaluation had started: "
                            f"{', '.join(f'out[{n!r}]' for n in sinks)} partly written]",
                            ) + err.args[1:]
            raise
        finally:
            source.release()          # the inputs are not held past the evaluation
        self.last_meter = meter
        return (results, meter) if return_meter else results

    def _run(self, program, backend: str, source, sinks):
        """One evaluation of ``program``: on this device (numpy, dryrun, array_api_strict),
        or on the host and a GPU (cupy; auto where a GPU is present) through the GPU layer,
        which only such a run imports."""
        if backend in ("cupy", "auto"):
            from ..runtime.gpu import Placed, gpu_available

            if backend == "cupy" or gpu_available():
                if program not in self._placed:
                    self._placed[program] = Placed(program)
                return self._placed[program].run(source, self.gpu_budget, sinks)
            backend = "numpy"
        return program.run(backend, source, sinks)

    def _evaluate_on(self, client, tensors, backend: str, return_meter: bool, trace: bool):
        from ..report.progress import Progress
        from ..runtime.cluster.run import cluster_shape, run_on_cluster

        cluster_shape(client)                 # refuses a missing dask or a wrong client
        if backend != "numpy":
            raise DistributedError(f"a cluster run (client=) executes on NumPy on the workers; "
                                   f"backend {backend!r} is not supported there: use "
                                   f"backend='numpy', or evaluate without client=")
        if self.persist:
            raise DistributedError("persist=True keeps intermediates in this process, which a "
                                   "cluster run (client=) does not: use an Evaluator without "
                                   "persist, or evaluate without client=")
        source = TensorSource(self.forest, tensors, self.extents)
        self._itemsize = source.dtype().itemsize
        program = self.batched
        source.check_batched(program.batched_leaves)
        progress = self.progress or Progress()
        try:
            results, meter = run_on_cluster(self._partition(), client, tensors, source,
                                            self._budgets[self._itemsize], progress, trace)
        finally:
            getattr(progress, "close", lambda: None)()
        self.last_meter = meter
        return (results, meter) if return_meter else results

    def _partition(self):
        """The fitted schedule cut into client work and per-batch tasks (made once)."""
        from ..runtime.cluster.partition import partition_schedule

        if self._itemsize not in self._partitions:
            self._partitions[self._itemsize] = partition_schedule(self.batched.analysis)
        return self._partitions[self._itemsize]

    def _check_kept(self, program, tensors: Mapping[str, object]) -> None:
        """Kept intermediates are dropped (rebuilt) when a non-volatile input changed (see
        ``runtime.fingerprint``: NumPy arrays by content, providers always)."""
        volatile = self.policy.volatile
        prints = {name: fingerprint(t) for name, t in sorted(tensors.items())
                  if name not in volatile}
        if self._fingerprints is not None and prints != self._fingerprints:
            program.store.clear()
        self._fingerprints = prints

    def analyze(self, workers: int | None = None, threads_per_worker: int = 1,
                client=None) -> Report:
        """The planned dry run (the element size is the policy's). With ``workers`` (or a
        ``client``, whose cluster shape is read) the report also predicts a cluster run:
        ``worker_peak_bytes`` (one task in flight per worker thread) and
        ``client_peak_bytes`` (the client's steps and reduction buffers)."""
        if self._staged is not None:
            if workers is not None or client is not None:
                raise UnsupportedFeature("a cluster plan is made for one program; these "
                                         "equations run in stages: analyze without workers")
            return self._staged.analyze()
        if client is not None:
            from ..runtime.cluster.run import cluster_shape

            workers, threads_per_worker = cluster_shape(client)
        a = self.batched.analysis
        if self.policy is None or not self.policy.finite:
            unbatched = a.flops
        else:
            if self._unbatched_flops is None:       # computed once per evaluator
                self._unbatched_flops = analyze_schedule(
                    self.forest, plan_forest(self.forest, self.regime, BatchPolicy())).flops
            unbatched = self._unbatched_flops
        cluster = None
        if workers is not None:
            from ..runtime.cluster.plan import plan_cluster

            if int(workers) < 1 or int(threads_per_worker) < 1:
                raise DistributedError(f"workers and threads_per_worker must be at least 1, "
                                       f"got {workers} and {threads_per_worker}")
            cluster = plan_cluster(self._partition(), int(workers), int(threads_per_worker),
                                   self._budgets[self._itemsize])
        return Report(a.peak_bytes, a.flops, unbatched, a.profile.binding_point,
                      a.profile.live_at_binding, tuple(a.rich.loops[l] for l in sorted(a.rich.loops)),
                      self.forest, a, cluster, self.program_bytes)


_UNBATCHED: dict[tuple, tuple] = {}


def _unbatched(forest: Forest, regime: Regime, itemsize: int, known=None, compiled=None):
    """The unbatched schedule of ``forest``, remembered for the last few forests (``known``:
    it as an unbatched evaluator fitted it; ``compiled``: that evaluator's program)."""
    key = (id(forest), tuple(sorted(regime.extents.items())),
           tuple(sorted(regime.moments.items())), itemsize)
    hit = _UNBATCHED.get(key)
    if hit is None or hit[0] is not forest:
        if len(_UNBATCHED) >= 16:
            _UNBATCHED.pop(next(iter(_UNBATCHED)))
        hit = _UNBATCHED[key] = (forest, fit_forest(forest, regime, BatchPolicy(
            itemsize=itemsize)) if known is None else known, {})
    if compiled is not None and compiled.analysis is hit[1] and not compiled.persistent:
        hit[2].setdefault("compiled", compiled)
    return hit[1]


def _reserve(forest: Forest, regime: Regime, itemsize: int) -> int:
    """The program reserve of ``forest`` (``reserve_bound`` of its unbatched program)."""
    from ..runtime.lower import lower_program
    from ..runtime.program import reserve_bound

    a = _unbatched(forest, regime, itemsize)
    memo = _UNBATCHED[(id(forest), tuple(sorted(regime.extents.items())),
                       tuple(sorted(regime.moments.items())), itemsize)][2]
    if "reserve" not in memo:
        compiled = memo.get("compiled")       # the unbatched evaluator's: lowered once
        memo["reserve"] = reserve_bound(compiled.program() if compiled is not None
                                        else lower_program(a))
    return memo["reserve"]


def _with_reserve(err: InfeasibleBudget, budget: float, reserve: int) -> InfeasibleBudget:
    """``err`` (raised for the arrays' share of the budget) restated for the whole budget:
    its minimum plus the program's reserve."""
    from ..units import format_bytes

    share = (f"of the budget {format_bytes(budget)} ({int(budget)} B), {format_bytes(reserve)} "
             f"({reserve} B) is the program itself (ops, executor tables, kernel plans), "
             f"which leaves {format_bytes(max(0.0, budget - reserve))} for the arrays")
    if err.searched:
        need = int(err.minimum) + reserve
        out = InfeasibleBudget(
            f"{share}; the arrays need at least {format_bytes(err.minimum)}: raise the budget "
            f"to at least {need} B, or allow finer blocks (BatchPolicy(block=...)). "
            f"Planner: {err}", budget, need)
    else:
        out = InfeasibleBudget(f"{share}; {err}", budget, lambda: err.minimum + reserve)
    return out


def _policy_key(policy: BatchPolicy) -> tuple:
    """The policy's fields as plain values, sets in sorted order (their order means
    nothing, and a set's iteration order differs between processes)."""
    def plain(x):
        if isinstance(x, Mapping):
            return ("map",) + tuple(sorted((k, plain(v)) for k, v in x.items()))
        if isinstance(x, (set, frozenset)):
            return ("set",) + tuple(sorted(plain(v) for v in x))
        if isinstance(x, (list, tuple)):
            return tuple(plain(v) for v in x)
        return x
    return tuple((f.name, plain(getattr(policy, f.name))) for f in fields(policy) if f.init)


@lru_cache(maxsize=16)
def _forest(equations: tuple[Equation, ...], extents: tuple[tuple[str, int], ...],
            moments: tuple = (), share_subproducts: bool = False) -> Forest:
    regime = Regime(dict(extents), dict(moments))
    key = (to_text(equations), extents, moments) + (("shared",) if share_subproducts else ())
    return remembered("forest", key, lambda: build_forest(
        equations, regime if moments else dict(extents), share_subproducts=share_subproducts))


def evaluate(eqs, tensors: Mapping[str, object], extents: Mapping[str, int],
             budget=None, backend: str = "numpy", policy: BatchPolicy | None = None,
             gpu_budget: float = float("inf"), progress=None, return_meter: bool = False,
             persist: bool = False, volatile: Sequence[str] | None = None, client=None,
             out: Mapping[str, object] | None = None):
    """Evaluate equations; returns ``{equation name: NumPy array}`` (axes in result slot
    order), whatever the backend.

    ``eqs``: SeQuant text, an Equation or a sequence of them. ``extents``: the size of each
    index space, e.g. ``{"i": 10, "a": 38}``. ``tensors`` maps each tensor name to one of

    - one array (NumPy or any sliceable array-like: h5py, zarr, ``np.memmap``) whose axis at
      each slot spans, concatenated in ``extents`` order, the spaces the equations read at
      that slot (an axis spanning every space is accepted too);
    - a mapping from a tuple of space names to that block, e.g. ``{("a", "i"): t1}``;
    - a provider ``provider(spaces, ranges)`` returning the sub-block of block ``spaces``
      at ``ranges`` (one ``(start, stop)`` per slot); one taking only ``spaces`` returns
      the whole block and is refused when the plan reads that block in batches.

    Each batch reads only its own sub-block. With a budget (bytes, ``"5MB"``, or ``"25%"``
    of the unbatched peak) or a policy the evaluation runs batched so that its peak memory
    stays within the budget; an infeasible budget raises InfeasibleBudget before any work.
    ``backend``: numpy, cupy, auto, array_api_strict or dryrun (shapes only).
    ``client``: a ``distributed.Client``; the batches of the outermost loops then run as
    Dask tasks on its workers, each worker within the budget (needs
    ``pip install 'sequant-eval[dist]'``).
    ``out``: result name → sink (an array, ``np.memmap``, h5py dataset, or a callable
    ``sink(spaces, ranges, block)``): that result is written there batch by batch and never
    held whole (``Evaluator.evaluate``)."""
    return Evaluator(eqs, extents, budget, policy, persist=persist, progress=progress,
                     gpu_budget=gpu_budget, volatile=volatile).evaluate(
        tensors, backend, return_meter, client=client, out=out)


def analyze(eqs, extents: Mapping[str, int], budget=None,
            policy: BatchPolicy | None = None, workers: int | None = None,
            threads_per_worker: int = 1) -> Report:
    """Dry run: peak bytes, where it is reached, flops and loops, without any array. With
    ``workers``, also the predicted per-worker and client peaks of a cluster run
    (``Report.worker_peak_bytes``, ``Report.client_peak_bytes``, ``Report.cluster``)."""
    return Evaluator(eqs, extents, budget, policy).analyze(workers, threads_per_worker)


def min_budget(eqs, extents: Mapping[str, int], policy: BatchPolicy | None = None) -> int:
    """The smallest budget (bytes) under which the equations can be evaluated batched.

    It depends on the policy's batchable spaces and block sizes (default: every space, in
    both roles, default blocks), never on a budget; any budget at or above it fits."""
    if policy is not None and not isinstance(policy, BatchPolicy):
        raise PolicyError(f"policy must be a se.BatchPolicy, got {type(policy).__name__} "
                          f"{policy!r}; a budget is not needed here")
    return Evaluator(eqs, extents, policy=policy and replace(policy, budget=None)).min_budget()
