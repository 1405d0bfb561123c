#!/usr/bin/env python3
"""One unrestricted CCSD residual, and whole converged runs: ours beside PySCF UCCSD.

    python benchmarks/unrestricted.py [--systems oh,dimer,trimer] [--rounds 5]
                                      [--converged ROUNDS] [--run-codes ours,pyscf_uccsd]
                                      [--json F]

Systems (UHF doublets, cc-pVDZ, all electrons correlated): OH, and the cations of
closed_shell.py's water dimer and cyclic trimer ((H2O)2+, (H2O)3+).

Codes (each in its own worker process, so each peak RSS is its own):

  ours          sequant_eval.chem.CCSD(mf).residual(t1a, t1b, t2aa, t2ab, t2bb): UCCSD, the
                spin-integrated equations (chem/data/ccsd_u.txt) on the fused-forest
                evaluator (NumPy backend)
  pyscf_uccsd   pyscf.cc.uccsd.UCCSD(mf).update_amps (PySCF's unrestricted code, einsum)
  ours_so       sequant_eval.chem.CCSD(mf, spin_orbital=True).residual(t1, t2): GCCSD, the
                spin-orbital equations on the UHF's generalized spin orbitals (the path a
                UHF took before UCCSD), at the same amplitudes in spin-orbital form

The fixed amplitudes are PySCF's after one Jacobi step from MP2 (T1 != 0), computed once
by a prep process that also runs the UHF (conv_tol 1e-10); every worker loads the same
orbitals. Rounds are interleaved as in closed_shell.py (one call of every code per round,
the order rotated, a 0.5 s pause before each call) after one warm-up call; medians and
min-max. Each code's energy is compared with ours, and ours's residual blocks with
PySCF's ``R = (t_new - t) * D``. Flops: ours from the evaluator's dry run; PySCF's einsum
calls costed by opt_einsum (2 flops per multiply-add).

``--converged N`` also times N interleaved whole runs per system (from the converged SCF,
integral transformation included) of ``--run-codes`` (default ours and pyscf_uccsd;
add ours_so for the spin-orbital path), each at its defaults; ``--rounds 0`` times only
those.

On a shared, oversubscribed machine run it with ``OPENBLAS_NUM_THREADS=1
OMP_NUM_THREADS=1`` (every code then runs single-threaded): with more runnable threads
than cores, OpenBLAS's spinning threads made a 1 MFLOP GEMM take 0.12 s (measured at load
9 on 2 CPUs; 4x slower residuals than single-threaded). The environment is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from closed_shell import SETTLE_S, SYSTEMS as WATERS, _count, _spawn, _vm  # noqa: E402

SYSTEMS = {"oh": ("O 0 0 0; H 0 0 0.97", 0),
           "dimer": (WATERS["dimer"], 1), "trimer": (WATERS["trimer"], 1)}
LABELS = {"oh": "OH", "dimer": "(H2O)2+", "trimer": "(H2O)3+"}
CODES = ("ours", "pyscf_uccsd", "ours_so")
NAMES = ("t1a", "t1b", "t2aa", "t2ab", "t2bb")


def _mol(system: str):
    from pyscf import gto

    atom, charge = SYSTEMS[system]
    return gto.M(atom=atom, basis="cc-pvdz", charge=charge, spin=1, verbose=0,
                 max_memory=16000)


def _mf(system: str, wd: Path):
    from pyscf import scf

    mol = _mol(system)
    mf = scf.UHF(mol)
    mf.__dict__.update(scf.chkfile.load(str(wd / f"{system}.chk"), "scf"))
    mf.converged = True
    mf._eri = mol.intor("int2e", aosym="s8")     # PySCF's CC ao2mo takes its in-core path
    return mf


def _prep(system: str, wd: Path) -> dict:
    import numpy as np
    from pyscf import cc, scf

    mf = scf.UHF(_mol(system))
    mf.conv_tol = 1e-10
    mf.max_cycle = 200
    mf.chkfile = str(wd / f"{system}.chk")
    mf.kernel()
    mycc = cc.UCCSD(mf)
    eris = mycc.ao2mo()
    _, t1, t2 = mycc.init_amps(eris)
    t1, t2 = mycc.update_amps(t1, t2, eris)
    np.savez(wd / f"{system}_amps.npz", **dict(zip(NAMES, (*t1, *t2))))
    return {"nocc": [int(x.shape[0]) for x in t1], "nvir": [int(x.shape[1]) for x in t1],
            "e_hf": float(mf.e_tot), "converged_scf": bool(mf.converged)}


def _spin_orbital_amplitudes(mycc, t):
    """UCCSD amplitudes in GCCSD's spin orbitals (``mycc``: our GCCSD on the UHF)."""
    import numpy as np
    from pyscf.cc.addons import spatial2spin

    ghf = mycc.integrals.scf
    occ = np.asarray(ghf.mo_occ) > 0
    orbspin = np.asarray(ghf.mo_coeff.orbspin)
    orbspin = np.concatenate([orbspin[occ], orbspin[~occ]])    # occupied first, as ours
    return (spatial2spin((t["t1a"], t["t1b"]), orbspin),
            spatial2spin((t["t2aa"], t["t2ab"], t["t2bb"]), orbspin))


def _setup(code: str, mf, t):
    """(call, energy-and-blocks-of-output, flops-counter) for one code."""
    import numpy as np

    import sequant_eval.chem as sc

    amps = [t[k] for k in NAMES]
    if code == "ours":
        mycc = sc.CCSD(mf)
        fn = lambda: mycc.residual(*amps)  # noqa: E731
        return fn, lambda out: (out[0], out[1:]), lambda: mycc.evaluator().analyze().flops
    if code == "ours_so":
        mycc = sc.CCSD(mf, spin_orbital=True)
        t1, t2 = _spin_orbital_amplitudes(mycc, t)
        fn = lambda: mycc.residual(t1, t2)  # noqa: E731
        return fn, lambda out: (out[0], ()), lambda: mycc.evaluator().analyze().flops
    from pyscf import lib
    from pyscf.cc import uccsd

    mycc = uccsd.UCCSD(mf)
    eris = mycc.ao2mo()
    t1, t2 = tuple(amps[:2]), tuple(amps[2:])
    (noa, nob), e = [x.shape[0] for x in t1], eris.mo_energy
    d = {"t1a": e[0][:noa, None] - e[0][None, noa:], "t1b": e[1][:nob, None] - e[1][None, nob:]}
    pair = lambda x, y: x[:, None, :, None] + y[None, :, None, :]  # noqa: E731
    d.update(t2aa=pair(d["t1a"], d["t1a"]), t2ab=pair(d["t1a"], d["t1b"]),
             t2bb=pair(d["t1b"], d["t1b"]))

    e_in = float(mycc.energy(t1, t2, eris))           # at the amplitudes given, as ours

    def blocks(out):
        new = (*out[0], *out[1])
        return e_in, [(x - t[k]) * d[k] for k, x in zip(NAMES, new)]

    fn = lambda: mycc.update_amps(t1, t2, eris)  # noqa: E731
    return fn, blocks, lambda: _count(fn, [(np, "einsum"), (lib, "einsum")])


def _worker(code: str, system: str, wd: str, conn) -> None:
    import gc

    import numpy as np

    try:
        mf = _mf(system, Path(wd))
        t = dict(np.load(Path(wd) / f"{system}_amps.npz"))
        fn, result, flops = _setup(code, mf, t)
        rss_setup = _vm("VmHWM:")
        start = time.perf_counter()
        out = fn()
        first = time.perf_counter() - start
        conn.send({"ready": True, "first_s": first})
        while conn.recv() == "go":
            gc.collect()
            start = time.perf_counter()
            fn()
            conn.send(time.perf_counter() - start)
        energy, blocks = result(out)
        conn.send({"rss_setup_mb": rss_setup, "rss_peak_mb": _vm("VmHWM:"), "flops": flops(),
                   "energy": float(energy), "blocks": [np.asarray(b) for b in blocks]})
    except Exception as err:  # reported, the other codes go on
        conn.send({"error": f"{type(err).__name__}: {err}"})


def run_system(system: str, codes, rounds: int, wd: Path) -> dict:
    proc, conn = _spawn(_prep_worker, system, str(wd))
    info = conn.recv()
    proc.join()
    workers = {}
    if rounds == 0:                     # whole runs only (--rounds 0): the SCF file
        return dict(info, results={})
    for code in codes:                  # one at a time: the setups do not share the CPUs
        p, c = _spawn(_worker, code, system, str(wd))
        msg = c.recv()
        if "error" in msg:
            info.setdefault("errors", {})[code] = msg["error"]
            p.join()
            continue
        workers[code] = (p, c, msg["first_s"])
    samples = {code: [] for code in workers}
    order = list(workers)
    for r in range(rounds):
        for code in order[r % len(order):] + order[:r % len(order)]:
            time.sleep(SETTLE_S)
            workers[code][1].send("go")
            samples[code].append(workers[code][1].recv())
    results = {}
    for code, (p, c, first) in workers.items():
        c.send("stop")
        fin = c.recv()
        p.join()
        if "error" in fin:
            info.setdefault("errors", {})[code] = fin["error"]
            continue
        results[code] = dict(fin, first_s=first, samples=samples[code])
    blocks = {code: res.pop("blocks") for code, res in results.items()}
    if "ours" in blocks and "pyscf_uccsd" in blocks:
        results["ours"]["max_residual_diff"] = float(max(
            abs(a - b).max() for a, b in zip(blocks["ours"], blocks["pyscf_uccsd"])))
    for code in ("pyscf_uccsd", "ours_so"):
        if "ours" in results and code in results:
            results[code]["energy_diff"] = results[code]["energy"] - results["ours"]["energy"]
    info["results"] = results
    return info


def _prep_worker(system: str, wd: str, conn) -> None:
    conn.send(_prep(system, Path(wd)))


def _run_worker(code: str, system: str, wd: str, conn) -> None:
    """Whole converged runs, one per "go": (seconds, iterations, E_corr, converged)."""
    try:
        mf = _mf(system, Path(wd))
        while conn.recv() == "go":
            start = time.perf_counter()
            if code == "pyscf_uccsd":
                from pyscf import cc

                mycc = cc.UCCSD(mf)
                mycc.verbose = 0
                mycc.kernel()
                its = mycc.cycles
            else:
                import sequant_eval.chem as sc

                mycc = sc.CCSD(mf, spin_orbital=code == "ours_so").run()
                its = mycc.iterations
            conn.send((time.perf_counter() - start, int(its), float(mycc.e_corr),
                       bool(mycc.converged)))
        conn.send({"rss_peak_mb": _vm("VmHWM:")})
    except Exception as err:
        conn.send({"error": f"{type(err).__name__}: {err}"})


def run_converged(system: str, codes, rounds: int, wd: Path) -> dict:
    """Interleaved whole runs (the SCF file from run_system)."""
    workers = {code: _spawn(_run_worker, code, system, str(wd)) for code in codes}
    samples: dict[str, list] = {code: [] for code in codes}
    for r in range(rounds):
        for code in codes[r % len(codes):] + codes[:r % len(codes)]:
            time.sleep(SETTLE_S)
            workers[code][1].send("go")
            msg = workers[code][1].recv()
            if isinstance(msg, dict):
                return {"error": f"{code}: {msg['error']}"}
            samples[code].append(msg)
    out = {}
    for code, (p, c) in workers.items():
        c.send("stop")
        out[code] = dict(c.recv(), runs=samples[code])
        p.join()
    return out


def _table(system: str, info: dict) -> list[str]:
    res = info["results"]
    base = statistics.median(res["pyscf_uccsd"]["samples"]) if "pyscf_uccsd" in res else None
    lines = [f"**{LABELS[system]}** (cc-pVDZ UHF, occ α/β {info['nocc']}, vir α/β "
             f"{info['nvir']})", "",
             "| code | median s | min-max s | rounds | GFLOP | GFLOP/s | ÷ pyscf_uccsd | "
             "peak RSS MiB | check |", "|---|---|---|---|---|---|---|---|---|"]
    for code in CODES:
        if code not in res:
            continue
        r, s = res[code], res[code]["samples"]
        med = statistics.median(s)
        gf = r["flops"] / 1e9
        check = (f"max abs ΔR vs PySCF {r['max_residual_diff']:.1e}"
                 if "max_residual_diff" in r else
                 f"E − ours {r['energy_diff']:.1e}" if "energy_diff" in r else "")
        ratio = f"{med / base:.2f}" if base else "n/a"
        lines.append(f"| {code} | {med:.3f} | {min(s):.3f}-{max(s):.3f} | {len(s)} | "
                     f"{gf:.3g} | {gf / med:.3g} | {ratio} | {r['rss_peak_mb']:.0f} | "
                     f"{check} |")
    return lines


def _run_table(system: str, res: dict, codes) -> list[str]:
    if "error" in res:
        return [f"**{LABELS[system]}** whole runs: {res['error']}"]
    ref = "pyscf_uccsd" if "pyscf_uccsd" in res else codes[0]
    base = statistics.median(x[0] for x in res[ref]["runs"])
    e0 = res[ref]["runs"][0][2]
    lines = [f"**{LABELS[system]}** whole converged runs", "",
             f"| code | median s | min-max s | runs | iterations | E_corr | ΔE vs {ref} | "
             f"÷ {ref} | peak RSS MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for code in codes:
        runs = res[code]["runs"]
        t = [x[0] for x in runs]
        lines.append(f"| {code} | {statistics.median(t):.2f} | {min(t):.2f}-{max(t):.2f} | "
                     f"{len(t)} | {runs[0][1]} | {runs[0][2]:.10f} | {runs[0][2] - e0:.1e} | "
                     f"{statistics.median(t) / base:.2f} | {res[code]['rss_peak_mb']:.0f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="oh,dimer,trimer")
    ap.add_argument("--codes", default=",".join(CODES))
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved residual rounds (0: none, whole runs only)")
    ap.add_argument("--converged", type=int, default=0, metavar="ROUNDS",
                    help="also time ROUNDS whole converged runs per system (default: none)")
    ap.add_argument("--run-codes", default="ours,pyscf_uccsd",
                    help="codes of the whole runs (ours, pyscf_uccsd, ours_so)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                           "OMP_NUM_THREADS")}
    print(f"environment as found: {env}; {os.cpu_count()} CPUs; python "
          f"{sys.version.split()[0]}; load {os.getloadavg()}", flush=True)
    out = {"environment": env, "systems": {}}
    with tempfile.TemporaryDirectory() as wd:
        for system in args.systems.split(","):
            info = run_system(system, args.codes.split(","), args.rounds, Path(wd))
            out["systems"][system] = info
            if info["results"]:
                print("\n".join(_table(system, info)) + "\n", flush=True)
            for code, err in info.get("errors", {}).items():
                print(f"  {code}: {err}", flush=True)
            if args.converged:
                codes = args.run_codes.split(",")
                info["converged"] = run_converged(system, codes, args.converged, Path(wd))
                print("\n".join(_run_table(system, info["converged"], codes)) + "\n",
                      flush=True)
            print(f"load {os.getloadavg()}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
