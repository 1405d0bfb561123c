"""Sums whose summand is symmetric in a group of indices, evaluated over ordered block tuples.

The (T) energy is ``E = Σ_abc e(a, b, c)`` where ``e`` (everything else summed) does not
change when ``a, b, c`` are permuted, so the terms with ``a ≥ b ≥ c`` hold all the
information, and what each term needs for all six orderings of its labels is made once.
PySCF's ``ccsd_t`` kernel walks those triples one by one in C; here the restriction is
made on blocks, so each piece of work stays a few large contractions:

- the space of the group (``a``) is cut into blocks ``B_0, B_1, ...``;
- for every non-increasing block tuple (``p ≥ q ≥ r`` for three indices) the equations
  are evaluated with ``a_1 ∈ B_p``, ``a_2 ∈ B_q``, ``a_3 ∈ B_r`` (each group index given a
  space of its own whose extent is its block's) by an ordinary :class:`Evaluator`;
- each tuple's results are weighed by the number of distinct tuples its permutations make
  (6, 3 or 1 for three indices: ``m! / Π multiplicity!``) and summed.

Summing ``e`` over all tuples of blocks is summing over one tuple of each orbit, times the
orbit's size, because ``e`` is symmetric. Group indices whose blocks coincide share one
space in the evaluated equations (``(p, p, r)``: ``a_1`` and ``a_2`` both range over
``B_p``), so two intermediates that differ only by swapping them are one value of the
forest (``share_subproducts``) and nothing is computed twice on the diagonal tuples.

The symmetry is the caller's declaration and is not checked here (it cannot be, short of
evaluating every tuple); the (T) energy's is tested against the sum over every tuple and
PySCF. What is checked (``api/block_spaces.py``, before any work): the group indices are
one space, never a final result's index, summed over by every term of a result, read in
the slots that define them wherever an intermediate is read (so that each block space
means the same block everywhere), and acted on by no operator; and the tensors are of a
kind the block-shifted reads can serve.

Memory: each worker (thread) evaluates one tuple at a time; what the process holds at
most is, added over the workers, the largest peak of a worker's tuples plus its running
sums, with every tuple kind's program reserve charged per worker under a budget (where one
kind runs whole alone, its own program's bound, ``_own_reserve``). The block
size is the largest whose tuple evaluations fit a worker's share of the budget whole and
stay within :data:`TUPLE_BYTES` (past it the passes leave the cache); each evaluator still
batches inside when even the smallest block does not fit whole.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import factorial, prod

import numpy as np

from ..budget import Budget
from ..errors import InfeasibleBudget, UnknownSpace, UnsupportedFeature, UsageError
from ..expr import Equation, check_extents
from ..expr.index import mode_space
from ..expr.stages import as_equations
from ..forest.build import mode_extent
from ..runtime.program import reserve_bound
from ..units import format_bytes
from .block_spaces import Shifted, check_inputs, group_indices, respaced
from .evaluator import Evaluator

__all__ = ["SymmetricSum", "SymmetricReport", "SymmetricMeter", "ordered_tuples",
           "orbit_size", "TUPLE_BYTES", "WHOLE_BYTES"]

#: The largest peak of one tuple's evaluation a chosen block gives, budget or not: past
#: a few MiB per array the passes over each tuple's intermediates leave the cache and the
#: evaluation slows (the (T) energy of (H2O)2/cc-pVDZ: 1.02 s at blocks of 8 virtuals,
#: 20 MiB a tuple; 1.28 s at 13, 88 MiB; 7.3 s as one block, 2.2 GiB).
TUPLE_BYTES = 32 * 2**20
#: The largest peak at which the whole space is taken as one block when it fits: one tuple
#: kind to plan and lower instead of up to eight, which is most of a small sum's first
#: call (the (T) energy of H2O/cc-pVDZ, 33 MiB as one block: 0.25 → 0.08 s).
WHOLE_BYTES = 2 * TUPLE_BYTES


def ordered_tuples(blocks: int, size: int) -> list[tuple[int, ...]]:
    """The non-increasing tuples of ``size`` block numbers below ``blocks``, in a fixed
    order (one per orbit of the permutations)."""
    return [t[::-1] for t in itertools.combinations_with_replacement(range(blocks), size)]


def orbit_size(blocks: tuple[int, ...]) -> int:
    """How many distinct tuples the permutations of ``blocks`` make."""
    runs = [len(list(g)) for _, g in itertools.groupby(blocks)]
    return factorial(len(blocks)) // prod(factorial(n) for n in runs)


@dataclass(frozen=True)
class SymmetricReport:
    """The dry run: ``peak_bytes`` per worker the largest peak of its tuples plus its
    running sums, added over the workers; ``program_bytes`` every tuple kind's program
    reserve, per worker (0 unbudgeted); ``flops`` over all tuples; ``block`` the block
    size; ``tuples`` how many tuples are evaluated, of ``blocks`` blocks, by ``workers``
    at a time; ``kinds`` the tuple kinds' reports (one worker's)."""

    peak_bytes: int
    program_bytes: int
    flops: int
    block: int
    blocks: int
    tuples: int
    workers: int
    kinds: tuple
    budget_bytes: float | None

    @property
    def total_bytes(self) -> int:
        """What a budget bounds: the peak plus the programs."""
        return self.peak_bytes + self.program_bytes


@dataclass(frozen=True)
class SymmetricMeter:
    """What the evaluation measured: per worker, the largest metered peak of its tuples
    plus its running sums, added over the workers; the flops of all tuples."""

    peak_bytes: int
    flops: float
    tuples: int


class SymmetricSum:
    """Equations summed over ``group`` (labels such as ``("a_1", "a_2", "a_3")``, one space)
    whose summand the caller declares symmetric under permutations of the group, evaluated
    over the non-increasing tuples of blocks of that space only (module docstring).

    ``block``: the block size (default: the whole space where one block fits ``budget``
    — bytes, text, or a share of the unbatched peak, one block's — and peaks within
    :data:`WHOLE_BYTES`; else the largest whose tuple evaluations fit it whole and peak
    within :data:`TUPLE_BYTES`). ``workers``: tuples evaluated at once, each by a
    thread of its own with its own evaluators (NumPy releases the interpreter in its
    kernels), the BLAS held to one thread meanwhile; each worker holds its own tuple, so
    a budget is shared out between them, and one is used where a budget does not fit
    them all with blocks of more than one element and at least half one worker's (the
    work is the same at any block, but each of the (v/b)³/6 tuples adds its overhead).

    Results are the equations no other equation reads; none may carry a group index, and
    every term of one sums over the whole group; they are summed in a fixed order (the
    same bits every time). The tensors are read through providers, so the evaluation runs
    in float64 (float32 inputs too; complex ones are refused)."""

    def __init__(self, eqs: str | Equation | Sequence[Equation], extents: Mapping[str, int],
                 group: Sequence[str], block: int | None = None, budget=None,
                 workers: int = 1) -> None:
        self.equations = as_equations(eqs)
        self.extents = check_extents(extents)
        used = {ix.space for eq in self.equations for p in eq.terms for t in p.factors
                for ix in t.slots} | {ix.space for eq in self.equations for ix in eq.indices}
        missing = sorted(used - set(self.extents))
        if missing:
            raise UnknownSpace(f"space {missing[0]!r} of the equations has no extent; give "
                               f"it in extents, e.g. {{{missing[0]!r}: 10}}")
        self.group = group_indices(self.equations, group)
        self.space = self.group[0].space
        if self.space not in self.extents:
            raise UsageError(f"the group's space {self.space!r} has no extent; give it in "
                             f"extents")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise UsageError(f"workers must be a positive integer, got {workers!r}")
        self.budget = Budget.parse(budget)
        read = {t.name for eq in self.equations for p in eq.terms for t in p.factors}
        self.outputs = tuple(eq.name for eq in self.equations if eq.name not in read)
        self._results = sum(_result_bytes(eq, self.extents) for eq in self.equations
                            if eq.name in self.outputs)
        extent = self.extents[self.space]
        if block is not None and (isinstance(block, bool) or not isinstance(block, int)
                                  or not 1 <= block <= extent):
            raise UsageError(f"block must be an integer from 1 to the extent of space "
                             f"{self.space!r} ({extent}), got {block!r}")
        self._evaluators: dict[tuple, object] = {}
        self._planned: dict[int, list] = {}
        self._reserves: list[int] = []        # each kind's program reserve (0 unbudgeted)
        if self.budget.share is not None:          # of the unbatched peak: one block,
            whole = self._whole()
            self.budget = Budget.parse(self.budget.bytes_for(     # its program on top
                whole.analyze().peak_bytes + self._results, whole.program_reserve()))
        self.workers = self._chosen_workers(workers)
        self.block = block if block is not None else self._chosen_block(extent)
        if block is None and self.workers > 1 and not self.budget.unlimited:
            n, many = self.workers, self.block      # the budget shared out, blocks shrink:
            self.workers = 1                        # the work is the same at any block,
            alone = self._chosen_block(extent)      # but each tuple costs its overhead
            if many > 1 and 2 * many >= alone:
                self.workers, self.block = n, many
            else:
                self.block = alone
        tuples = len(ordered_tuples(len(self._ranges(self.block)), len(self.group)))
        self.workers = min(self.workers, tuples)      # no worker without a tuple

    # ----------------------------------------------------------------- tuples
    def _ranges(self, block: int) -> list[tuple[int, int]]:
        extent = self.extents[self.space]
        return [(lo, min(lo + block, extent)) for lo in range(0, extent, block)]

    def _kind(self, ranges, blocks: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The spaces of the group indices at tuple ``blocks`` (coinciding blocks share
        one, except with blocks of one element: then one kind serves every tuple, and one
        program, the least a tight budget must hold) and each space's extent."""
        one = all(hi - lo == 1 for lo, hi in ranges)
        spaces = tuple(f"{self.space}#{k if one else blocks.index(b)}"
                       for k, b in enumerate(blocks))
        return spaces, tuple(ranges[b][1] - ranges[b][0] for b in blocks)

    def _evaluator(self, spaces: tuple[str, ...], sizes: tuple[int, ...], budget,
                   worker: int = 0):
        key = (spaces, sizes, budget, worker)
        ev = self._evaluators.get(key)
        if ev is None:
            rename = dict(zip(self.group, spaces))
            eqs = [respaced(eq, rename) for eq in self.equations]
            extents = dict(self.extents)
            extents.update(zip(spaces, sizes))
            ev = Evaluator(eqs, extents, budget, share_subproducts=True)
            self._evaluators[key] = ev
        return ev

    def _kinds(self, block: int) -> dict[tuple, list[tuple[int, ...]]]:
        """Each tuple kind (spaces, sizes) and its tuples, in order."""
        ranges = self._ranges(block)
        kinds: dict[tuple, list] = {}
        for t in ordered_tuples(len(ranges), len(self.group)):
            kinds.setdefault(self._kind(ranges, t), []).append(t)
        return kinds

    # ----------------------------------------------------------------- memory
    def _share(self, workers: int | None = None) -> float:
        """Each worker's part of the budget (inf unbudgeted)."""
        n = self.workers if workers is None else workers
        return float("inf") if self.budget.unlimited else self.budget.fixed / n

    def _one_need(self) -> int:
        """What one worker needs at blocks of one element, evaluated whole (one kind)."""
        m = len(self.group)
        one = self._evaluator(tuple(f"{self.space}#{k}" for k in range(m)), (1,) * m, None)
        return one.analyze().peak_bytes + _own_reserve(one) + self._results

    def _chosen_workers(self, asked: int) -> int:
        """``asked``, or fewer while each one's share of the budget would not hold blocks
        of one element whole (at least one: its evaluator batches inside, or refuses)."""
        n = asked
        while n > 1 and self._share(n) < self._one_need():
            n -= 1
        return n

    def _fits(self, block: int) -> bool:
        """Whether a worker's share of the budget holds a tuple of ``block`` (> 1) whole
        and every kind's program: first against a bound, the distinct kind's peak and its
        program reserve times the number of kinds (the distinct kind holds the most
        values and the largest program; the others share some or are smaller), which
        plans only that kind; where the bound does not fit, every kind exactly. Blocks
        so large that no tuple has distinct ones are taken only where blocks of one
        element would fit whole too, so that a budget is feasible exactly from the
        minimum up (``_refused``)."""
        if self.budget.unlimited:
            return True
        m = len(self.group)
        distinct = self._evaluator(tuple(f"{self.space}#{k}" for k in range(m)),
                                   (block,) * m, None)
        kinds = self._kinds(block)
        peak = distinct.analyze().peak_bytes + self._results
        if peak + len(kinds) * distinct.program_reserve() > self._share():     # then exactly
            plain = [self._evaluator(s, z, None) for s, z in kinds]
            if (max(ev.analyze().peak_bytes for ev in plain) + self._results
                    + sum(ev.program_reserve() for ev in plain)) > self._share():
                return False
        return len(self._ranges(block)) >= len(self.group) or (
            self._one_need() <= self._share())

    def _whole(self):
        """The evaluator of one block (every tuple one kind: all group indices one space)."""
        extent = self.extents[self.space]
        return self._evaluator(*self._kind([(0, extent)], (0,) * len(self.group)), None)

    def _whole_need(self) -> float:
        """What one worker needs for one block evaluated whole, its program charged; inf
        where its peak passes :data:`WHOLE_BYTES` (too large to be worth it)."""
        whole = self._whole()
        peak = whole.analyze().peak_bytes
        if peak > WHOLE_BYTES:
            return float("inf")
        return peak + self._results + (0 if self.budget.unlimited else _own_reserve(whole))

    def _distinct_peak(self, block: int) -> int:
        """The unbatched peak of a tuple of distinct blocks of size ``block`` (the
        largest kind: nothing shared)."""
        m = len(self.group)
        spaces = tuple(f"{self.space}#{k}" for k in range(m))
        return self._evaluator(spaces, (block,) * m, None).analyze().peak_bytes

    def _chosen_block(self, extent: int) -> int:
        """The whole space where one block fits a worker's share and peaks within
        :data:`WHOLE_BYTES`; else the largest block whose distinct tuples peak within
        :data:`TUPLE_BYTES` and the share (guessed from the whole block's peak by the cube
        law, then walked to); where the kinds with their programs then do not fit, the
        largest smaller one that does, searched by halving; at 1 the one kind's evaluator
        batches inside where it must (or refuses)."""
        cap = min(TUPLE_BYTES, self._share() - self._results)
        if cap <= 0:
            return 1                            # refused when planned (``_refused``)
        whole = self._whole_need()
        if whole < float("inf") and whole <= self._share():
            return extent                       # one block, one kind, one program
        full = self._distinct_peak(extent)   # the peak grows about as the block's cube:
        lo = extent if full <= cap else max(1, int(extent * (cap / full) ** (1 / 3)))
        if self._distinct_peak(lo) <= cap:   # then walk to the largest that fits
            while lo < extent and self._distinct_peak(lo + 1) <= cap:
                lo += 1
        else:
            while lo > 1 and self._distinct_peak(lo) > cap:
                lo -= 1
        if lo > 1 and not self._fits(lo):      # the largest that fits with its programs
            hi, lo = lo - 1, 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._fits(mid):
                    lo = mid
                else:
                    hi = mid - 1
        return lo

    def _budgeted(self, worker: int = 0) -> list[tuple[object, tuple, list]]:
        """Each tuple kind's evaluator of ``worker`` under its share of the budget (what
        the other kinds' programs and the running sums leave), its spaces and tuples;
        planned once."""
        if worker not in self._planned:
            self._planned[worker] = self._plan(worker)
        return self._planned[worker]

    def _plan(self, worker: int) -> list[tuple[object, tuple, list]]:
        kinds = self._kinds(self.block)
        plain = [self._evaluator(s, z, None, worker) for s, z in kinds]
        if self.budget.unlimited:
            self._reserves = [0] * len(plain)
            return [(ev, s, ts) for ev, ((s, _), ts) in zip(plain, kinds.items())]
        if len(plain) == 1:                   # one kind: whole where its own program fits
            own = _own_reserve(plain[0])
            if plain[0].analyze().peak_bytes + own <= self._share() - self._results:
                self._reserves = [own]
                (spaces, _), tuples = next(iter(kinds.items()))
                return [(plain[0], spaces, tuples)]
        reserves = [self._evaluator(s, z, None).program_reserve() for s, z in kinds]
        self._reserves = reserves
        out = []
        for k, ((s, z), ts) in enumerate(kinds.items()):
            room = self._share() - self._results - (sum(reserves) - reserves[k])
            ev = plain[k]                     # whole, where it fits with its program
            if ev.analyze().peak_bytes + reserves[k] > room:
                if room <= 0:
                    raise self._refused()
                try:                          # else batched inside, its program charged
                    ev = self._evaluator(s, z, float(room), worker)
                    ev.analyze()
                except InfeasibleBudget as err:
                    raise self._refused() from err
            out.append((ev, s, ts))
        return out

    def _refused(self) -> InfeasibleBudget:
        budget = self.budget.fixed

        def least() -> float:                  # one worker: blocks of one element, or
            (spaces, sizes), = self._kinds(1)  # one block whole where that needs less
            one = self._evaluator(spaces, sizes, None).min_budget() + self._results
            return min(one, self._one_need(), self._whole_need())
        return InfeasibleBudget(
            f"budget {format_bytes(budget)} ({int(budget)} B) for the sum over ordered "
            f"tuples of {self.space} blocks: even blocks of one {self.space} index do not fit "
            f"it; raise the budget (InfeasibleBudget.minimum is the smallest that works)",
            budget, least)

    def _assigned(self, kinds) -> list[list[tuple[int, int]]]:
        """Per worker, its (kind, tuple) positions: dealt round-robin in tuple order."""
        flat = [(k, j) for k, (_, _, ts) in enumerate(kinds) for j in range(len(ts))]
        return [flat[w::self.workers] for w in range(self.workers)]

    def analyze(self) -> SymmetricReport:
        """The dry run over every tuple kind (planned now: a budget that does not fit is
        refused here, before any work). The peak is every worker's largest tuple peak
        plus its running sums, added: the workers may reach theirs at once."""
        kinds = self._budgeted()
        reports = [ev.analyze() for ev, _, _ in kinds]
        peaks = [max(reports[k].peak_bytes for k, _ in part) + self._results
                 for part in self._assigned(kinds) if part]
        return SymmetricReport(
            peak_bytes=sum(peaks),
            program_bytes=sum(self._reserves) * len(peaks),
            flops=sum(r.flops * len(ts) for r, (_, _, ts) in zip(reports, kinds)),
            block=self.block, blocks=len(self._ranges(self.block)),
            tuples=sum(len(ts) for _, _, ts in kinds), workers=self.workers,
            kinds=tuple(reports),
            budget_bytes=None if self.budget.unlimited else float(self.budget.fixed))

    # ----------------------------------------------------------------- running
    def evaluate(self, tensors: Mapping[str, object], backend: str = "numpy",
                 return_meter: bool = False):
        """``{result: array}``: the weighted sum over the ordered tuples; with
        ``return_meter`` also a :class:`SymmetricMeter`."""
        if backend == "dryrun":
            raise UnsupportedFeature("a symmetric sum has no dry-run evaluation: its dry run "
                                     "is SymmetricSum.analyze() (peak, flops, blocks)")
        check_inputs(tensors, self.equations, self.extents)
        per_worker = [self._budgeted(w) for w in range(self.workers)]
        parts = self._assigned(per_worker[0])

        def run(w: int):
            return self._run(per_worker[w], parts[w], tensors, backend)
        if self.workers == 1 or backend != "numpy":
            done = [run(w) for w in range(self.workers)]
        else:
            from concurrent.futures import ThreadPoolExecutor

            for kinds in per_worker:            # fitted and lowered here, one at a time:
                for ev, _, _ in kinds:          # the workers' evaluators share forests
                    ev.prepare()                # and fits, which are built lazily

            from threadpoolctl import threadpool_limits
            with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(
                    self.workers, thread_name_prefix="sequant-eval-tuples") as pool:
                done = list(pool.map(run, range(self.workers)))
        sums: dict[str, object] = {}
        for part, _, _ in done:                  # in worker order: the same bits each time
            for name, value in part.items():
                if name in sums:
                    sums[name] += value          # the first worker's own array, in place
                else:
                    sums[name] = value
        result = {name: (float(v) if np.ndim(v) == 0 else v) for name, v in sums.items()}
        if not return_meter:
            return result
        return result, SymmetricMeter(sum(peak for _, peak, _ in done if peak),
                                      sum(f for _, _, f in done), sum(map(len, parts)))

    def _run(self, kinds, part, tensors, backend):
        """One worker's tuples: its weighted sums, its peak (largest tuple peak plus the
        sums; 0 with no tuple) and its flops."""
        ranges = self._ranges(self.block)
        sums: dict[str, object] = {}
        peak, flops = 0, 0.0
        for k, j in part:
            ev, spaces, tuples = kinds[k]
            t = tuples[j]
            shifts = {space: ranges[b][0] for space, b in zip(spaces, t)}
            given = {name: Shifted(name, value, self.space, shifts, self.extents)
                     for name, value in tensors.items()}
            out, meter = ev.evaluate(given, backend, return_meter=True)
            weight = orbit_size(t)
            for name in self.outputs:           # in place: no result-sized temporary
                term = np.asarray(out[name])
                if term.ndim and term.flags.writeable:
                    np.multiply(term, weight, out=term)
                else:
                    term = term * weight
                if name in sums:
                    sums[name] += term
                else:
                    sums[name] = term
            del out, term
            peak = max(peak, meter.peak_bytes + self._results)
            flops += meter.flops
        return sums, peak, flops




def _own_reserve(ev: Evaluator) -> int:
    """The program charge of a kind evaluated whole, alone: the bound of its own unbatched
    programs, every stage's (``reserve_bound`` without growth: those are the programs that
    run). A kind batched inside, or beside other kinds, is charged ``program_reserve()``,
    which allows for growth."""
    return sum(reserve_bound(program, growth=1.0) for program in ev.prepare())


def _result_bytes(eq: Equation, extents: Mapping[str, int]) -> int:
    """Bytes of ``eq``'s result in float64 (what a worker's running sum of it holds)."""
    return 8 * prod(mode_extent(mode_space(ix), extents) for ix in eq.indices)
