"""Real memory of one CCSD residual evaluation under a budget, and its time.

For spin-orbital CCSD on H2O/cc-pVDZ and (H2O)2/cc-pVDZ extents, with the inputs given three
ways (one full array per tensor, block mappings, h5py datasets on disk), at 100 / 50 / 25 /
10 % of the unbatched peak and at the smallest feasible budget, this reports

- the budget and the predicted peak (the dry run),
- the tracemalloc peak of one evaluation (NumPy registers its buffers with tracemalloc),
- the peak RSS growth of planning and a first evaluation over the process with its inputs
  (``VmHWM`` reset through ``/proc/self/clear_refs`` after the inputs exist, minus
  ``VmRSS`` then; it includes the planner's Python objects and the allocator's slack),
- the time of one evaluation against the unbatched one (median, min–max of interleaved
  rounds).

Every case runs in its own process so that RSS figures do not mix. The tensors are random
(the memory and the time do not depend on the values; exactness is the tests' job) at the
extents of the molecules: H2O/cc-pVDZ has 10 occupied and 38 virtual spin orbitals, the
dimer 20 and 76.

    python benchmarks/real_memory.py [--systems h2o,dimer] [--rounds 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

SYSTEMS = {"h2o": {"i": 10, "a": 38}, "dimer": {"i": 20, "a": 76}}
KINDS = ("full arrays", "block mappings", "h5py")
SHARES = (1.0, 0.5, 0.25, 0.10, "smallest")


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _tensors(ext: dict, kind: str, workdir: str):
    import numpy as np

    from sequant_eval.chem.equations import ccsd_equations
    import sequant_eval as se

    o, v = ext["i"], ext["a"]
    n = o + v
    rng = np.random.default_rng(1)
    full = {"f": rng.standard_normal((n, n)), "g": rng.standard_normal((n, n, n, n)),
            "t1": 0.01 * rng.standard_normal((v, o)),
            "t2": 0.01 * rng.standard_normal((v, v, o, o))}
    if kind == "full arrays":
        return full, None
    off = {"i": slice(0, o), "a": slice(o, n)}
    blocks: dict = {"t1": {("a", "i"): full["t1"]}, "t2": {("a", "a", "i", "i"): full["t2"]}}
    for val in se.Evaluator(ccsd_equations(), ext).forest.values:
        if val.tensor in ("f", "g"):
            blocks.setdefault(val.tensor, {})[val.spaces] = np.ascontiguousarray(
                full[val.tensor][tuple(off[s] for s in val.spaces)])
    del full
    if kind == "block mappings":
        return blocks, None
    import h5py

    path = os.path.join(workdir, "tensors.h5")
    with h5py.File(path, "w") as h5:
        for name, parts in blocks.items():
            for spaces, block in parts.items():
                h5[f"{name}/{''.join(spaces)}"] = block
    del blocks
    h5 = h5py.File(path, "r")
    return {name: {tuple(key): h5[f"{name}/{key}"] for key in h5[name]} for name in h5}, h5


def _refill_free_lists() -> None:
    """A full collection empties CPython's tuple free lists; the evaluation's small index
    tuples would refill them (~0.3 MB the interpreter keeps, whatever the data), which
    tracemalloc would charge to the evaluation. Refill them before measuring."""
    cache = [[tuple(range(k)) for _ in range(2000)] for k in range(1, 20)]
    del cache


def worker(system: str, kind: str, share, rounds: int) -> dict:
    """One case in this process: plan, warm up, then measure."""
    import gc

    import sequant_eval as se
    from sequant_eval.chem.equations import ccsd_equations

    ext = SYSTEMS[system]
    eqs = ccsd_equations()
    with tempfile.TemporaryDirectory() as workdir:
        tensors, h5 = _tensors(ext, kind, workdir)
        gc.collect()
        base_rss = _status("VmRSS")                   # imports and inputs
        _reset_hwm()
        top = se.analyze(eqs, ext).peak_bytes
        budget = se.min_budget(eqs, ext) if share == "smallest" else float(share) * top
        ev = se.Evaluator(eqs, ext, budget=budget)
        predicted = ev.analyze().peak_bytes
        ev.evaluate(tensors)                          # plans, builds graphs, evaluates
        rss_growth = _status("VmHWM") - base_rss      # everything this process added
        gc.collect()
        _refill_free_lists()
        tracemalloc.start()
        t0 = tracemalloc.get_traced_memory()[0]
        ev.evaluate(tensors)                          # one evaluation, graphs built
        traced = tracemalloc.get_traced_memory()[1] - t0
        tracemalloc.stop()
        plain = se.Evaluator(eqs, ext)
        plain.evaluate(tensors)
        mine, theirs = [], []
        for _ in range(rounds):                      # interleaved: batched, unbatched, ...
            gc.collect()
            t = time.perf_counter()
            ev.evaluate(tensors)
            mine.append(time.perf_counter() - t)
            gc.collect()
            t = time.perf_counter()
            plain.evaluate(tensors)
            theirs.append(time.perf_counter() - t)
        if h5 is not None:
            h5.close()
    ratios = [a / b for a, b in zip(mine, theirs)]
    return {"system": system, "kind": kind, "share": share, "budget": budget,
            "unbatched_peak": top, "predicted": predicted, "traced": traced,
            "rss_growth": rss_growth, "loops": len(ev.batched.analysis.rich.loops),
            "seconds": statistics.median(mine), "unbatched_seconds": statistics.median(theirs),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios)}


def _row(r: dict) -> str:
    mib = 2.0 ** 20
    share = r["share"] if r["share"] == "smallest" else f"{float(r['share']):.0%}"
    return (f"| {r['system']} | {r['kind']} | {share} | {r['budget'] / mib:.1f} | "
            f"{r['predicted'] / mib:.1f} | {r['traced'] / mib:.1f} "
            f"({r['traced'] / r['predicted']:.3f}×) | {r['rss_growth'] / mib:.1f} | {r['loops']} | "
            f"{r['seconds']:.3f} | {r['ratio']:.2f}× ({r['ratio_min']:.2f}–{r['ratio_max']:.2f}) |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--systems", default="h2o,dimer")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--worker", nargs=3, metavar=("SYSTEM", "KIND", "SHARE"))
    args = p.parse_args(argv)
    if args.worker:
        system, kind, share = args.worker
        share = share if share == "smallest" else float(share)
        print(json.dumps(worker(system, kind, share, args.rounds)))
        return 0
    rows = []
    print("| system | inputs | budget share | budget MiB | predicted MiB | traced MiB | "
          "RSS growth MiB | loops | s / residual | time vs unbatched (min–max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for system in args.systems.split(","):
        for kind in args.kinds.split(","):
            for share in SHARES:
                out = subprocess.run([sys.executable, __file__, "--rounds", str(args.rounds),
                                      "--worker", system, kind, str(share)],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(r)
                print(_row(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
