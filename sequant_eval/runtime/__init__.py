"""Runtime: the op graph, its passes, placement and runs, and the one executor.

An analyzed schedule is validated as a cell table (``cells``), lowered to the op graph
(``lower``), rewritten by passes (``passes``), placed on devices (``placement``), cut into
runs (``runs``) and executed (``engine``) on a backend (``backends``).
"""
from __future__ import annotations

from .backends import (ArrayApiBackend, CupyBackend, DryArray, DryRunBackend, NumpyBackend,
                       get_backend, gpu_available)
from .compiled import Compiled, RoutePicker
from .engine import Meter, run_graph
from .graph import Device, Graph, Node, Op
from .sources import TensorSource

__all__ = ["Compiled", "RoutePicker", "Meter", "run_graph", "Graph", "Node", "Op", "Device",
           "TensorSource", "NumpyBackend", "ArrayApiBackend", "CupyBackend", "DryRunBackend",
           "DryArray", "get_backend", "gpu_available"]
