"""One out-of-core (H2O)3/cc-pVDZ CCSD residual: one process vs a 2-worker Dask LocalCluster.

Spin-orbital CCSD on the water trimer (30 occupied, 114 virtual spin orbitals). The
integral blocks are the HDF5 file of ``benchmarks/out_of_core.py trimer`` (written once in
``--dir``, reused when present); ``t2`` is the MP2 guess in an HDF5 file beside it (opened
read-only: HDF5 locks a file open for writing against the workers), ``t1`` zero, so every large input is a dataset the workers open by path and read per batch. The
residual is planned once under ``--budget`` (the trimer run's residual budget, 474.8 MiB)
without persistence (a cluster run keeps nothing between evaluations), and both sides
evaluate that schedule: ``Evaluator.evaluate(tensors)`` and ``evaluate(tensors,
client=...)`` on ``LocalCluster(n_workers=2, threads_per_worker=1)``. Rounds interleaved
after one warm-up each; a last cluster run traces every task's allocations::

    python benchmarks/distributed_out_of_core.py --dir /tmp/sequant-ooc --rounds 2 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.append(str(_HERE))
from out_of_core import TRIMER  # noqa: E402  (it puts its folder first on the path:)
from side_by_side import side_by_side  # noqa: E402

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

MIB = 1 << 20


def run(args: argparse.Namespace) -> dict:
    import h5py
    from pyscf import gto, scf

    import sequant_eval as se
    from sequant_eval.chem import CCSD
    from sequant_eval.chem.equations import ccsd_equations
    from sequant_eval.chem.on_disk import AmplitudeFile
    from sequant_eval.chem.solver import orbital_denominators

    mol = gto.M(atom=TRIMER, basis="cc-pvdz", unit="Angstrom", symmetry=False, verbose=0)
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-11
    mf.kernel()
    cc = CCSD(mf, spin_orbital=True, integrals_on_disk=args.dir)
    ints = cc.integrals
    nv, no = ints.nvir, ints.nocc
    path = Path(args.dir) / "bench-amplitudes.h5"
    amps = AmplitudeFile(path.with_suffix(".tmp.h5"), (nv, nv, no, no), 1 << 17)
    t = amps.mp2_guess(ints, orbital_denominators(ints))
    with h5py.File(path, "w") as f:                 # a read-only copy the workers can open
        f.create_dataset("t2", data=t["t2"][()])
    amps.close()
    amps = h5py.File(path, "r")
    tensors = dict(ints.tensors(), t1={("a", "i"): t["t1"]}, t2={("a", "a", "i", "i"): amps["t2"]})
    ev = se.Evaluator(ccsd_equations(), ints.extents, budget=args.budget)
    try:
        figures = side_by_side(ev, tensors, args.rounds)
    finally:
        amps.close()
        path.unlink(missing_ok=True)
        cc.close()
    return {"system": "(H2O)3/cc-pVDZ spin-orbital CCSD residual, out of core",
            "extents": dict(ints.extents), **figures}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/sequant-ooc")
    ap.add_argument("--budget", default=474.8 * MIB, type=float)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    r = run(args)
    text = json.dumps(r, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    med = statistics.median
    print(f"one process {med(r['one_process_s']):.1f} s, cluster {med(r['cluster_s']):.1f} s, "
          f"worker peak {r['max_task_traced_bytes'] / MIB:.1f} MiB traced vs "
          f"{r['predicted_worker_peak_bytes'] / MIB:.1f} MiB predicted")


if __name__ == "__main__":
    main()
