"""sequant-eval: evaluate tensor-contraction equations as one fused forest, exactly.

    import sequant_eval as se
    eqs = se.parse(text)
    out = se.evaluate(eqs, tensors, extents)
    rep = se.analyze(eqs, extents)
"""
from __future__ import annotations

from .api import Evaluator, Report, analyze, evaluate, min_budget
from .plan import BatchPolicy, Loop, LoopKind
from .errors import (DistributedError, ExpressionError, InfeasibleBudget, InputTypeError, MissingTensor,
                     ParseError, PolicyError, ScheduleError, SequantEvalError, ShapeMismatch,
                     SinkError, StaleInput, TaskFailed, TruncatedInput, UnknownSpace,
                     UnsupportedFeature, UsageError)
from .expr import Equation, Index, Operator, Product, Tensor, parse, to_text

__version__ = "0.1.0"

__all__ = [
    "parse", "to_text", "evaluate", "analyze", "min_budget", "Evaluator", "Report", "BatchPolicy", "Loop",
    "LoopKind",
    "Equation", "Index", "Operator", "Product", "Tensor",
    "SequantEvalError", "ParseError", "ExpressionError", "MissingTensor", "ShapeMismatch",
    "UnknownSpace", "InfeasibleBudget", "ScheduleError", "UnsupportedFeature",
    "InputTypeError", "PolicyError", "UsageError", "SinkError", "StaleInput", "TruncatedInput", "DistributedError",
    "TaskFailed",
]


def __getattr__(name: str):
    """``se.chem`` loads the chemistry front end on first use (it needs PySCF, which the
    evaluator does not), so ``import sequant_eval as se; se.chem.CCSD(mf)`` works."""
    if name == "chem":
        from importlib import import_module

        return import_module(f"{__name__}.chem")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
