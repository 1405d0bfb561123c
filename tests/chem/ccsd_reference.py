"""Test-only textbook spin-orbital CCSD residual (Stanton & Gauss intermediates), in einsum.

An implementation independent of both the package's evaluator and PySCF, used to check
the solver and the integrals against PySCF's GCCSD, and later the evaluator's residuals
against it.  Equations: J. F. Stanton, J. Gauss, J. D. Watts, R. J. Bartlett, J. Chem.
Phys. 94, 4334 (1991), written out for the *full* projections

    E  = <0| e^{-T} H e^{T} |0> - E_HF
    R1 = <Phi_i^a| e^{-T} H e^{T} |0>,   R2 = <Phi_ij^ab| e^{-T} H e^{T} |0>

i.e. the Fock diagonal is kept inside the F intermediates rather than moved into the
denominators, so the residual is valid for non-canonical (but real) orbitals, and at
canonical orbitals ``R1 = -D1 * t1 + ...``.

Layouts (the package's): ``t1[a, i]``, ``t2[a, b, i, j]``, ``R1[a, i]``, ``R2[a, b, i, j]``.
Internally the textbook layout ``t1[i, a]``, ``t2[i, j, a, b]`` is used.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["reference_residual"]


def _getter(blocks: Any) -> Callable[[str], np.ndarray]:
    """Block access by a space string like ``"iaai"``, from a provider or a mapping."""
    if callable(blocks):
        return lambda spaces: np.asarray(blocks(tuple(spaces)))
    return lambda spaces: np.asarray(blocks[tuple(spaces)])


def _einsum(subscripts: str, *ops: np.ndarray) -> np.ndarray:
    return np.einsum(subscripts, *ops, optimize=True)


def _p_ij(x: np.ndarray) -> np.ndarray:
    """P(ij) X_ijab = X_ijab - X_jiab."""
    return x - x.transpose(1, 0, 2, 3)


def _p_ab(x: np.ndarray) -> np.ndarray:
    """P(ab) X_ijab = X_ijab - X_ijba."""
    return x - x.transpose(0, 1, 3, 2)


def reference_residual(
    f_blocks: Any, g_blocks: Any, t1: np.ndarray, t2: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """CCSD correlation energy and residuals at ``(t1, t2)``.

    Parameters
    ----------
    f_blocks, g_blocks
        Fock and antisymmetrized ``<pq||rs>`` blocks: either providers called with a tuple
        of spaces (``("i", "a")``) or mappings keyed by such tuples.
    t1, t2
        Amplitudes ``t1[a, i]``, ``t2[a, b, i, j]``.

    Returns
    -------
    (E, R1, R2)
        ``R1[a, i]`` and ``R2[a, b, i, j]`` are the full projections (zero at the solution).
    """
    f = _getter(f_blocks)
    g = _getter(g_blocks)
    s = np.ascontiguousarray(t1.T)  # s[i, a]
    d = np.ascontiguousarray(t2.transpose(2, 3, 0, 1))  # d[i, j, a, b]

    foo, fov, fvo, fvv = f("ii"), f("ia"), f("ai"), f("aa")
    oovv = g("iiaa")
    ss = _einsum("ia,jb->ijab", s, s)
    tau_tilde = d + 0.5 * (ss - ss.transpose(0, 1, 3, 2))
    tau = d + ss - ss.transpose(0, 1, 3, 2)

    # One-body intermediates (Fock diagonal included).
    f_ae = (
        fvv
        - 0.5 * _einsum("me,ma->ae", fov, s)
        + _einsum("mf,mafe->ae", s, g("iaaa"))
        - 0.5 * _einsum("mnaf,mnef->ae", tau_tilde, oovv)
    )
    f_mi = (
        foo
        + 0.5 * _einsum("ie,me->mi", s, fov)
        + _einsum("ne,mnie->mi", s, g("iiia"))
        + 0.5 * _einsum("inef,mnef->mi", tau_tilde, oovv)
    )
    f_me = fov + _einsum("nf,mnef->me", s, oovv)

    # Two-body intermediates.
    w_mnij = g("iiii") + 0.25 * _einsum("ijef,mnef->mnij", tau, oovv)
    x = _einsum("je,mnie->mnij", s, g("iiia"))
    w_mnij = w_mnij + x - x.transpose(0, 1, 3, 2)
    w_abef = g("aaaa") + 0.25 * _einsum("mnab,mnef->abef", tau, oovv)
    x = _einsum("mb,amef->abef", s, g("aiaa"))
    w_abef = w_abef - (x - x.transpose(1, 0, 2, 3))
    w_mbej = (
        g("iaai")
        + _einsum("jf,mbef->mbej", s, g("iaaa"))
        - _einsum("nb,mnej->mbej", s, g("iiai"))
        - _einsum("jnfb,mnef->mbej", 0.5 * d + _einsum("jf,nb->jnfb", s, s), oovv)
    )

    # Singles: <Phi_i^a| Hbar |0>.
    r1 = (
        fvo.T
        + _einsum("ie,ae->ia", s, f_ae)
        - _einsum("ma,mi->ia", s, f_mi)
        + _einsum("imae,me->ia", d, f_me)
        - _einsum("nf,naif->ia", s, g("iaia"))
        - 0.5 * _einsum("imef,maef->ia", d, g("iaaa"))
        - 0.5 * _einsum("mnae,nmei->ia", d, g("iiai"))
    )

    # Doubles: <Phi_ij^ab| Hbar |0>.
    r2 = g("aaii").transpose(2, 3, 0, 1).copy()
    f_be = f_ae - 0.5 * _einsum("mb,me->be", s, f_me)
    r2 += _p_ab(_einsum("ijae,be->ijab", d, f_be))
    f_mj = f_mi + 0.5 * _einsum("je,me->mj", s, f_me)
    r2 -= _p_ij(_einsum("imab,mj->ijab", d, f_mj))
    r2 += 0.5 * _einsum("mnab,mnij->ijab", tau, w_mnij)
    r2 += 0.5 * _einsum("ijef,abef->ijab", tau, w_abef)
    x = _einsum("imae,mbej->ijab", d, w_mbej) - _einsum(
        "ie,ma,mbej->ijab", s, s, g("iaai")
    )
    r2 += _p_ij(_p_ab(x))
    r2 += _p_ij(_einsum("ie,abej->ijab", s, g("aaai")))
    r2 -= _p_ab(_einsum("ma,mbij->ijab", s, g("iaii")))

    energy = (
        float(_einsum("ia,ia->", fov, s))
        + 0.25 * float(_einsum("ijab,ijab->", oovv, d))
        + 0.5 * float(_einsum("ijab,ia,jb->", oovv, s, s))
    )
    return energy, np.ascontiguousarray(r1.T), np.ascontiguousarray(r2.transpose(2, 3, 0, 1))
