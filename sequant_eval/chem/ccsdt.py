"""CCSDT on a PySCF mean field: generalized (spin-orbital) CCSD with triples.

The spin-orbital CCSDT equations (``data/ccsdt_so.txt``, derived in-package by
``chem/wick.py``) on the reference's spin orbitals; ``t3`` joins the amplitudes with the
triples denominator ``D3 = e_i + e_j + e_k − e_a − e_b − e_c``, starting at zero.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedFeature
from .equations import ccsdt_equations
from .gccsd import GCCSD

__all__ = ["CCSDT"]


class CCSDT(GCCSD):
    """Coupled-cluster singles, doubles and triples on a converged PySCF mean field.

    The spin-orbital CCSDT equations on the reference's spin orbitals, a closed-shell RHF
    included (its energy is then RCCSDT's); the options are
    :class:`~sequant_eval.chem.cc.CoupledCluster`'s, in memory only. ``t3`` is in PySCF's
    spin-orbital layout ``t3[i, j, k, a, b, c]``, starting at zero.
    """

    triples = None                     # (T) is a correction to CCSD, not CCSDT
    ladder = None                      # its R2 ladder is written with antisymmetrizers
    packed_pairs = False
    _OPTIONS = GCCSD._OPTIONS - {"packed_pairs"}

    method = "CCSDT"
    amplitudes = ("t1", "t2", "t3")

    def plain_equations(self):
        """``data/ccsdt_so.txt``."""
        return ccsdt_equations()

    def _check_options(self) -> None:
        if self.out_of_core:
            raise UnsupportedFeature("CCSDT keeps its integrals and amplitudes in memory; "
                                     "integrals_on_disk is for CCSD (drop it, or use a budget)")
        if self.intermediates:
            raise UnsupportedFeature("CCSDT evaluates its plain equations; intermediates=True "
                                     "is for closed-shell CCSD (leave it unset)")

    def kernel(self, t1: np.ndarray | None = None, t2: np.ndarray | None = None,
               t3: np.ndarray | None = None):
        """Solve from the given amplitudes (PySCF layouts; the guess for those not given);
        returns ``(e_corr, t1, t2, t3)``."""
        self._solve({"t1": t1, "t2": t2, "t3": t3})
        return self.e_corr, self.t1, self.t2, self.t3
