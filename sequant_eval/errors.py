"""The package's exceptions: one root, one leaf per kind of refusal.

Every message names the culprit (the term, the index, the tensor, the budget) and, where
there is one, the way out.
"""
from __future__ import annotations

__all__ = [
    "SequantEvalError",
    "ParseError",
    "ExpressionError",
    "MissingTensor",
    "ShapeMismatch",
    "UnknownSpace",
    "InfeasibleBudget",
    "ScheduleError",
    "UnsupportedFeature",
]


class SequantEvalError(Exception):
    """Root of every error this package raises on purpose."""


class ParseError(SequantEvalError):
    """Malformed equation text; carries the 1-based line and column and the offending text."""

    def __init__(self, message: str, line: int, column: int, text: str = "") -> None:
        self.line = line
        self.column = column
        self.text = text
        where = f"line {line}, column {column}"
        snippet = ""
        if text:
            lo = max(0, column - 40)
            window = text[lo : column + 40]
            snippet = f"\n    {window}\n    {' ' * (column - 1 - lo)}^"
        super().__init__(f"{where}: {message}{snippet}")


class ExpressionError(SequantEvalError):
    """Well-formed text that does not describe a valid equation (e.g. mismatched free indices)."""


class MissingTensor(SequantEvalError):
    """A tensor (or one block of it) that an equation reads was not supplied."""


class ShapeMismatch(SequantEvalError):
    """A supplied array's shape disagrees with the extents of the slots that read it."""


class UnknownSpace(SequantEvalError):
    """An index space used by an equation has no extent."""


class InfeasibleBudget(SequantEvalError):
    """No plan meets the memory budget; ``minimum`` is the smallest budget that works."""

    def __init__(self, message: str, budget: float, minimum: float) -> None:
        self.budget = budget
        self.minimum = minimum
        super().__init__(message)


class ScheduleError(SequantEvalError):
    """A schedule or cell table that violates a well-formedness rule."""


class UnsupportedFeature(SequantEvalError):
    """Input that is valid but not (yet) evaluable, e.g. numerical composite indices."""
