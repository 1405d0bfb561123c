"""The loop program against the unrolled op graph: size, memory and time against the batches.

For spin-orbital CCSD at H2O/cc-pVDZ extents (10 occupied, 38 virtual spin orbitals) at
100 / 50 / 25 / 10 % of the unbatched peak and at the smallest feasible budget, this reports

- loops and ops run per evaluation (what the unrolled graph has as nodes),
- the loop program's nodes and its traced bytes (program and executor tables, tracemalloc),
  beside the unrolled graph's nodes and traced bytes,
- the reserve charged to the budget for the program, the arrays' predicted peak, and the
  traced peak of the first evaluation (program build and kernel plans included, planning
  excluded) against arrays + reserve,
- the time of one evaluation by the loop program and by the unrolled graph (same schedule,
  same inputs, interleaved rounds: median and min–max).

    python benchmarks/loop_program.py [--rounds 5] [--json out.json] [--write-docs]
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc

import numpy as np

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.backends import get_backend
from sequant_eval.runtime.engine import run_graph
from sequant_eval.runtime.graph import Device
from sequant_eval.runtime.interpreter import _tables
from sequant_eval.runtime.lower import lower_schedule

EXT = {"i": 10, "a": 38}
SHARES = (1.0, 0.5, 0.25, 0.10, "smallest")


def _arrays(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    n = sum(EXT.values())
    return {"f": rng.standard_normal((n, n)), "g": rng.standard_normal((n,) * 4),
            "t1": 0.1 * rng.standard_normal((38, 10)),
            "t2": 0.1 * rng.standard_normal((38, 38, 10, 10))}


def _traced(build) -> tuple[object, int]:
    gc.collect()
    tracemalloc.start()
    out = build()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return out, size


def _first_evaluation(ev, arrays) -> int:
    ev.batched._programs.clear()
    gc.collect()
    cache = [[tuple(range(k)) for _ in range(2000)] for k in range(1, 20)]   # free lists
    del cache
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ev.evaluate(arrays)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def case(share, arrays, rounds: int) -> dict:
    eqs = ccsd_equations()
    top = se.analyze(eqs, EXT).peak_bytes
    budget = se.min_budget(eqs, EXT) if share == "smallest" else share * top
    ev = se.Evaluator(eqs, EXT, budget=budget)
    rep = ev.analyze()
    program = ev.batched
    program._programs.clear()
    def build():
        prog = program.program()
        _tables(prog)                            # the executor's release tables
        return prog

    prog, prog_bytes = _traced(build)
    low, low_bytes = _traced(lambda: lower_schedule(program.analysis))
    first = _first_evaluation(ev, arrays)
    source = TensorSource(ev.forest, arrays, EXT)
    backend = {Device.CPU: get_backend("numpy")}
    loop_s, graph_s = [], []
    for _ in range(rounds):                      # interleaved: program, graph, program, ...
        t = time.perf_counter()
        program.run("numpy", source)
        loop_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_graph(low.graph, low.root_nodes(), program.forest, backend, source, None, None,
                  low.form_of)
        graph_s.append(time.perf_counter() - t)
    return {"share": share, "budget": budget, "loops": len(program.sched.loops),
            "ops_run": len(low.graph), "program_nodes": prog.nodes,
            "program_bytes": prog_bytes, "unrolled_bytes": low_bytes,
            "reserve": rep.program_bytes, "arrays_peak": rep.peak_bytes,
            "first_traced": first, "first_ratio": first / rep.total_bytes,
            "loop_s": loop_s, "graph_s": graph_s}


def _med(xs) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})"


def table(rows: list[dict]) -> str:
    out = ["| budget | loops | ops run | program nodes | program KiB | unrolled KiB | "
           "reserve KiB | arrays MiB | first eval / (arrays + reserve) | loop program s | "
           "unrolled graph s |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = r["share"] if isinstance(r["share"], str) else f"{r['share']:.0%}"
        out.append(f"| {share} | {r['loops']} | {r['ops_run']} | {r['program_nodes']} | "
                   f"{r['program_bytes'] / 1024:.0f} | {r['unrolled_bytes'] / 1024:.0f} | "
                   f"{r['reserve'] / 1024:.0f} | {r['arrays_peak'] / 2**20:.2f} | "
                   f"{r['first_ratio']:.3f} | {_med(r['loop_s'])} | {_med(r['graph_s'])} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    arrays = _arrays()
    rows = [case(s, arrays, args.rounds) for s in SHARES]
    text = table(rows)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.write_docs:
        from doc_section import write_section

        write_section("## Loop program", "## Loop program\n\n" + (
            "Spin-orbital CCSD at H2O/cc-pVDZ extents (`python benchmarks/loop_program.py "
            f"--rounds {args.rounds}`): the loop program against the unrolled op graph of the "
            "same schedule. Times: median (min–max) of interleaved rounds.\n\n") + text)


if __name__ == "__main__":
    main()
