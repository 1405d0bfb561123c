"""PySCF GCCSD as an oracle for a converged spin-orbital CCSD solution (test helper)."""
from __future__ import annotations

from pyscf import cc


def to_pyscf(t1, t2):
    """Our (a, i) / (a, b, i, j) layouts -> PySCF's (i, a) / (i, j, a, b)."""
    return t1.T.copy(), t2.transpose(2, 3, 0, 1).copy()


def pyscf_gccsd(ints, result, from_ours: bool, normt: float = 1e-9):
    """Converged PySCF GCCSD on the same RHF. With ``from_ours`` it starts from our
    amplitudes (PySCF's DIIS needs ~10 s from scratch for water/cc-pVDZ): it still iterates
    to its own fixed point, so a wrong solution would be iterated away."""
    mycc = cc.GCCSD(ints.scf)
    mycc.conv_tol = 1e-12
    mycc.conv_tol_normt = normt
    if from_ours:
        mycc.kernel(*to_pyscf(result.t["t1"], result.t["t2"]))
    else:
        mycc.kernel()
    assert mycc.converged
    return mycc
