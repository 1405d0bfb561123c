"""Planning time: plan + fit a forest at 100/50/25/10 % of its unbatched peak, at the
minimum, and a refusal, for the packaged CC texts; and the planner's memory.

Each case is a text at extents (or a regime) with the default batch policy of
``se.analyze(budget=...)``: every plain space batchable in both roles. For every case:

* ``unbatched`` — the fit under no budget (what the shares are shares of);
* ``min`` — ``minimum_budget(..., run=False)``: the number ``se.min_budget`` returns
  (not the schedule to run there), from cold;
* ``100%`` … ``10%`` — ``fit_forest`` at that share of the unbatched peak, from cold;
* ``at min`` — ``fit_forest`` at the minimum itself, from cold;
* ``refusal`` — ``fit_forest`` at 90 % of the minimum (it must raise InfeasibleBudget),
  from cold, *without* reading the exception's ``minimum``.

"From cold" means on a freshly built forest, so nothing the planner remembers per forest
(term DPs, minima) carries over from another measurement; building the forest is not
timed. The timed runs of one round are interleaved over all cases and budgets; the table
shows the median and the min–max over ``--rounds``. After the timed rounds, one traced run
per case and budget measures the planner's ``tracemalloc`` peak (tracing slows it, so it
is never timed); the table shows the largest over the budgets.

The unrestricted CCSD text (``ccsd_u.txt``: alpha ``i``/``a``, beta ``I``/``A``) is measured
at OH-like extents (i5a1I4A2, STO-3G-sized) and at H2O/cc-pVDZ-like ones (i5a19I5A19).

CCSDT (``ccsdt_so.txt``) is taken from the package when present, else from ``--ccsdt
PATH``, else skipped; ``ccsdt_so+sink`` is the same with ``R3`` written to a sink
(``out={"R3": ...}``: ``BatchPolicy(sinks=...)``), so R3 is never held.

Run ``python benchmarks/planning.py [--rounds N] [--only NAME,...] [--json PATH]``.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import sequant_eval as se
from sequant_eval.errors import InfeasibleBudget
from sequant_eval.expr import parse
from sequant_eval.forest import build_forest
from sequant_eval.plan import BatchPolicy
from sequant_eval.plan.regime import Regime, load_regime
from sequant_eval.schedule.budget import fit_forest, minimum_budget

ROOT = Path(__file__).resolve().parent.parent
WATER20 = ROOT / "data" / "water20"
SHARES = (1.0, 0.5, 0.25, 0.10)
REFUSE = 0.9           # the refusal is asked at this share of the minimum


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    regime: Regime
    sinks: tuple = ()          # results written to a sink (out=), not held

    def forest(self):
        """A fresh forest (nothing the planner remembers per forest carries over)."""
        eqs = tuple(parse(self.text))
        return build_forest(eqs, self.regime if self.regime.moments else self.regime.extents)

    def policy(self, budget) -> BatchPolicy:
        return BatchPolicy.everything(budget, self.regime.extents, sinks=self.sinks)


def _package_text(name: str) -> str | None:
    path = files("sequant_eval.chem") / "data" / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


def cases(ccsdt: str | None) -> list[Case]:
    so, cs = _package_text("ccsd_so.txt"), _package_text("ccsd_cs.txt")
    out = [Case("ccsd_so i10a4", so, Regime.from_extents({"i": 10, "a": 4})),
           Case("ccsd_so i10a38", so, Regime.from_extents({"i": 10, "a": 38})),
           Case("ccsd_so i20a76", so, Regime.from_extents({"i": 20, "a": 76})),
           Case("ccsd_cs i5a19", cs, Regime.from_extents({"i": 5, "a": 19})),
           Case("ccsd_cs i10a38", cs, Regime.from_extents({"i": 10, "a": 38}))]
    u = _package_text("ccsd_u.txt")
    if u is not None:       # unrestricted: alpha i/a, beta I/A (OH-like, H2O/cc-pVDZ-like)
        out += [Case("ccsd_u i5a1I4A2", u, Regime.from_extents({"i": 5, "a": 1, "I": 4, "A": 2})),
                Case("ccsd_u i5a19I5A19", u,
                     Regime.from_extents({"i": 5, "a": 19, "I": 5, "A": 19}))]
    regime = load_regime(WATER20 / "regime.json")
    for part in ("energy", "singles_residual", "doubles_residual"):
        text = (WATER20 / f"csv_ccsd_{part}_df.txt").read_text(encoding="utf-8")
        out.append(Case(f"df {part.split('_')[0]} water20", text, regime))
    text = _package_text("ccsdt_so.txt")
    if text is None and ccsdt:
        text = Path(ccsdt).read_text(encoding="utf-8")
    if text is not None:
        sink = (("R3", "accumulate"),)
        out += [Case("ccsdt_so i10a16", text, Regime.from_extents({"i": 10, "a": 16})),
                Case("ccsdt_so i10a38", text, Regime.from_extents({"i": 10, "a": 38})),
                Case("ccsdt_so+sink i10a16", text, Regime.from_extents({"i": 10, "a": 16}),
                     sink),
                Case("ccsdt_so+sink i10a38", text, Regime.from_extents({"i": 10, "a": 38}),
                     sink)]
    return out


def _fit(case: Case, forest, budget) -> tuple[str, int]:
    try:
        return "fit", fit_forest(forest, case.regime, case.policy(budget)).peak_bytes
    except InfeasibleBudget:
        return "refused", 0


def measure(case: Case, what: str, ref: dict) -> tuple[float, str, int]:
    """One cold measurement: seconds, outcome, bytes (peak or minimum)."""
    forest = case.forest()
    gc.collect()
    t = time.perf_counter()
    if what == "unbatched":
        got = ("fit", fit_forest(forest, case.regime, BatchPolicy()).peak_bytes)
    elif what == "min":
        got = ("min", minimum_budget(forest, case.regime, case.policy(None), run=False)[0])
    elif what == "at min":
        got = _fit(case, forest, ref["min"])
    elif what == "refusal":
        got = _fit(case, forest, REFUSE * ref["min"])
    else:
        got = _fit(case, forest, float(what.rstrip("%")) / 100 * ref["unbatched"])
    return time.perf_counter() - t, *got


COLUMNS = ["unbatched"] + [f"{s * 100:g}%" for s in SHARES] + ["min", "at min", "refusal"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--ccsdt", default=None, help="a CCSDT text when the package has none")
    ap.add_argument("--no-memory", action="store_true", help="skip the traced runs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    todo = [c for c in cases(args.ccsdt)
            if not args.only or any(s in c.name for s in args.only.split(","))]
    refs: dict[str, dict] = {}
    for c in todo:                       # the references the shares are taken of
        refs[c.name] = {"unbatched": measure(c, "unbatched", {})[2]}
        refs[c.name]["min"] = measure(c, "min", {})[2]
        print(f"# {c.name}: unbatched peak {refs[c.name]['unbatched']} B, minimum "
              f"{refs[c.name]['min']} B", file=sys.stderr, flush=True)
    times: dict[tuple[str, str], list[float]] = {}
    outcome: dict[tuple[str, str], tuple[str, int]] = {}
    for r in range(args.rounds):
        for c in todo:
            for col in COLUMNS:
                s, kind, got = measure(c, col, refs[c.name])
                times.setdefault((c.name, col), []).append(s)
                outcome[(c.name, col)] = (kind, got)
        print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    memory: dict[str, int] = {}
    if not args.no_memory:
        for c in todo:
            worst = 0
            for col in COLUMNS[1:]:
                tracemalloc.start()
                measure(c, col, refs[c.name])
                worst = max(worst, tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
            memory[c.name] = worst
    head = f"| case | {' | '.join(COLUMNS)} | planner MiB |"
    print(head)
    print("|" + "---|" * (len(COLUMNS) + 2))
    for c in todo:
        cells = []
        for col in COLUMNS:
            ts = times[(c.name, col)]
            med = statistics.median(ts)
            cell = f"{med:.2f}" + (f" ({min(ts):.2f}–{max(ts):.2f})" if len(ts) > 1 else "")
            if outcome[(c.name, col)][0] == "refused" and col != "refusal":
                cell += " REFUSED"
            if col == "refusal" and outcome[(c.name, col)][0] != "refused":
                cell += " FIT?!"
            cells.append(cell)
        mem = f"{memory[c.name] / 2**20:.1f}" if c.name in memory else "-"
        print(f"| {c.name} | {' | '.join(cells)} | {mem} |")
    if args.json:
        data = {"version": se.__version__ if hasattr(se, "__version__") else "",
                "rounds": args.rounds,
                "cases": {c.name: {"unbatched_peak": refs[c.name]["unbatched"],
                                   "minimum": refs[c.name]["min"],
                                   "planner_peak_bytes": memory.get(c.name),
                                   "seconds": {col: times[(c.name, col)] for col in COLUMNS},
                                   "outcome": {col: list(outcome[(c.name, col)])
                                               for col in COLUMNS}}
                          for c in todo}}
        Path(args.json).write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
