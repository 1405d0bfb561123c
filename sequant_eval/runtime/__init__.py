"""Runtime: the CPU core, and beside it the GPU layer (``gpu/``) and the Dask layer
(``cluster/``), each importing the core and not each other.

The core: an analyzed schedule is validated as a cell table (``cells``), lowered (``lower``)
to the loop program (``program``) that the interpreter (``interpreter``) runs on one device
(``backends``: NumPy, an array-API namespace, the dry run), metered (``metering``), reading
its inputs through ``sources`` and writing results into ``sinks``; ``compiled`` holds it
all per fitted schedule. The unrolled op graph (``graph``, ``lower_schedule``) and its
executor (``engine``) serve the two layers above: ``gpu`` rewrites, places and routes it
on a host and a GPU; ``cluster`` cuts it into Dask tasks.
"""
from __future__ import annotations

from .backends import ArrayApiBackend, DryArray, DryRunBackend, NumpyBackend, get_backend
from .compiled import Compiled
from .engine import Meter, run_graph
from .graph import Device, Graph, Node, Op
from .sources import TensorSource

__all__ = ["Compiled", "Meter", "run_graph", "Graph", "Node", "Op", "Device", "TensorSource",
           "NumpyBackend", "ArrayApiBackend", "DryRunBackend", "DryArray", "get_backend"]
