"""CCSDT on a PySCF mean field: :class:`~sequant_eval.chem.pyscf_ccsd.CCSD` with triples.

The spin-orbital CCSDT equations (``data/ccsdt_so.txt``, derived in-package by
``chem/wick.py``) through the CCSD front end's spin-orbital path; ``t3`` joins the
amplitudes with the triples denominator, starting at zero.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import UnsupportedFeature
from .equations import ccsdt_equations
from .pyscf_ccsd import CCSD
from .solver import IterationRecord

__all__ = ["CCSDT"]


class CCSDT(CCSD):
    """Coupled-cluster singles, doubles and triples on a converged PySCF mean field.

    The spin-orbital CCSDT equations (``data/ccsdt_so.txt``) on the reference's spin
    orbitals, a closed-shell RHF included (its energy is then RCCSDT's); the parameters
    are :class:`CCSD`'s, less the closed-shell and out-of-core paths. ``t3`` is in PySCF's
    spin-orbital layout ``t3[i, j, k, a, b, c]``, starting at zero.
    """

    method = "CCSDT"
    triples = True

    def __init__(self, mf: Any, frozen: int = 0, budget: Any = None, backend: str = "numpy",
                 spin_orbital: bool | None = None, conv_tol: float = 1e-7,
                 conv_tol_normt: float = 1e-5, max_cycle: int = 50, diis_space: int = 6,
                 callback: Callable[[IterationRecord, float, int], Any] | None = None,
                 integrals_on_disk: str | os.PathLike | None = None,
                 slab_bytes: float | None = None, intermediates: bool | None = None) -> None:
        if spin_orbital is False:
            raise UnsupportedFeature("CCSDT runs the spin-orbital equations only (a "
                                     "closed-shell RHF through its spin orbitals); drop "
                                     "spin_orbital=False")
        if integrals_on_disk is not None:
            raise UnsupportedFeature("CCSDT keeps its integrals and amplitudes in memory; "
                                     "integrals_on_disk is for CCSD (drop it, or use a budget)")
        if intermediates:
            raise UnsupportedFeature("CCSDT evaluates its plain equations; intermediates=True "
                                     "is for closed-shell CCSD (leave it unset)")
        self.t3: np.ndarray | None = None
        super().__init__(mf, frozen=frozen, budget=budget, backend=backend, spin_orbital=True,
                         conv_tol=conv_tol, conv_tol_normt=conv_tol_normt,
                         max_cycle=max_cycle, diis_space=diis_space, callback=callback,
                         slab_bytes=slab_bytes, intermediates=intermediates)

    @staticmethod
    def _spin_orbital_equations():
        return ccsdt_equations()

    def residual(self, t1: np.ndarray, t2: np.ndarray, t3: np.ndarray
                 ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """``(E, R1, R2, R3)`` at amplitudes in PySCF's layouts (``t3[i, j, k, a, b, c]``),
        the residuals in the same layouts."""
        e, r = self._residual_function()(
            {"t1": np.ascontiguousarray(t1.T),
             "t2": np.ascontiguousarray(t2.transpose(2, 3, 0, 1)),
             "t3": np.ascontiguousarray(t3.transpose(3, 4, 5, 0, 1, 2))})
        return (e, r["t1"].T, r["t2"].transpose(2, 3, 0, 1),
                r["t3"].transpose(3, 4, 5, 0, 1, 2))

    def kernel(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Runs and returns ``(e_corr, t1, t2, t3)``."""
        self.run()
        return self.e_corr, self.t1, self.t2, self.t3
