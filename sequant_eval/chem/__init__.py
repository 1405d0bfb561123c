"""Quantum-chemistry front end: CC equations, integrals, the solver, and PySCF-shaped
methods: ``CCSD(mf)`` (``RCCSD``, ``UCCSD`` or ``GCCSD`` by the reference) and ``CCSDT(mf)``;
``InMemory()`` / ``OnDisk(DIR)`` storage."""
from __future__ import annotations

from .ccsdt import CCSDT
from .gccsd import GCCSD
from .pyscf_ccsd import CCSD
from .rccsd import RCCSD
from .storage import InMemory, OnDisk
from .uccsd import UCCSD

__all__ = ["CCSD", "CCSDT", "GCCSD", "RCCSD", "UCCSD", "InMemory", "OnDisk"]
