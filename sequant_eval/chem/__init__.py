"""Quantum-chemistry front end: CC equations, integrals, the solver, and PySCF-shaped
methods: ``CCSD(mf)`` (``RCCSD`` or ``GCCSD`` by the reference) and ``CCSDT(mf)``;
``InMemory()`` / ``OnDisk(DIR)`` storage."""
from __future__ import annotations

from .ccsdt import CCSDT
from .gccsd import GCCSD
from .pyscf_ccsd import CCSD
from .rccsd import RCCSD
from .storage import InMemory, OnDisk

__all__ = ["CCSD", "CCSDT", "GCCSD", "RCCSD", "InMemory", "OnDisk"]
