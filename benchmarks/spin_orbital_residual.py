#!/usr/bin/env python3
"""One spin-orbital CCSD residual per call, ours, for the side-by-side with ebcc GEBCC.

    python benchmarks/spin_orbital_residual.py SYSTEM PACKED CALLS

SYSTEM is one of closed_shell.py's (h2o, dimer, trimer, tetramer), cc-pVDZ, all
electrons, RHF; PACKED is 1 (the ladder over packed pairs, chem/pairs.py, the default) or
0 (the plain ladder). A warm-up call (planning, integral blocks, packing), then CALLS
timed calls of ``CCSD(mf, spin_orbital=True).residual_function()`` at random
antisymmetric amplitudes of size 1e-3, each after a 0.5 s pause; one JSON line out.
The anchors' side is ``../shared/bench/anchors_ccsd.py --systems trimer --approaches
ebcc_gccsd --repeats 3 --no-converge``, run alternately with this script
(docs/benchmarks.md, "The spin-orbital residual beside ebcc GEBCC").
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from pyscf import gto, scf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from closed_shell import SYSTEMS  # noqa: E402

from sequant_eval.chem import CCSD  # noqa: E402


def main() -> None:
    system, packed, calls = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
    mol = gto.M(atom=SYSTEMS[system], basis="cc-pvdz", verbose=0)
    mf = scf.RHF(mol).run(conv_tol=1e-10)
    cc = CCSD(mf, spin_orbital=True, packed_pairs=packed)
    o, v = cc.integrals.extents["i"], cc.integrals.extents["a"]
    rng = np.random.default_rng(0)
    t2 = rng.standard_normal((v, v, o, o)) * 1e-3
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    t = {"t1": rng.standard_normal((v, o)) * 1e-3, "t2": t2}
    residual = cc.residual_function()
    start = time.perf_counter()
    residual(t)
    warm = time.perf_counter() - start
    times = []
    for _ in range(calls):
        time.sleep(0.5)
        start = time.perf_counter()
        e, _ = residual(t)
        times.append(time.perf_counter() - start)
    report = cc.program().report()
    print(json.dumps({"system": system, "packed": packed, "warm_s": warm, "times_s": times,
                      "gflop": report.flops / 1e9, "peak_mib": report.peak_bytes / 2**20,
                      "E": e}))


if __name__ == "__main__":
    main()
