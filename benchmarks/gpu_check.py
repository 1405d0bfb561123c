"""The prepared GPU check: one script, one time limit, one summary line.

On a machine with CuPy and a device, for (H2O)2 and (H2O)3 in cc-pVDZ:

- spin-orbital CCSD residuals at fixed amplitudes (MP2 guess, perturbed) on NumPy and on
  CuPy (best of ``--repeats``): the largest relative difference (must be <= 1e-12), the
  time on each and the speedup, the predicted peak against the metered device peak and
  the CuPy pool's bytes;
- closed-shell CCSD (``sequant_eval.chem.CCSD(mf, backend="cupy")``) against the NumPy run
  of the same solver: the correlation energies (relative difference <= 1e-12) and times;
- the cuBLAS dgemm rate (4096^3, float64).

Every figure is printed as one JSON line as it is measured, then one summary line; with
``--json`` the rows are written to a file (e.g. under $OUT on the device machine). The
time limit (``--time-limit`` seconds) stops the run between steps and still prints the
summary of what was measured. Without a GPU it says "no GPU" and exits 0.

    python benchmarks/gpu_check.py [--repeats 3] [--time-limit 480] [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time

import numpy as np

TOLERANCE = 1e-12
SYSTEMS = ("water_dimer", "water_trimer")


class _OutOfTime(Exception):
    pass


def water_trimer() -> str:
    """A cyclic water trimer (O-O 2.85 Angstrom, each water donating to the next)."""
    lines, r = [], 2.85 / math.sqrt(3)
    for k in range(3):
        a, b = 2 * math.pi * k / 3, 2 * math.pi * (k + 1) / 3
        o = np.array([r * math.cos(a), r * math.sin(a), 0.0])
        nxt = np.array([r * math.cos(b), r * math.sin(b), 0.0])
        h1 = o + 0.96 * (nxt - o) / np.linalg.norm(nxt - o)        # the donated H
        h2 = o + 0.96 * np.array([0.3 * math.cos(a), 0.3 * math.sin(a), 0.954])
        for sym, x in (("O", o), ("H", h1), ("H", h2)):
            lines.append(f"{sym} {x[0]:.6f} {x[1]:.6f} {x[2]:.6f}")
    return "\n".join(lines)


def _mean_field(system: str):
    from sequant_eval.chem import molecules

    atom = molecules.geometry(system) if system != "water_trimer" else water_trimer()
    return molecules.mean_field(molecules.molecule_from_atoms(atom, "cc-pvdz"))


def _best(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _rel(a, b) -> float:
    return float(np.abs(np.asarray(a) - b).max() / max(1e-300, np.abs(b).max()))


def spin_orbital(system: str, mf, repeats: int) -> dict:
    import sequant_eval as se
    from sequant_eval.chem.equations import ccsd_equations
    from sequant_eval.chem.integrals import SpinOrbitalIntegrals
    from sequant_eval.chem.solver import mp2_guess

    ints = SpinOrbitalIntegrals.from_scf(mf)
    t = mp2_guess(ints)
    rng = np.random.default_rng(0)
    t1 = t["t1"] + 0.01 * rng.uniform(-1, 1, t["t1"].shape)
    tensors = dict(ints.tensors(), t1={("a", "i"): t1}, t2={("a", "a", "i", "i"): t["t2"]})
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    predicted = ev.analyze().peak_bytes
    ev.evaluate(tensors)                                        # warm: kernel plans
    cpu_s, ref = _best(lambda: ev.evaluate(tensors), repeats)
    ev.evaluate(tensors, backend="cupy")                        # warm: CUDA context, pool
    gpu_s, (out, meter) = _best(
        lambda: ev.evaluate(tensors, backend="cupy", return_meter=True), repeats)
    host = all(type(out[k]) is np.ndarray for k in out)
    diff = max(_rel(out[k], ref[k]) for k in ref)
    return {"check": "spin-orbital", "system": system, "nocc": ints.nocc, "nvir": ints.nvir,
            "numpy_s": cpu_s, "cupy_s": gpu_s, "speedup": cpu_s / gpu_s,
            "max_rel_diff": diff, "host_results": host, "predicted_peak": predicted,
            "metered_peak": meter.peak_bytes, "device_peaks": meter.device_peaks,
            "pool_bytes": meter.pool_peak, "ok": host and diff <= TOLERANCE}


def closed_shell(system: str, mf) -> dict:
    from sequant_eval.chem import CCSD

    t = time.perf_counter()
    cpu = CCSD(mf).run()
    cpu_s = time.perf_counter() - t
    t = time.perf_counter()
    gpu = CCSD(mf, backend="cupy").run()
    gpu_s = time.perf_counter() - t
    diff = abs(gpu.e_corr - cpu.e_corr) / max(1e-300, abs(cpu.e_corr))
    return {"check": "closed-shell", "system": system, "e_corr_numpy": cpu.e_corr,
            "e_corr_cupy": gpu.e_corr, "rel_diff": diff, "numpy_s": cpu_s, "cupy_s": gpu_s,
            "speedup": cpu_s / gpu_s, "converged": bool(cpu.converged and gpu.converged),
            "ok": diff <= TOLERANCE and bool(cpu.converged and gpu.converged)}


def dgemm_rate(n: int = 4096, repeats: int = 5) -> dict:
    import cupy

    a = cupy.random.default_rng(0).standard_normal((n, n))
    a @ a
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(repeats):
        start.record()
        a @ a
        stop.record()
        stop.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return {"check": "dgemm", "n": n, "tflops": 2 * n**3 / best / 1e12, "ok": True}


def _summary(rows: list[dict], out_of_time: bool) -> str:
    parts = []
    for r in rows:
        if r["check"] == "spin-orbital":
            parts.append(f"so {r['system']} diff {r['max_rel_diff']:.1e} x{r['speedup']:.1f} "
                         f"pool {r['pool_bytes'] / 1e9:.2f}/{r['predicted_peak'] / 1e9:.2f} GB")
        elif r["check"] == "closed-shell":
            parts.append(f"cs {r['system']} dE {r['rel_diff']:.1e} x{r['speedup']:.1f}")
        elif r["check"] == "dgemm":
            parts.append(f"dgemm {r['tflops']:.1f} TFLOP/s")
        elif r["check"] == "error":
            parts.append(f"{r['step']}: {r['error']}")
    ok = all(r.get("ok") for r in rows) and not out_of_time
    status = "ok" if ok else ("OUT OF TIME" if out_of_time else "FAIL")
    return f"gpu_check {status}: " + "; ".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--time-limit", type=float, default=480.0, help="seconds (default 480)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from sequant_eval.runtime.gpu import gpu_available

    if not gpu_available():
        print("no GPU (CuPy or a CUDA device missing): nothing to check here")
        return 0

    def _alarm(signum, frame):
        raise _OutOfTime()

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, int(args.time_limit)))
    rows: list[dict] = []
    steps = [("dgemm", lambda: dgemm_rate())]
    for system in SYSTEMS:
        steps.append((f"spin-orbital {system}", lambda s=system: spin_orbital(
            s, _mean_field(s), args.repeats)))
        steps.append((f"closed-shell {system}", lambda s=system: closed_shell(
            s, _mean_field(s))))
    out_of_time = False
    try:
        for step, fn in steps:
            try:
                row = fn()
            except _OutOfTime:
                raise
            except Exception as err:              # a failed step is a figure too
                row = {"check": "error", "step": step, "error": repr(err)[:200], "ok": False}
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    except _OutOfTime:
        out_of_time = True
    finally:
        signal.alarm(0)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1, default=str)
    print(_summary(rows, out_of_time), flush=True)
    return 0 if all(r.get("ok") for r in rows) and not out_of_time else 1


if __name__ == "__main__":
    sys.exit(main())
