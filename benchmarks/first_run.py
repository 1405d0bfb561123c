#!/usr/bin/env python3
"""Cold starts: ours against PySCF ``cc.CCSD``, each run in a fresh process.

    python benchmarks/first_run.py [--systems h2o] [--rounds 11] [--cache DIR] [--imported]

Per round and system, four fresh processes in turn (ours / PySCF whole run, ours / PySCF
first iteration), each timing from the converged SCF (computed before the timer; the CC
package imported inside it) to the end of:

  whole       the converged CCSD (PySCF's default thresholds)
  first       the first iteration (``max_cycle=1``): ours plans, builds the integral
              blocks and evaluates one residual; PySCF transforms the integrals, makes
              the MP2 guess and takes one step

Medians with min-max of each, and the median of the paired ratios (ours over PySCF in the
same round). ``--cache DIR`` runs ours with ``SEQUANT_EVAL_CACHE=DIR`` (plans remembered
on disk; the first round fills it). ``--imported``: each CC package is imported before the
timer (as a script that imports at its top has done before it calls anything), so the
figures are the work alone. The package's bytecode should be compiled first (a
wheel install does; ``python -m compileall`` in a source checkout whose environment sets
``PYTHONDONTWRITEBYTECODE``), or the first figures include compiling it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from closed_shell import SYSTEMS  # noqa: E402

_CHILD = r"""
import sys, time
from pyscf import gto, scf
code, kind, atom, imported = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
mf = scf.RHF(gto.M(atom=atom, basis="cc-pvdz", verbose=0)).run(conv_tol=1e-10)
cycles = {"whole": None, "first": 1}[kind]
if imported:
    from pyscf import cc
    import sequant_eval.chem
t = time.perf_counter()
if code == "pyscf":
    from pyscf import cc
    m = cc.CCSD(mf)
    m.verbose = 0
    if cycles:
        m.max_cycle = cycles
    m.kernel()
else:
    import sequant_eval.chem as sc
    m = sc.CCSD(mf, **({"max_cycle": cycles} if cycles else {}))
    m.run()
print(time.perf_counter() - t)
"""


def _once(code: str, kind: str, system: str, cache: str | None, imported: bool) -> float:
    env = dict(os.environ)
    if cache and code == "ours":
        env["SEQUANT_EVAL_CACHE"] = cache
    out = subprocess.run([sys.executable, "-c", _CHILD, code, kind, SYSTEMS[system],
                          "1" if imported else "0"],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="h2o")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--cache", default=None, help="ours with SEQUANT_EVAL_CACHE=DIR")
    ap.add_argument("--imported", action="store_true",
                    help="import both CC packages before the timer")
    args = ap.parse_args()
    load = os.getloadavg()
    for system in args.systems.split(","):
        got: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for kind in ("whole", "first"):
                for code in ("ours", "pyscf"):
                    got.setdefault((code, kind), []).append(
                        _once(code, kind, system, args.cache, args.imported))
        print(f"**{system}**, {args.rounds} rounds, load {load[0]:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after" + (f", cache {args.cache}" if args.cache else "")
              + (", packages imported before the timer" if args.imported else ""))
        print("| run | ours s | PySCF s | ours ÷ PySCF (paired median, min–max) |")
        print("|---|---|---|---|")
        for kind in ("whole", "first"):
            ours, ref = got[("ours", kind)], got[("pyscf", kind)]
            pairs = [a / b for a, b in zip(ours, ref)]
            print(f"| {kind} | {statistics.median(ours):.3f} ({min(ours):.3f}–{max(ours):.3f}) "
                  f"| {statistics.median(ref):.3f} ({min(ref):.3f}–{max(ref):.3f}) "
                  f"| {statistics.median(pairs):.2f} ({min(pairs):.2f}–{max(pairs):.2f}) |")


if __name__ == "__main__":
    main()
