"""One prepared script for a GPU machine: CuPy vs NumPy on CCSD residuals.

For (H2O)2/cc-pVDZ and (H2O)2/aug-cc-pVDZ (the larger case): one residual evaluation at
fixed amplitudes on NumPy and on CuPy (best of N), the largest relative difference, a
batched evaluation under a GPU memory budget (a quarter of the unbatched prediction), and
the CuPy memory-pool bytes against the predicted peak. Prints a table and, with --json,
writes the numbers (e.g. into $OUT on the device machine).

    python benchmarks/gpu_check.py [--repeats 3] [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.chem.integrals import SpinOrbitalIntegrals
from sequant_eval.chem.solver import mp2_guess
from sequant_eval.runtime import gpu_available

CASES = [("water_dimer", "cc-pvdz"), ("water_dimer", "aug-cc-pvdz")]


def _best(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def run(repeats: int) -> list[dict]:
    rows = []
    for molecule, basis in CASES:
        ints = SpinOrbitalIntegrals.from_molecule(molecule, basis)
        t = mp2_guess(ints)
        rng = np.random.default_rng(0)
        t1 = t["t1"] + 0.01 * rng.uniform(-1, 1, t["t1"].shape)
        tensors = dict(ints.tensors(), t1={("a", "i"): t1}, t2={("a", "a", "i", "i"): t["t2"]})
        ev = se.Evaluator(ccsd_equations(), ints.extents)
        predicted = ev.analyze().peak_bytes
        ev.evaluate(tensors)
        cpu_s, ref = _best(lambda: ev.evaluate(tensors), repeats)
        row = {"system": f"{molecule}/{basis}", "nocc": ints.nocc, "nvir": ints.nvir,
               "predicted_peak": predicted, "numpy_s": cpu_s}
        if gpu_available():
            import cupy

            ev.evaluate(tensors, backend="cupy")
            cupy.cuda.Device().synchronize()
            gpu_s, (out, meter) = _best(
                lambda: ev.evaluate(tensors, backend="cupy", return_meter=True), repeats)
            row |= {"cupy_s": gpu_s, "speedup": cpu_s / gpu_s,
                    "max_rel_diff": max(float(np.abs(np.asarray(out[k]) - ref[k]).max()
                                              / max(1e-300, np.abs(ref[k]).max())) for k in ref),
                    "metered_peak": meter.peak_bytes, "device_peaks": meter.device_peaks,
                    "pool_bytes": meter.pool_peak}
            small = se.Evaluator(ccsd_equations(), ints.extents, gpu_budget=predicted / 4)
            b_s, (bout, bmeter) = _best(
                lambda: small.evaluate(tensors, backend="cupy", return_meter=True), repeats)
            row |= {"gpu_budget": predicted / 4, "budgeted_s": b_s,
                    "budgeted_device_peaks": bmeter.device_peaks,
                    "budgeted_max_rel_diff": max(
                        float(np.abs(np.asarray(bout[k]) - ref[k]).max()
                              / max(1e-300, np.abs(ref[k]).max())) for k in ref)}
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not gpu_available():
        print("no GPU (CuPy or device missing): only the NumPy timings are measured",
              file=sys.stderr)
    rows = run(args.repeats)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
