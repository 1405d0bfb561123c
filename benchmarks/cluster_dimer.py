"""The (H2O)2/cc-pVDZ CCSD residual at 25 % budget: one process vs a Dask LocalCluster.

Spin-orbital CCSD at the water dimer's extents (20 occupied, 76 virtual spin orbitals),
random amplitudes and integrals (the timing and the memory do not depend on the values);
the integral blocks ``g`` are ``np.memmap`` files in ``--dir`` (read per batch by path on
the workers), ``f``, ``t1``, ``t2`` in-memory arrays (scattered once per evaluation). The
schedule is fitted once at 25 % of the unbatched peak; both sides evaluate it:

- *one process*: ``Evaluator.evaluate(tensors)``;
- *cluster*: ``Evaluator.evaluate(tensors, client=...)`` on ``LocalCluster(n_workers=2,
  threads_per_worker=1, processes=True)``.

Rounds are interleaved (one process, cluster, one process, ...) after one warm-up each;
reported: median and min–max wall time per residual. A last cluster run traces every
task's allocations (tracemalloc inside the task) against the predicted per-worker peak.
Results are compared (largest relative difference, bitwise or not). ``--write`` puts the
numbers into the section "Distributed (Dask)" of ``docs/benchmarks.md``::

    python benchmarks/cluster_dimer.py --rounds 5 --dir /tmp/sequant-dist --write
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
# this file is named like the package it runs on: keep its folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.append(str(_HERE))
from doc_section import write_section  # noqa: E402
from side_by_side import side_by_side  # noqa: E402

SECTION = "## Distributed (Dask)"
EXT = {"i": 20, "a": 76}
MIB = 1 << 20


def _inputs(ev, directory: Path) -> dict:
    rng = np.random.default_rng(7)
    n = sum(EXT.values())
    directory.mkdir(parents=True, exist_ok=True)
    g = {}
    for v in ev.forest.values:
        if v.tensor == "g" and v.spaces not in g:
            shape = tuple(EXT[s] for s in v.spaces)
            path = directory / f"g_{''.join(v.spaces)}.npy"
            mm = np.lib.format.open_memmap(path, "w+", np.float64, shape)
            for k in range(shape[0]):                      # slab by slab
                mm[k] = rng.standard_normal(shape[1:])
            mm.flush()
            del mm
            g[v.spaces] = np.lib.format.open_memmap(path, "r")
    return {"f": rng.standard_normal((n, n)), "g": g,
            "t1": 0.1 * rng.standard_normal((EXT["a"], EXT["i"])),
            "t2": 0.1 * rng.standard_normal((EXT["a"], EXT["a"], EXT["i"], EXT["i"]))}


def run(args: argparse.Namespace) -> dict:
    import sequant_eval as se
    from sequant_eval.chem.equations import ccsd_equations

    ev = se.Evaluator(ccsd_equations(), EXT, budget="25%", progress=lambda *a: None)
    tensors = _inputs(ev, Path(args.dir))
    return {"system": "(H2O)2/cc-pVDZ spin-orbital CCSD residual", "extents": EXT,
            **side_by_side(ev, tensors, args.rounds)}


def section(r: dict) -> str:
    def span(xs):
        return f"{statistics.median(xs):.2f} s ({min(xs):.2f}–{max(xs):.2f})"

    mib = lambda b: f"{b / MIB:.1f} MiB"  # noqa: E731
    speed = statistics.median(r["one_process_s"]) / statistics.median(r["cluster_s"])
    return f"""{SECTION}

{r["system"]} (20 occupied, 76 virtual spin orbitals), random inputs, schedule fitted once
at 25 % of the unbatched peak (budget {mib(r["budget_bytes"])}); `g` blocks as `np.memmap`
files (the workers read their batches by path), `f`, `t1`, `t2` in memory (scattered).
Cluster: `LocalCluster(n_workers=2, threads_per_worker=1, processes=True)` on the same
2-core machine. {r["rounds"]} interleaved rounds after one warm-up each; load average
{r["load_before"][0]:.2f} before, {r["load_after"][0]:.2f} after (1-minute, `uptime`).

```bash
python benchmarks/cluster_dimer.py --rounds {r["rounds"]} --dir /tmp/sequant-dist --write
```

| | wall time per residual: median (min–max) |
|---|---|
| one process | {span(r["one_process_s"])} |
| 2 workers + client | {span(r["cluster_s"])} |

Speed-up {speed:.2f}x. {r["tasks"]} tasks in {r["blocks"]} outer blocks do
{100 * r["task_flops_share"]:.0f} % of the flops ({r["task_seconds"]:.2f} s of worker time
in all, traced run); the rest — the work outside the outer loops at this budget — runs on
the client, which shares the 2 cores with the workers. Results: largest relative
difference {r["max_rel_diff"]:.1e} ({"bitwise equal" if r["bitwise"] else
"not bitwise: the workers' BLAS runs single-threaded, the client's on 2 threads"}).

| memory | predicted | measured |
|---|---|---|
| per worker (largest task, one thread) | {mib(r["predicted_worker_peak_bytes"])} | metered {mib(r["max_task_metered_bytes"])}; traced in task {mib(r["max_task_traced_bytes"])} ({r["traced_over_predicted"]:.3f}x) |
| client (its steps + reduction buffers) | {mib(r["predicted_client_peak_bytes"])} | metered {mib(r["client_metered_bytes"])} |
| one process, for comparison | {mib(r["single_peak_bytes"])} | |
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/sequant-dist")
    ap.add_argument("--json")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    r = run(args)
    print(json.dumps(r, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    text = section(r)
    print(text)
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
