"""Tests for the sympy derivation of spin-orbital CCSD (sequant_eval.chem.derive).

The numerical checks evaluate the derived text with a tiny regex/einsum
evaluator written here (independent of the package parser) and compare with
two independent references (the fast checks run on the stored file; the sympy regeneration,
``derived_text``, is slow and carries ``@pytest.mark.slow``):

* the textbook Stanton-Gauss (JCP 94, 4334 (1991)) spin-orbital CCSD
  equations with the Fock-diagonal terms kept (residual form, real symmetric
  integrals, non-diagonal Fock matrix), and
* a brute-force Fock-space calculation, ``<Phi|exp(-T) H exp(T)|0>`` with
  Jordan-Wigner matrices, valid for any (even non-Hermitian) f and g.
"""
from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from sequant_eval.chem import derive

from tests.oracles.text import TENSOR, TOKEN, logical_lines

NO, NV = 4, 5
N = NO + NV
O, V = slice(0, NO), slice(NO, N)


@pytest.fixture(scope="module")
def derived_text() -> str:
    """A fresh sympy derivation (slow: only for tests marked slow)."""
    return derive.derive_ccsd_text()


@pytest.fixture(scope="module")
def stored_text() -> str:
    """The packaged equations, which the slow test keeps equal to a fresh derivation."""
    return Path(derive.DATA_PATH).read_text(encoding="utf-8")


# --------------------------------------------------------------------------
# A tiny evaluator for the text format.
# --------------------------------------------------------------------------


def parse_equations(text: str) -> dict[str, list[tuple[Fraction, list[tuple[str, list[str], list[str]]]]]]:
    logical = logical_lines(text)
    equations = {}
    for eq in logical:
        lhs, body = (x.strip() for x in eq.split("=", 1))
        terms = []
        sign, coeff, factors = 1, Fraction(1), []
        for tok in TOKEN.findall(body) + ["+"]:
            if tok in "+-":
                if factors:
                    terms.append((sign * coeff, factors))
                sign, coeff, factors = (1 if tok == "+" else -1), Fraction(1), []
            elif tok == "*":
                continue
            elif tok[0].isdigit():
                coeff = Fraction(tok)
            else:
                m = TENSOR.fullmatch(tok)
                assert m, tok
                bra = [x for x in m.group(2).split(",") if x]
                ket = [x for x in m.group(3).split(",") if x]
                factors.append((m.group(1), bra, ket))
        equations[lhs] = terms
    return equations


def evaluate(text: str, f, g, t1, t2) -> dict[str, np.ndarray]:
    """Evaluate every equation; t1 is (v,o), t2 is (v,v,o,o)."""
    sl = {"i": O, "a": V}
    out = {}
    for lhs, terms in parse_equations(text).items():
        m = TENSOR.fullmatch(lhs)
        ext = ([x for x in m.group(2).split(",") if x] + [x for x in m.group(3).split(",") if x]) if m else []
        letters: dict[str, str] = {}

        def letter(idx: str) -> str:
            return letters.setdefault(idx, chr(ord("A") + len(letters)))

        out_sub = "".join(letter(x) for x in ext)
        total = 0.0
        for coeff, factors in terms:
            subs, ops = [], []
            for name, bra, ket in factors:
                idx = bra + ket
                if name == "f":
                    arr = f[tuple(sl[x[0]] for x in idx)]
                elif name == "g":
                    arr = g[tuple(sl[x[0]] for x in idx)]
                elif name == "t1":
                    arr = t1
                elif name == "t2":
                    arr = t2
                else:
                    raise AssertionError(name)
                if name in ("t1", "t2"):
                    assert [x[0] for x in idx] == ["a"] * len(bra) + ["i"] * len(ket)
                subs.append("".join(letter(x) for x in idx))
                ops.append(arr)
            total = total + float(coeff) * np.einsum(",".join(subs) + "->" + out_sub, *ops)
        out[lhs.split("{")[0]] = np.asarray(total)
    return out


# --------------------------------------------------------------------------
# Random inputs.
# --------------------------------------------------------------------------
def random_inputs(seed: int, hermitian: bool):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(N, N))
    g = rng.normal(size=(N, N, N, N))
    g = g - g.transpose(1, 0, 2, 3)
    g = g - g.transpose(0, 1, 3, 2)
    if hermitian:
        f = f + f.T
        g = g + g.transpose(2, 3, 0, 1)
    t1 = 0.1 * rng.normal(size=(NV, NO))
    t2 = 0.1 * rng.normal(size=(NV, NV, NO, NO))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    return f, g, t1, t2


# --------------------------------------------------------------------------
# Reference 1: Stanton-Gauss spin-orbital CCSD (residual form).
# --------------------------------------------------------------------------
def stanton_gauss(f, g, t1, t2):
    """Returns E, R1[i,a], R2[i,j,a,b] for real symmetric f, g."""
    ts = t1.T                        # t_i^a   -> ts[i,a]
    td = t2.transpose(2, 3, 0, 1)    # t_ij^ab -> td[i,j,a,b]
    fov, foo, fvv = f[O, V], f[O, O], f[V, V]
    e = np.einsum
    tau = td + e("ia,jb->ijab", ts, ts) - e("ib,ja->ijab", ts, ts)
    taut = td + 0.5 * (e("ia,jb->ijab", ts, ts) - e("ib,ja->ijab", ts, ts))

    def p_ij(x):
        return x - x.transpose(1, 0, 2, 3)

    def p_ab(x):
        return x - x.transpose(0, 1, 3, 2)

    fae = (fvv - 0.5 * e("me,ma->ae", fov, ts) + e("mf,mafe->ae", ts, g[O, V, V, V])
           - 0.5 * e("mnaf,mnef->ae", taut, g[O, O, V, V]))
    fmi = (foo + 0.5 * e("ie,me->mi", ts, fov) + e("ne,mnie->mi", ts, g[O, O, O, V])
           + 0.5 * e("inef,mnef->mi", taut, g[O, O, V, V]))
    fme = fov + e("nf,mnef->me", ts, g[O, O, V, V])
    x = e("je,mnie->mnij", ts, g[O, O, O, V])
    wmnij = g[O, O, O, O] + x - x.transpose(0, 1, 3, 2) + 0.25 * e("ijef,mnef->mnij", tau, g[O, O, V, V])
    x = e("mb,amef->abef", ts, g[V, O, V, V])
    wabef = g[V, V, V, V] - (x - x.transpose(1, 0, 2, 3)) + 0.25 * e("mnab,mnef->abef", tau, g[O, O, V, V])
    wmbej = (g[O, V, V, O] + e("jf,mbef->mbej", ts, g[O, V, V, V]) - e("nb,mnej->mbej", ts, g[O, O, V, O])
             - e("jnfb,mnef->mbej", 0.5 * td + e("jf,nb->jnfb", ts, ts), g[O, O, V, V]))

    r1 = (fov + e("ie,ae->ia", ts, fae) - e("ma,mi->ia", ts, fmi) + e("imae,me->ia", td, fme)
          - e("nf,naif->ia", ts, g[O, V, O, V]) - 0.5 * e("imef,maef->ia", td, g[O, V, V, V])
          - 0.5 * e("mnae,nmei->ia", td, g[O, O, V, O]))
    r2 = (g[O, O, V, V]
          + p_ab(e("ijae,be->ijab", td, fae - 0.5 * e("mb,me->be", ts, fme)))
          - p_ij(e("imab,mj->ijab", td, fmi + 0.5 * e("je,me->mj", ts, fme)))
          + 0.5 * e("mnab,mnij->ijab", tau, wmnij)
          + 0.5 * e("ijef,abef->ijab", tau, wabef)
          + p_ij(p_ab(e("imae,mbej->ijab", td, wmbej) - e("ie,ma,mbej->ijab", ts, ts, g[O, V, V, O])))
          + p_ij(e("ie,abej->ijab", ts, g[V, V, V, O]))
          - p_ab(e("ma,mbij->ijab", ts, g[O, V, O, O])))
    energy = (e("ia,ia->", fov, ts) + 0.25 * e("ijab,ijab->", g[O, O, V, V], td)
              + 0.5 * e("ijab,ia,jb->", g[O, O, V, V], ts, ts))
    return energy, r1, r2


# --------------------------------------------------------------------------
# Reference 2: brute force in Fock space (Jordan-Wigner, 2^N states).
# --------------------------------------------------------------------------
class FockSpace:
    def __init__(self, n: int):
        self.n, self.dim = n, 1 << n
        states = np.arange(self.dim)
        self.ann, self.cre = [], []
        for p in range(n):
            bit = 1 << p
            below = np.array([bin(s & (bit - 1)).count("1") for s in states])
            sign = np.where(below % 2 == 0, 1.0, -1.0)
            occ = (states & bit) != 0
            self.ann.append((states[occ], states[occ] ^ bit, sign[occ]))
            self.cre.append((states[~occ], states[~occ] | bit, sign[~occ]))

    @staticmethod
    def _apply(op, v):
        src, dst, sign = op
        out = np.zeros_like(v)
        out[..., dst] = sign * v[..., src]
        return out

    def a(self, p, v):
        return self._apply(self.ann[p], v)

    def ad(self, p, v):
        return self._apply(self.cre[p], v)

    def one_body(self, h, v):
        """sum_pq h_pq p+ q |v>"""
        qv = np.stack([self.a(q, v) for q in range(self.n)])
        w = np.einsum("pq,qd->pd", h, qv)
        return sum(self.ad(p, w[p]) for p in range(self.n))

    def two_body(self, gg, v):
        """sum_pqrs gg_pqrs p+ q+ s r |v>"""
        rv = np.stack([self.a(r, v) for r in range(self.n)])
        srv = np.stack([self.a(s, rv) for s in range(self.n)])       # [s, r, d]
        w = np.einsum("pqrs,srd->pqd", gg, srv)
        qw = np.stack([sum(self.ad(q, w[p, q]) for q in range(self.n)) for p in range(self.n)])
        return sum(self.ad(p, qw[p]) for p in range(self.n))


def brute_force(f, g, t1, t2):
    """E, R1[a,i], R2[a,b,i,j] from <Phi|exp(-T) H exp(T)|0> for any f, g."""
    fs = FockSpace(N)
    ref = np.zeros(fs.dim)
    ref[(1 << NO) - 1] = 1.0
    h = f - np.einsum("pkqk->pq", g[:, O, :, O])       # H = E_ref + H_N
    tx1 = np.zeros((N, N))
    tx1[V, O] = t1
    tx2 = np.zeros((N, N, N, N))
    tx2[V, V, O, O] = t2

    def ham(v):
        return fs.one_body(h, v) + 0.25 * fs.two_body(g, v)

    def cluster(v):
        return fs.one_body(tx1, v) + 0.25 * fs.two_body(tx2, v)

    def exp_apply(sign, v):
        total, term = v.copy(), v.copy()
        for k in range(1, 2 * NO + 2):
            term = sign * cluster(term) / k
            total += term
        assert not np.any(term)                          # series terminated
        return total

    chi = exp_apply(-1.0, ham(exp_apply(1.0, ref)))
    energy = chi @ ref - ham(ref) @ ref
    r1 = np.zeros((NV, NO))
    r2 = np.zeros((NV, NV, NO, NO))
    for i in range(NO):
        for a in range(NV):
            r1[a, i] = fs.ad(NO + a, fs.a(i, ref)) @ chi
            for j in range(NO):
                for b in range(NV):
                    phi = fs.ad(NO + a, fs.ad(NO + b, fs.a(j, fs.a(i, ref))))
                    r2[a, b, i, j] = phi @ chi
    return energy, r1, r2


# --------------------------------------------------------------------------
# Tests.
# --------------------------------------------------------------------------
@pytest.mark.slow
def test_stored_file_matches_regeneration(derived_text):
    assert derive.DATA_PATH.read_text(encoding="utf-8") == derived_text


def test_regenerate_writes_file(stored_text, tmp_path, monkeypatch):
    derived_text = stored_text
    monkeypatch.setattr(derive, "derive_ccsd_text", lambda: derived_text)
    target = tmp_path / "sub" / "ccsd.txt"
    assert derive.regenerate(target) == derived_text
    assert target.read_bytes() == derived_text.encode("utf-8")
    assert derive.main([str(tmp_path / "x.txt")]) == 0
    assert (tmp_path / "x.txt").read_text(encoding="utf-8") == derived_text


def test_structure(stored_text):
    eqs = parse_equations(stored_text)
    assert list(eqs) == ["E", "R1{a_1;i_1}", "R2{a_1,a_2;i_1,i_2}"]
    assert [len(t) for t in eqs.values()] == [3, 14, 63]
    names = {name for terms in eqs.values() for _, fs in terms for name, _, _ in fs}
    assert names == {"f", "g", "t1", "t2"}
    # Leading terms and their signs/normalization.
    assert eqs["R1{a_1;i_1}"][0] == (Fraction(1), [("f", ["a_1"], ["i_1"])])
    assert eqs["R2{a_1,a_2;i_1,i_2}"][0] == (Fraction(1), [("g", ["a_1", "a_2"], ["i_1", "i_2"])])
    externals = {"E": set(), "R1{a_1;i_1}": {"a_1", "i_1"},
                 "R2{a_1,a_2;i_1,i_2}": {"a_1", "a_2", "i_1", "i_2"}}
    for lhs, terms in eqs.items():
        keys = set()
        for coeff, factors in terms:
            assert coeff != 0
            assert sum(name in ("f", "g") for name, _, _ in factors) == 1
            counts: dict[str, int] = {}
            for _, bra, ket in factors:
                for x in bra + ket:
                    assert re.fullmatch(r"[ia]_\d+", x)
                    counts[x] = counts.get(x, 0) + 1
            dummies = {x for x in counts if x not in externals[lhs]}
            assert {x for x in counts if x in externals[lhs]} == externals[lhs]
            assert all(counts[x] == 1 for x in externals[lhs])
            assert all(counts[x] == 2 for x in dummies)
            for sp in "ia":
                nums = sorted(int(x[2:]) for x in dummies if x[0] == sp)
                assert nums == list(range(3, 3 + len(nums)))
            key = tuple((n, tuple(b), tuple(k)) for n, b, k in factors)
            assert key not in keys                       # like terms merged
            keys.add(key)


def test_text_format(stored_text):
    derived_text = stored_text
    lines = derived_text.splitlines()
    assert lines[0].startswith("#")
    assert any("sequant-eval regen-equations" in ln for ln in lines if ln.startswith("#"))
    assert not any(ln.rstrip() != ln for ln in lines)
    assert "P(" not in derived_text and "A(" not in derived_text
    for ln in lines:
        if ln.strip()[:1] in "+-" and ln.strip():
            assert ln.count("+") + ln.count("-") == 1   # one term per line


@pytest.mark.parametrize("seed", [0, 1])
def test_against_stanton_gauss(stored_text, seed):
    f, g, t1, t2 = random_inputs(seed, hermitian=True)
    got = evaluate(stored_text, f, g, t1, t2)
    energy, r1, r2 = stanton_gauss(f, g, t1, t2)
    np.testing.assert_allclose(got["E"], energy, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["R1"], r1.T, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["R2"], r2.transpose(2, 3, 0, 1), rtol=0, atol=1e-12)
    assert np.abs(r2).max() > 1.0                     # not a vacuous comparison


@pytest.mark.parametrize("hermitian", [True, False])
def test_against_brute_force_fock_space(stored_text, hermitian):
    f, g, t1, t2 = random_inputs(7, hermitian=hermitian)
    got = evaluate(stored_text, f, g, t1, t2)
    energy, r1, r2 = brute_force(f, g, t1, t2)
    np.testing.assert_allclose(got["E"], energy, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["R1"], r1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["R2"], r2, rtol=0, atol=1e-12)


def test_stored_file_evaluates_like_brute_force():
    text = Path(derive.DATA_PATH).read_text(encoding="utf-8")
    f, g, t1, t2 = random_inputs(3, hermitian=False)
    got = evaluate(text, f, g, t1, t2)
    energy, r1, r2 = brute_force(f, g, t1, t2)
    np.testing.assert_allclose(got["R2"], r2, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["R1"], r1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["E"], energy, rtol=0, atol=1e-12)
