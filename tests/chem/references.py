"""Shared test references: the water geometry, tight thresholds, a converged RHF."""
from __future__ import annotations

from pyscf import gto, scf

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
TIGHT = {"conv_tol": 1e-11, "conv_tol_normt": 1e-9}


def rhf(basis: str, atom: str = WATER):
    """A converged RHF (conv_tol 1e-12) of ``atom`` in ``basis``."""
    mf = scf.RHF(gto.M(atom=atom, basis=basis, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()
