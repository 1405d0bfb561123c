"""Quantum-chemistry front end: CC equations, integrals, solver, ``CCSD(mf)``,
``CCSDT(mf)``."""
from __future__ import annotations

from .ccsdt import CCSDT
from .pyscf_ccsd import CCSD

__all__ = ["CCSD", "CCSDT"]
