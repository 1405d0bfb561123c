#!/usr/bin/env python3
"""The (T) step alone: ours (chem/triples.py) beside PySCF's ``ccsd_t.kernel``.

    python benchmarks/triples.py [--systems water,dimer,trimer,oh,cation,water_so]
                                 [--rounds 3] [--budgets none,o3v3:0.05] [--json F]

Systems, cc-pVDZ, all electrons correlated: closed_shell.py's water, dimer and trimer
(RHF), the doublets OH and (H2O)+ (UHF, the unrestricted (T)), and water_so, the water's
spin orbitals (PySCF's GCCSD amplitudes on the GHF of the RHF; PySCF's ``gccsd_t``, NumPy
einsum over whole o³v³ arrays, against the spin-orbital (T)). A budget is bytes, text,
a share (``10%``) or ``o3v3:F``, F times the bytes of one o³v³ array. A prep process runs
the SCF and PySCF's CCSD (UCCSD for a doublet, GCCSD for spin orbitals) once per system
and stores the amplitudes; every
timed call is a fresh worker process (so each peak RSS is its own) that runs the SCF
again, loads the amplitudes and times the (T) step only:

  ours     ccsd_t_energy(ints, t1, t2, budget, kind): closed shell, the symmetric
           form over ordered tuples of virtual blocks (api/symmetric.py, one tuple per
           CPU at a time); unrestricted, the packaged products (232, sub-products
           shared, batched); first call (planning included) and a second call in the
           same process (the fit remembered), the integrals transformed before the
           clock
  pyscf    pyscf.cc.ccsd_t.kernel (C with OpenMP, a >= b >= c) for an RHF,
           pyscf.cc.uccsd_t.kernel (NumPy einsum over the α/β blocks) for a UHF, the
           ERIs transformed before the clock starts

Rounds are interleaved (each round calls every code once, the order rotated); medians
with min-max. Peak RSS: the worker's growth over the step (chem/process_memory.RSSWatch).
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from closed_shell import SYSTEMS as WATERS  # noqa: E402

SYSTEMS = {"water": WATERS["h2o"], "dimer": WATERS["dimer"], "trimer": WATERS["trimer"],
           "oh": "O 0 0 0; H 0 0 0.97", "cation": WATERS["h2o"], "water_so": WATERS["h2o"]}
LABELS = {"water": "H2O", "dimer": "(H2O)2", "trimer": "(H2O)3", "oh": "OH",
          "cation": "(H2O)+", "water_so": "H2O spin orbitals"}
#: Systems run through their spin orbitals (PySCF's GCCSD and ``gccsd_t``; ours the
#: spin-orbital (T)).
SPIN_ORBITAL = {"water_so"}
#: Charge and 2S of the doublets (UHF references; the rest are RHF singlets).
DOUBLETS = {"oh": (0, 1), "cation": (1, 1)}


def _mf(system: str, amps=None):
    """The RHF; with ``amps`` (the prep's file) its orbitals set to the prep's, so that
    every worker reads the amplitudes in the orbitals (and phases) they were made in."""
    from pyscf import gto, scf

    charge, spin = DOUBLETS.get(system, (0, 0))
    mol = gto.M(atom=SYSTEMS[system], basis="cc-pvdz", charge=charge, spin=spin, verbose=0)
    mf = (scf.UHF if spin else scf.RHF)(mol).run(conv_tol=1e-11)
    if amps is not None:
        mf.mo_coeff, mf.mo_energy, mf.mo_occ = (amps["mo_coeff"], amps["mo_energy"],
                                                amps["mo_occ"])
    return mf


def _amplitudes(system: str, amps):
    """``t1, t2`` as PySCF's method holds them (tuples of spin blocks for a doublet)."""
    if system not in DOUBLETS:
        return amps["t1"], amps["t2"]
    return ((amps["t1a"], amps["t1b"]), (amps["t2aa"], amps["t2ab"], amps["t2bb"]))


def _prep(system: str, path: str) -> None:
    import numpy as np
    from pyscf import cc

    mf = _mf(system)
    if system in DOUBLETS:
        mycc = cc.UCCSD(mf).run(conv_tol=1e-9)
        (t1a, t1b), (t2aa, t2ab, t2bb) = mycc.t1, mycc.t2
        amps = {"t1a": t1a, "t1b": t1b, "t2aa": t2aa, "t2ab": t2ab, "t2bb": t2bb}
    elif system in SPIN_ORBITAL:
        from pyscf import scf

        mycc = cc.GCCSD(scf.addons.convert_to_ghf(mf)).run(conv_tol=1e-9)
        amps = {"t1": mycc.t1, "t2": mycc.t2}
    else:
        mycc = cc.CCSD(mf).run(conv_tol=1e-9)
        amps = {"t1": mycc.t1, "t2": mycc.t2}
    np.savez(path, mo_coeff=mf.mo_coeff, mo_energy=mf.mo_energy, mo_occ=mf.mo_occ, **amps)


def _worker(code: str, system: str, budget: str, path: str) -> dict:
    import numpy as np

    from sequant_eval.chem.process_memory import RSSWatch

    amps = np.load(path)
    t1, t2 = _amplitudes(system, amps)
    mf = _mf(system, amps)
    if code == "pyscf":
        from pyscf import cc, scf
        from pyscf.cc import ccsd_t, gccsd_t, uccsd_t

        if system in SPIN_ORBITAL:
            mycc, kernel = cc.GCCSD(scf.addons.convert_to_ghf(mf)), gccsd_t.kernel
        elif system in DOUBLETS:
            mycc, kernel = cc.UCCSD(mf), uccsd_t.kernel
        else:
            mycc, kernel = cc.CCSD(mf), ccsd_t.kernel
        eris = mycc.ao2mo()
        rss = RSSWatch.start()
        t0 = time.perf_counter()
        e_t = kernel(mycc, eris, t1, t2, verbose=0)
        return {"seconds": time.perf_counter() - t0, "e_t": float(e_t),
                "rss_growth": rss.growth()}
    from sequant_eval.chem.closed_shell import ClosedShellIntegrals
    from sequant_eval.chem.spin_orbital import GeneralSpinOrbitalIntegrals
    from sequant_eval.chem.triples import ccsd_t_energy, triples_equations
    from sequant_eval.chem.unrestricted_integrals import UnrestrictedIntegrals

    if system in SPIN_ORBITAL:
        kind, ints = "spin-orbital", GeneralSpinOrbitalIntegrals(mf)
    elif system in DOUBLETS:
        kind, ints = "unrestricted", UnrestrictedIntegrals.from_scf(mf)
    else:
        kind, ints = "closed-shell", ClosedShellIntegrals.from_scf(mf)
    provide = ints.tensors()
    for name, spaces in sorted({(t.name, tuple(s.space for s in t.slots))
                                for p in triples_equations(kind)[0].terms
                                for t in p.factors if t.name in provide}):
        provide[name](spaces)                          # transformed before the clock
    spec = None if budget == "none" else budget
    if budget.startswith("o3v3:"):
        o, v = ints.nocc, ints.nvir
        spec = float(budget[5:]) * 8 * o**3 * v**3
    from sequant_eval import InfeasibleBudget

    rss = RSSWatch.start()
    t0 = time.perf_counter()
    try:
        first = ccsd_t_energy(ints, t1, t2, budget=spec, kind=kind)
    except InfeasibleBudget as err:
        return {"refused": float(spec), "minimum": float(err.minimum),
                "seconds": None, "second": None, "e_t": None, "rss_growth": None}
    t1_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = ccsd_t_energy(ints, t1, t2, budget=spec, kind=kind)
    return {"seconds": t1_s, "second": time.perf_counter() - t0, "e_t": again.e_t,
            "rss_growth": rss.growth(), "predicted": first.report.total_bytes,
            "metered": first.meter.peak_bytes + first.report.program_bytes,
            "flops": first.report.flops}


def _spawn(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _median(xs):
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), min(xs), max(xs)) if xs else (None, None, None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", default="water,dimer")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budgets", default="none,o3v3:0.05")
    p.add_argument("--json", default=None)
    p.add_argument("--worker", nargs=4, default=None, help=argparse.SUPPRESS)
    p.add_argument("--prep", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.prep:
        _prep(*args.prep)
        print("{}")
        return
    if args.worker:
        print(json.dumps(_worker(*args.worker)))
        return
    print(f"python {sys.version.split()[0]}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}, load {os.getloadavg()[0]:.1f}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for system in args.systems.split(","):
            path = str(Path(tmp) / f"{system}.npz")
            subprocess.run([sys.executable, __file__, "--prep", system, path], check=True,
                           capture_output=True)
            codes = [("pyscf", "none")] + [("ours", b) for b in args.budgets.split(",")]
            runs = {c: [] for c in codes}
            for r in range(args.rounds):
                for code, budget in codes[r % len(codes):] + codes[:r % len(codes)]:
                    runs[(code, budget)].append(_spawn(code, system, budget, path))
            ref = _median([x["seconds"] for x in runs[("pyscf", "none")]])[0]
            e_ref = runs[("pyscf", "none")][0]["e_t"]
            print(f"\n{LABELS[system]}/cc-pVDZ, E(T) = {e_ref:.12f} (PySCF), "
                  f"{args.rounds} rounds")
            for (code, budget), xs in runs.items():
                if "refused" in xs[0]:
                    print(f"  {code:5s} budget {budget:9s} refused ({xs[0]['refused']:.0f} B); "
                          f"the smallest that works: {xs[0]['minimum']:.0f} B")
                    continue
                med, lo, hi = _median([x["seconds"] for x in xs])
                line = (f"  {code:5s} budget {budget:9s} {med:8.3f} s ({lo:.3f}-{hi:.3f}) "
                        f"{med / ref:6.1f}x PySCF  dE(T) {xs[0]['e_t'] - e_ref:+.1e}  "
                        f"RSS growth {_median([x['rss_growth'] for x in xs])[0] / 2**20:.0f} MiB")
                if code == "ours":
                    sec = _median([x["second"] for x in xs])
                    line += (f"  second call {sec[0]:.3f} s ({sec[1]:.3f}-{sec[2]:.3f}) "
                             f"{sec[0] / ref:.1f}x; predicted {xs[0]['predicted'] / 2**20:.1f} MiB"
                             f" metered {xs[0]['metered'] / 2**20:.1f} MiB, "
                             f"{xs[0]['flops'] / 1e9:.2f} GFLOP")
                print(line)
            results[system] = {f"{c}@{b}": xs for (c, b), xs in runs.items()}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
