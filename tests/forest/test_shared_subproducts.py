"""Binarizing terms together (``build_forest(share_subproducts=True)``).

Oracle: each term contracted by ``opt_einsum`` on its own, summed, written in the test;
and the per-term binarization of the same equations (the evaluation must not change,
only which values the forest holds)."""
from __future__ import annotations

import numpy as np
import opt_einsum
import pytest

import sequant_eval as se
from sequant_eval.chem.triples import triples_equations
from sequant_eval.expr.index import mode_space
from sequant_eval.forest.build import build_forest

EXT = {"i": 3, "a": 4}


def _tensors(rng):
    n = sum(EXT.values())
    g = rng.standard_normal((n, n, n, n))
    f = rng.standard_normal((n, n))
    t1 = rng.standard_normal((4, 3))
    t2 = rng.standard_normal((4, 4, 3, 3))
    eo, ev = -1 - rng.random(3), 1 + rng.random(4)
    d3 = 1 / (eo[:, None, None, None, None, None] + eo[None, :, None, None, None, None]
              + eo[None, None, :, None, None, None] - ev[None, None, None, :, None, None]
              - ev[None, None, None, None, :, None] - ev[None, None, None, None, None, :])
    return {"g": g, "f": f, "t1": {("a", "i"): t1}, "t2": {("a", "a", "i", "i"): t2},
            "D3": {("i", "i", "i", "a", "a", "a"): d3}}


def _block(tensors, name, spaces):
    given = tensors[name]
    if isinstance(given, dict):
        return given[tuple(spaces)]
    cut = {"i": slice(0, 3), "a": slice(3, 7)}
    return given[tuple(cut[s] for s in spaces)]


def _oracle(eq, tensors) -> float:
    total = 0.0
    for p in eq.terms:
        symbols: dict = {}
        inputs = ["".join(symbols.setdefault(ix, opt_einsum.get_symbol(len(symbols)))
                          for ix in t.slots) for t in p.factors]
        arrays = [_block(tensors, t.name, [mode_space(ix) for ix in t.slots])
                  for t in p.factors]
        total += float(p.coefficient) * float(opt_einsum.contract(
            ",".join(inputs) + "->", *arrays))
    return total


def test_shared_binarization_computes_the_same_energy_from_fewer_values():
    """On the (T) energy's 232 terms: the same number as the per-term binarization and
    the term-by-term einsum (1e-12 relative), with far fewer distinct o³v³ values."""
    eqs = triples_equations()
    tensors = _tensors(np.random.default_rng(7))
    plain = se.Evaluator(eqs, EXT).evaluate(tensors)["ET"]
    shared = se.Evaluator(eqs, EXT, share_subproducts=True).evaluate(tensors)["ET"]
    want = _oracle(eqs[0], tensors)
    assert abs(float(shared) - want) <= 1e-12 * abs(want)
    assert abs(float(plain) - want) <= 1e-12 * abs(want)

    def triples_values(forest):
        return sum(1 for v in forest.values if v.kind.value == "contract" and v.rank == 6)
    together, alone = build_forest(eqs, EXT, share_subproducts=True), build_forest(eqs, EXT)
    assert triples_values(together) <= 4 < triples_values(alone)
    assert together.binary_contractions == alone.binary_contractions


def test_shared_binarization_is_deterministic():
    eqs = triples_equations()
    assert (build_forest(eqs, EXT, share_subproducts=True).dump()
            == build_forest(eqs, EXT, share_subproducts=True).dump())


@pytest.mark.parametrize("text", [
    "E = X{i_1;i_2} * Y{i_2;i_3} * Z{i_3;i_1}",
    "R{i_1;i_2} = X{i_1;i_3} * Y{i_3;i_2} + X{i_1;i_3} * Y{i_3;i_4} * Z{i_4;i_2}",
])
def test_terms_without_a_profitable_shared_pair_keep_their_own_paths(text):
    """A single term, or a shared pair that would not lower any term's flops, leaves the
    binarization as it is alone."""
    eqs = se.parse(text)
    ext = {"i": 5}
    assert build_forest(eqs, ext, share_subproducts=True).dump() == build_forest(eqs, ext).dump()
