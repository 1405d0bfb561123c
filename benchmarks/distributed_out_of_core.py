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
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.append(str(_HERE))
from out_of_core import TRIMER  # noqa: E402  (it puts its folder first on the path:)

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

MIB = 1 << 20


def run(args: argparse.Namespace) -> dict:
    import distributed
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
    load_before = os.getloadavg()
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None,
                                      silence_logs=logging.ERROR) as cluster, \
                distributed.Client(cluster) as client:
            rep = ev.analyze(client=client)
            print(rep.cluster.dump(), flush=True)
            ref = ev.evaluate(tensors)
            out = ev.evaluate(tensors, client=client)
            diff = max(float(np.abs(out[k] - ref[k]).max() / max(1.0, np.abs(ref[k]).max()))
                       for k in ref)
            one, many = [], []
            for r in range(args.rounds):
                t0 = time.perf_counter()
                ev.evaluate(tensors)
                one.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                ev.evaluate(tensors, client=client)
                many.append(time.perf_counter() - t0)
                print(f"round {r}: one process {one[-1]:.1f} s, cluster {many[-1]:.1f} s",
                      flush=True)
            _, meter = ev.evaluate(tensors, client=client, return_meter=True,
                                   trace_tasks=True)
    finally:
        amps.close()
        path.unlink(missing_ok=True)
        cc.close()
    plan = meter.plan
    traced = [x.traced_bytes for x in meter.tasks]
    return {
        "system": "(H2O)3/cc-pVDZ spin-orbital CCSD residual, out of core",
        "extents": dict(ints.extents), "budget_bytes": plan.budget_bytes,
        "single_peak_bytes": rep.peak_bytes, "loops": len(rep.loops),
        "rounds": args.rounds, "one_process_s": one, "cluster_s": many,
        "tasks": plan.tasks, "blocks": len(plan.blocks),
        "predicted_worker_peak_bytes": plan.worker_peak_bytes,
        "max_task_metered_bytes": meter.task_peak_bytes,
        "max_task_traced_bytes": max(traced) if traced else 0,
        "predicted_client_peak_bytes": plan.client_peak_bytes,
        "client_metered_bytes": meter.client_peak_bytes,
        "task_flops_share": sum(x.flops for x in meter.tasks) / meter.flops,
        "max_rel_diff": diff, "load_before": load_before, "load_after": os.getloadavg(),
    }


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
