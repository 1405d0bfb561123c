"""Quantum-chemistry front end: CC equations, integrals, solver, ``CCSD(mf)``."""
from __future__ import annotations

from .pyscf_ccsd import CCSD

__all__ = ["CCSD"]
