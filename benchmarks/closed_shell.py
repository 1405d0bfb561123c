#!/usr/bin/env python3
"""One closed-shell CCSD residual at fixed amplitudes: ours beside PySCF and ebcc.

    python benchmarks/closed_shell.py [--systems h2o,dimer,trimer] [--rounds 7] [--json F]
                                      [--converged ROUNDS]

Codes (each in its own worker process, so each peak RSS is its own):

  ours         sequant_eval.chem.CCSD(mf).residual(t1, t2): the spin-traced, exchange-folded
               closed-shell equations on the fused-forest evaluator (NumPy backend)
  pyscf_ccsd   pyscf.cc.ccsd.CCSD(mf).update_amps (PySCF's production RHF code)
  pyscf_rccsd  pyscf.cc.rccsd.RCCSD(mf).update_amps
  ebcc_rccsd   ebcc.REBCC(mf, ansatz="CCSD").update_amps (only if ebcc imports)

The fixed amplitudes are PySCF's after one Jacobi step from MP2 (T1 != 0), computed once by
a prep process that also runs the SCF (conv_tol 1e-10) and measures the dgemm rate; every
worker loads the same orbitals.  Rounds are interleaved (one call of every code per round,
the order rotated each round, a 0.5 s pause before each call so that no code shares the
CPUs with the previous one's spinning BLAS threads) after one warm-up call; medians and
min-max are reported.
Each code's residual R = (t_new - t) * D is checked against pyscf_ccsd's.  Flops: ours
from the evaluator's meter; PySCF RCCSD / ebcc from their einsum calls costed by
opt_einsum (2 flops per multiply-add); pyscf_ccsd works through C kernels: n/a.
OPENBLAS_CORETYPE is recorded as found, never set.

``--converged N`` also times N interleaved whole runs per system, from the converged SCF
to converged CCSD (integral transformation included): ``sequant_eval.chem.CCSD(mf).run()``
against ``pyscf.cc.CCSD(mf).kernel()``, both at PySCF's default thresholds and with
PySCF's convergence test. Each code's worker runs them in turn: its first run is cold
(ours plans the equations then; later runs in the same process reuse the plan, as a scan
or a second method object would), so the table gives the first run apart and the median
of all.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SYSTEMS = {   # Angstrom; dimer and trimer as in ../shared/bench (S22-2 dimer, cyclic trimer)
    "h2o": "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692",
    "dimer": "O -1.551007 -0.114520 0; H -1.934259 0.762503 0; H -0.599677 0.040712 0; "
             "O 1.350625 0.111469 0; H 1.680398 -0.373741 -0.758561; "
             "H 1.680398 -0.373741 0.758561",
    "trimer": "O 1.645448 0 0; H 0.814064 0.48 0; H 1.922546 -0.000783 0.919139; "
              "O -0.822724 1.425 0; H -0.822724 0.465 0; H -0.960595 1.665365 0.919139; "
              "O -0.822724 -1.425 0; H 0.00866 -0.945 0; H -0.961951 -1.664582 -0.919139",
    # constructed cyclic tetramer: O on a square (O-O 2.75 A), one H along each O->O edge
    # (0.96 A), the free H at 104.5 deg, pointing out of the ring, up and down in turn
    "tetramer": "O 1.944544 0 0; H 1.265721 0.678823 0; H 2.493942 0.209471 0.758870; "
                "O 0 1.944544 0; H -0.678823 1.265721 0; H -0.209471 2.493942 -0.758870; "
                "O -1.944544 0 0; H -1.265721 -0.678823 0; H -2.493942 -0.209471 0.758870; "
                "O 0 -1.944544 0; H 0.678823 -1.265721 0; H 0.209471 -2.493942 -0.758870",
}
CODES = ("ours", "pyscf_ccsd", "pyscf_rccsd", "ebcc_rccsd")
RUN_CODES = ["ours", "pyscf_ccsd"]
#: Pause before each timed call. OpenBLAS threads spin for a while after a process's last
#: call; without the pause the code that follows in the rotation (always the same one)
#: shares the CPUs with them (measured: ours after ebcc 0.25-0.32 s, after RCCSD
#: 0.21-0.24 s).
SETTLE_S = 0.5


def _vm(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _mf(system: str, wd: Path):
    from pyscf import gto, scf

    mol = gto.M(atom=SYSTEMS[system], basis="cc-pvdz", verbose=0, max_memory=16000)
    mf = scf.RHF(mol)
    mf.__dict__.update(scf.chkfile.load(str(wd / f"{system}.chk"), "scf"))
    mf.converged = True
    mf._eri = mol.intor("int2e", aosym="s8")     # PySCF's CC ao2mo takes its in-core path
    return mf


def _prep(system: str, wd: Path) -> dict:
    """SCF, fixed amplitudes, dgemm rate (in a subprocess: the parent stays light)."""
    import numpy as np
    from pyscf import cc, gto, scf

    mol = gto.M(atom=SYSTEMS[system], basis="cc-pvdz", verbose=0, max_memory=16000)
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-10
    mf.chkfile = str(wd / f"{system}.chk")
    mf.kernel()
    mycc = cc.CCSD(mf)
    eris = mycc.ao2mo()
    _, t1, t2 = mycc.init_amps(eris)
    t1, t2 = mycc.update_amps(t1, t2, eris)
    np.savez(wd / f"{system}_amps.npz", t1=t1, t2=t2)
    a = np.random.default_rng(0).standard_normal((2000, 2000))
    a @ a
    times = []
    for _ in range(5):
        t = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - t)
    return {"nocc": int(t1.shape[0]), "nvir": int(t1.shape[1]), "e_hf": float(mf.e_tot),
            "dgemm_gflops": 2 * 2000**3 / statistics.median(times) / 1e9}


def _einsum_flops(calls) -> float:
    import numpy as np
    import opt_einsum

    total = 0.0
    for sub, shapes in calls:
        ops = [np.empty(s) if len(s) else np.empty(()) for s in shapes]
        try:
            total += float(opt_einsum.contract_path(sub, *ops, optimize="optimal")[1].opt_cost)
        except Exception:
            pass
    return total


def _recording(targets):
    """Wrap einsum entry points (module, attribute) to record subscripts and shapes."""
    calls, saved = [], []
    for mod, attr in targets:
        orig = getattr(mod, attr)

        def wrapped(*args, _orig=orig, **kw):
            if args and isinstance(args[0], str):
                calls.append((args[0], [getattr(a, "shape", ()) for a in args[1:]]))
            elif args:          # interleaved: array, sublist, ..., [output sublist]
                letter = lambda ix: "".join(chr(97 + k) if k < 26 else chr(39 + k) for k in ix)
                ops, subs = args[0:len(args) - len(args) % 2:2], args[1::2][:len(args) // 2]
                out = "->" + letter(args[-1]) if len(args) % 2 else ""
                calls.append((",".join(letter(x) for x in subs) + out,
                              [getattr(a, "shape", ()) for a in ops]))
            return _orig(*args, **kw)

        saved.append((mod, attr, orig))
        setattr(mod, attr, wrapped)
    return calls, saved


def _setup(code: str, mf, t1, t2):
    """(call, residual-of-output, flops-counter) for one code."""
    import numpy as np

    if code == "ours":
        import sequant_eval.chem as sc

        mycc = sc.CCSD(mf)
        mycc.residual(t1, t2)
        fn = lambda: mycc.residual(t1, t2)  # noqa: E731
        meter = lambda: mycc.evaluator().analyze().flops  # noqa: E731
        return fn, lambda out: (out[1], out[2]), meter
    if code == "ebcc_rccsd":
        from ebcc import REBCC, NullLogger
        from ebcc.util import Namespace

        mycc = REBCC(mf, ansatz="CCSD", log=NullLogger())
        eris = mycc.get_eris()
        amps = Namespace(t1=t1, t2=t2)
        d1, d2 = mycc.energy_sum("ov"), mycc.energy_sum("oovv")
        fn = lambda: mycc.update_amps(eris=eris, amplitudes=amps)  # noqa: E731
        return fn, lambda o: ((o.t1 - t1) * d1, (o.t2 - t2) * d2), \
            lambda: _count(fn, [(mycc._eqns, "einsum")])
    from pyscf import lib
    from pyscf.cc import ccsd, rccsd

    mycc = (ccsd.CCSD if code == "pyscf_ccsd" else rccsd.RCCSD)(mf)
    eris = mycc.ao2mo()
    o = t1.shape[0]
    eia = eris.mo_energy[:o, None] - eris.mo_energy[None, o:]
    d2 = eia[:, None, :, None] + eia[None, :, None, :]
    fn = lambda: mycc.update_amps(t1, t2, eris)  # noqa: E731
    flops = (lambda: float("nan")) if code == "pyscf_ccsd" else (
        lambda: _count(fn, [(np, "einsum"), (lib, "einsum")]))
    return fn, lambda out: ((out[0] - t1) * eia, (out[1] - t2) * d2), flops


def _count(fn, targets) -> float:
    calls, saved = _recording(targets)
    try:
        fn()
    finally:
        for mod, attr, orig in saved:
            setattr(mod, attr, orig)
    return _einsum_flops(calls)


def _worker(code: str, system: str, wd: str, conn) -> None:
    import gc

    import numpy as np

    try:
        mf = _mf(system, Path(wd))
        amps = np.load(Path(wd) / f"{system}_amps.npz")
        t1, t2 = amps["t1"], amps["t2"]
        fn, residual, flops = _setup(code, mf, t1, t2)
        rss_setup = _vm("VmHWM:")
        t = time.perf_counter()
        out = fn()
        first = time.perf_counter() - t
        conn.send({"ready": True, "first_s": first})
        while conn.recv() == "go":
            gc.collect()
            t = time.perf_counter()
            fn()
            conn.send(time.perf_counter() - t)
        r1, r2 = residual(out)
        conn.send({"rss_setup_mb": rss_setup, "rss_peak_mb": _vm("VmHWM:"), "flops": flops(),
                   "r1": np.asarray(r1), "r2": np.asarray(r2)})
    except Exception as err:  # reported, the other codes go on
        conn.send({"error": f"{type(err).__name__}: {err}"})


def _run_worker(code: str, system: str, wd: str, conn) -> None:
    """Whole converged runs, one per "go": (seconds, iterations, E_corr)."""
    try:
        mf = _mf(system, Path(wd))
        while conn.recv() == "go":
            t = time.perf_counter()
            if code == "ours":
                import sequant_eval.chem as sc

                mycc = sc.CCSD(mf).run()
                its = mycc.iterations
            else:
                from pyscf import cc

                mycc = cc.CCSD(mf)
                mycc.verbose = 0
                mycc.kernel()
                its = mycc.cycles
            conn.send((time.perf_counter() - t, int(its), float(mycc.e_corr),
                       bool(mycc.converged)))
        conn.send({"rss_peak_mb": _vm("VmHWM:")})
    except Exception as err:
        conn.send({"error": f"{type(err).__name__}: {err}"})


def run_converged(system: str, rounds: int, wd: Path) -> dict:
    """Interleaved whole runs of ours and PySCF cc.CCSD (the SCF file from run_system)."""
    workers = {code: _spawn(_run_worker, code, system, str(wd)) for code in RUN_CODES}
    samples: dict[str, list] = {code: [] for code in RUN_CODES}
    for r in range(rounds):
        for code in RUN_CODES[r % 2:] + RUN_CODES[:r % 2]:
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


def _run_table(system: str, res: dict) -> list[str]:
    if "error" in res:
        return [f"**{system}** whole runs: {res['error']}"]
    base = statistics.median(x[0] for x in res["pyscf_ccsd"]["runs"])
    e0 = res["pyscf_ccsd"]["runs"][0][2]
    lines = [f"**{system}** whole converged runs", "",
             "| code | first s | median s | min-max s | iterations | E_corr | ΔE vs pyscf_ccsd | "
             "÷ pyscf_ccsd (median) | ÷ pyscf_ccsd (first) | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    first0 = res["pyscf_ccsd"]["runs"][0][0]
    for code in RUN_CODES:
        runs = res[code]["runs"]
        t = [x[0] for x in runs]
        lines.append(f"| {code} | {t[0]:.2f} | {statistics.median(t):.2f} | "
                     f"{min(t):.2f}-{max(t):.2f} | {runs[0][1]} | {runs[0][2]:.10f} | "
                     f"{runs[0][2] - e0:.1e} | {statistics.median(t) / base:.2f} | "
                     f"{t[0] / first0:.2f} | {res[code]['rss_peak_mb']:.0f} |")
    return lines


def _spawn(target, *args):
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=target, args=(*args, child), daemon=True)
    proc.start()
    return proc, parent


def _prep_worker(system: str, wd: str, conn) -> None:
    conn.send(_prep(system, Path(wd)))


def run_system(system: str, codes, rounds: int, wd: Path) -> dict:
    proc, conn = _spawn(_prep_worker, system, str(wd))
    info = conn.recv()
    proc.join()
    workers = {}
    for code in codes:
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
            time.sleep(SETTLE_S)          # the previous code's BLAS threads go idle first
            workers[code][1].send("go")
            samples[code].append(workers[code][1].recv())
    results = {}
    for code, (p, c, first) in workers.items():
        c.send("stop")
        fin = c.recv()
        p.join()
        results[code] = dict(fin, first_s=first, samples=samples[code])
    arrays = {code: (res.pop("r1"), res.pop("r2")) for code, res in results.items()}
    if "pyscf_ccsd" in arrays:
        ref1, ref2 = arrays["pyscf_ccsd"]
        for code, (r1, r2) in arrays.items():
            results[code]["max_residual_diff"] = float(max(abs(r1 - ref1).max(),
                                                           abs(r2 - ref2).max()))
    info["results"] = results
    return info


def _table(system: str, info: dict) -> list[str]:
    res = info["results"]
    base = statistics.median(res["pyscf_ccsd"]["samples"]) if "pyscf_ccsd" in res else None
    lines = [f"**{system}** (cc-pVDZ, {info['nocc']} occ / {info['nvir']} vir, dgemm "
             f"{info['dgemm_gflops']:.0f} GFLOP/s)", "",
             "| code | median s | min-max s | GFLOP | GFLOP/s | % dgemm | ÷ pyscf_ccsd | "
             "peak RSS MiB | max abs ΔR |", "|---|---|---|---|---|---|---|---|---|"]
    for code in CODES:
        if code not in res:
            continue
        r, s = res[code], res[code]["samples"]
        med = statistics.median(s)
        gf = r["flops"] / 1e9
        known = gf == gf
        rate = f"{gf / med:.3g}" if known else "n/a"
        pct = f"{100 * gf / med / info['dgemm_gflops']:.0f}" if known else "n/a"
        diff = r.get("max_residual_diff")
        lines.append(f"| {code} | {med:.3f} | {min(s):.3f}-{max(s):.3f} | "
                     f"{f'{gf:.3g}' if known else 'n/a'} | {rate} | {pct} | "
                     f"{med / base:.2f} | {r['rss_peak_mb']:.0f} | "
                     f"{'n/a' if diff is None else f'{diff:.1e}'} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="h2o,dimer,trimer")
    ap.add_argument("--codes", default=",".join(CODES))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    ap.add_argument("--converged", type=int, default=0, metavar="ROUNDS",
                    help="also time ROUNDS whole converged runs per system (default: none)")
    args = ap.parse_args(argv)
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                           "OMP_NUM_THREADS")}
    print(f"environment as found: {env}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    out = {"environment": env, "systems": {}}
    with tempfile.TemporaryDirectory() as wd:
        for system in args.systems.split(","):
            info = run_system(system, args.codes.split(","), args.rounds, Path(wd))
            out["systems"][system] = info
            print("\n".join(_table(system, info)) + "\n", flush=True)
            for code, err in info.get("errors", {}).items():
                print(f"  {code}: {err}")
            if args.converged:
                info["converged"] = run_converged(system, args.converged, Path(wd))
                print("\n".join(_run_table(system, info["converged"])) + "\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
