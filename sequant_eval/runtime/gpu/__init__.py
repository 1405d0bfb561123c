"""The GPU layer: the unrolled op graph rewritten (``passes``), placed on the host and a GPU
by a cost model (``placement``), cut into single-device runs and routed (``runs``), fitted
to a GPU budget (``residency``), and run on NumPy and CuPy (``backend``) by ``placed``.
It imports the CPU core; the core never imports it.
"""
from __future__ import annotations

from .backend import CupyBackend, gpu_available, gpu_backends
from .placed import Placed, RoutePicker
from .placement import CostModel, Machine

__all__ = ["Placed", "RoutePicker", "Machine", "CostModel", "CupyBackend", "gpu_available",
           "gpu_backends"]
