"""General contractions as NumPy's ``einsum`` computes them: rank-0 tensors, diagonals,
single-factor sums, hyperedges. Oracle: ``numpy.einsum`` on the same arrays."""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se


@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"])
@pytest.mark.parametrize("text, expected", [
    ("E = T0{;}", 3.0),
    ("E = 2 T0{;}", 6.0),
    ("E = T0{;} - 1/2 T0{;}", 1.5),
    ("E = T0{;} * T1{;}", -6.0),
    ("E = T0{;} + T0{;} * T1{;}", -3.0),
])
def test_rank0_alone_in_a_term(text, expected, backend):
    """A rank-0 tensor alone in a term stays rank 0 (it used to become 1-D and fail in the
    sum's transpose). Oracle: the arithmetic written out."""
    if backend == "array_api_strict":
        pytest.importorskip("array_api_strict")
    out = se.evaluate(text, {"T0": np.array(3.0), "T1": np.array(-2.0)}, {}, backend=backend)
    assert np.asarray(out["E"]).shape == ()
    assert float(out["E"]) == pytest.approx(expected, rel=1e-15)


def test_rank0_times_a_vector():
    """Oracle: numpy.einsum(',a->a')."""
    x, y = np.array(1.5), np.arange(1.0, 4.0)
    out = se.evaluate("R{a} = T0{;} * T1{a} + T1{a}", {"T0": x, "T1": y}, {"a": 3})
    np.testing.assert_allclose(out["R"], np.einsum(",a->a", x, y) + y, rtol=1e-15)
