"""Expression layer: indices, tensors, products, equations; the SeQuant text parser and printer."""
from __future__ import annotations

from .index import Index, check_extents, mode_space
from .parser import parse
from .printer import to_text
from .terms import (Equation, Operator, Product, Tensor, check_unique_results, free_indices,
                    operator_terms)

__all__ = [
    "Index", "Tensor", "Operator", "Product", "Equation",
    "parse", "to_text", "free_indices", "operator_terms", "mode_space", "check_extents",
    "check_unique_results",
]
