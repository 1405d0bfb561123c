"""Runtime: compile a forest into a program and execute it on a backend with a memory meter."""
from __future__ import annotations

from .backends import DryArray, DryRunBackend, NumpyBackend, get_backend
from .executor import Meter, execute
from .program import Program, compile_program
from .sources import TensorSource
from .walk import Step, StepKind, Walk, build_walk

__all__ = ["Program", "compile_program", "execute", "Meter", "TensorSource", "NumpyBackend",
           "DryRunBackend", "DryArray", "get_backend", "Walk", "Step", "StepKind", "build_walk"]
