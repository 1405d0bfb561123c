"""Quantum-chemistry front end: CC equations, integrals, solver, ``CCSD(mf)``,
``CCSDT(mf)``."""
from __future__ import annotations

from .pyscf_ccsd import CCSD, CCSDT

__all__ = ["CCSD", "CCSDT"]
