"""The public entry points: ``evaluate``, ``analyze``, ``min_budget`` and the reusable
``Evaluator`` (``evaluator.py``); equations that read other equations' results run stage by
stage under the same ``Evaluator`` (``staged.py``)."""
from .evaluator import Evaluator, Report, analyze, evaluate, min_budget, resolve_policy
from .staged import StagedEvaluator, StagedReport

__all__ = ["Evaluator", "Report", "evaluate", "analyze", "min_budget", "resolve_policy",
           "StagedEvaluator", "StagedReport"]
