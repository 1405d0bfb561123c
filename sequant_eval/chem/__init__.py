"""Quantum-chemistry front end: CC equations, integrals, solver."""
from __future__ import annotations
