"""A coupled-cluster amplitude solver (Jacobi + Pulay DIIS) that knows nothing of the residual.

The residual is a black box ``residual(t) -> (e_corr, R)``: the same solver drives the
evaluator's fused-forest residual, a textbook einsum reference, or any other
implementation, so their converged energies can be compared like for like.

Each iteration evaluates the residual at ``t``, takes the quasi-Newton (Jacobi) step
``t += R / D`` with orbital-energy denominators ``D``, and, from ``diis_start`` on,
replaces the new amplitudes by the Pulay DIIS extrapolation over the last ``diis_space``
steps, using the step ``R / D`` as the error vector (``diis.py``; re-exported here).

Amplitude layout: ``t1[a, i]`` and ``t2[a, b, i, j]`` (bra/virtual first, ket/occupied
second), with denominators ``D1[a, i] = f_ii - f_aa`` and
``D2[a, b, i, j] = f_ii + f_jj - f_aa - f_bb``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from sequant_eval.errors import MissingTensor, ShapeMismatch

from .diis import DIIS, HDF5DIIS, pulay_coefficients, slabs  # noqa: F401  (re-exported)

__all__ = [
    "IterationRecord",
    "CCResult",
    "solve_cc",
    "denominators",
    "orbital_denominators",
    "mp2_guess",
    "DIIS",
    "HDF5DIIS",
    "OrbitalDenominators",
    "pulay_coefficients",
    "slabs",
]

Amplitudes = dict[str, np.ndarray]
Residual = Callable[[Amplitudes], "tuple[float, Mapping[str, np.ndarray]]"]


@dataclass(frozen=True)
class IterationRecord:
    """One solver iteration: energy at the amplitudes it was given, and how far from done."""

    iteration: int
    e_corr: float
    delta_e: float  #: change from the previous iteration's energy (``inf`` on the first)
    residual_norm: float  #: Frobenius norm of all residual blocks together
    diis_size: int  #: number of vectors used in this iteration's extrapolation (0: none)

    def __str__(self) -> str:
        return (
            f"iter {self.iteration:3d}  E_corr = {self.e_corr: .12f}  "
            f"dE = {self.delta_e: .3e}  |R| = {self.residual_norm:.3e}  DIIS {self.diis_size}"
        )


@dataclass(frozen=True)
class CCResult:
    """Outcome of :func:`solve_cc`.

    ``e_corr`` and ``t`` belong together: ``e_corr`` is the energy the residual function
    returned for ``t``, whose residual norm is ``history[-1].residual_norm``.
    """

    e_corr: float
    t: Amplitudes = field(repr=False)
    iterations: int
    converged: bool
    history: tuple[IterationRecord, ...] = field(repr=False)

    def __str__(self) -> str:
        status = "converged" if self.converged else "NOT converged"
        rnorm = self.history[-1].residual_norm if self.history else float("nan")
        de = self.history[-1].delta_e if self.history else float("nan")
        shapes = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self.t.items())
        return (
            f"CC {status} after {self.iterations} iterations: "
            f"E_corr = {self.e_corr:.12f} Eh (dE = {de:.2e}, |R| = {rnorm:.2e}; {shapes})"
        )


def _on_disk(x: Any) -> bool:
    """An amplitude block kept in a store (an h5py dataset), updated slab by slab."""
    return not isinstance(x, np.ndarray) and hasattr(x, "shape") and hasattr(x, "__setitem__")


def _add_into(block: Any, step: np.ndarray, elements: int) -> None:
    """``block += step``, slab by slab when the block lives on disk."""
    if not _on_disk(block):
        block += step
        return
    for lo, hi in slabs(tuple(block.shape), elements):
        part = np.asarray(block[lo:hi])
        part += step[lo:hi]
        block[lo:hi] = part


def _shape(denoms: Any, key: str) -> tuple[int, ...]:
    if isinstance(denoms, OrbitalDenominators):
        return denoms.shapes.get(key, ())
    return np.shape(denoms[key])


def _check_inputs(t_init: Mapping[str, np.ndarray], denoms: Any) -> None:
    keys = set(denoms.shapes) if isinstance(denoms, OrbitalDenominators) else set(denoms)
    if set(t_init) != keys:
        missing = sorted(set(t_init) ^ keys)
        raise MissingTensor(
            f"amplitudes {sorted(t_init)} and denominators {sorted(keys)} disagree on {missing}"
        )
    for key, t in t_init.items():
        if np.shape(t) != _shape(denoms, key):
            raise ShapeMismatch(
                f"amplitude {key!r} has shape {np.shape(t)} but its denominator has "
                f"shape {_shape(denoms, key)}"
            )


def _check_residual(r: Mapping[str, np.ndarray], t: Mapping[str, np.ndarray]) -> None:
    for key, tk in t.items():
        if key not in r:
            raise MissingTensor(f"the residual function returned no block {key!r} (got {sorted(r)})")
        if np.shape(r[key]) != tk.shape:
            raise ShapeMismatch(
                f"residual {key!r} has shape {np.shape(r[key])}, amplitude has {tk.shape}"
            )


def _own(x: Any) -> np.ndarray:
    """``x`` itself when it is a writable float64 C-contiguous array, else a copy."""
    if (isinstance(x, np.ndarray) and x.dtype == np.float64 and x.flags.writeable
            and x.flags.c_contiguous):
        return x
    return np.array(x, dtype=np.float64, order="C")


def solve_cc(
    residual: Residual,
    t_init: Mapping[str, np.ndarray],
    denominators: "Mapping[str, np.ndarray] | OrbitalDenominators",
    *,
    conv_energy: float = 1e-10,
    conv_residual: float = 1e-8,
    max_iter: int = 100,
    diis_space: int = 8,
    diis_start: int = 2,
    callback: Callable[[IterationRecord, Amplitudes], Any] | None = None,
    diis: "DIIS | HDF5DIIS | None" = None,
    in_place: bool = False,
    slab_elements: int = 1 << 17,
) -> CCResult:
    """Solve ``R(t) = 0`` by Jacobi steps ``t += R / D`` accelerated by DIIS.

    Parameters
    ----------
    residual
        ``residual(t) -> (e_corr, R)``: correlation energy at ``t`` and residual blocks
        keyed like ``t`` (e.g. ``{"t1": R1, "t2": R2}``).  ``t`` must not be modified.
    t_init
        Starting amplitudes (copied), e.g. :func:`mp2_guess`.
    denominators
        Same keys and shapes as ``t_init``; e.g. :func:`denominators`, or an
        :class:`OrbitalDenominators` (applied slab by slab, never formed whole).
    conv_energy, conv_residual
        Converged when ``|E_k - E_{k-1}| < conv_energy`` and ``|R(t_k)| < conv_residual``
        (Frobenius norm over all blocks).  Needs at least two residual evaluations.
    max_iter
        Maximum number of residual evaluations.
    diis_space
        DIIS subspace size; ``< 2`` switches DIIS off.
    diis_start
        First iteration (1-based) whose step is extrapolated.
    callback
        Called as ``callback(record, t)`` after each residual evaluation.
    diis
        The DIIS store (default: an in-memory :class:`DIIS` of ``diis_space`` vectors);
        an :class:`HDF5DIIS` keeps its vectors on disk.
    in_place
        Lean memory: ``t_init``'s arrays are iterated in place (not copied; they hold the
        last amplitudes evaluated afterwards), the residual arrays returned become the
        steps, and the arrays handed to ``residual`` and ``callback`` change between
        iterations. The solver then holds one set of amplitudes besides the residual.
        An amplitude block may then also be an on-disk dataset (h5py: ``shape`` and
        slicing, read and written), updated ``slab_elements`` at a time.

    Returns
    -------
    CCResult
        With ``converged=False`` if ``max_iter`` was reached or the iteration produced a
        non-finite energy or residual (it does not raise); the result then holds the last
        amplitudes evaluated.
    """
    _check_inputs(t_init, denominators)
    keys = list(t_init)
    t: Amplitudes = {k: t_init[k] if in_place and _on_disk(t_init[k]) else
                     _own(t_init[k]) if in_place else
                     np.array(t_init[k], dtype=np.float64, copy=True) for k in keys}
    if isinstance(denominators, OrbitalDenominators):
        divide = denominators.divide
    else:
        denoms = {k: np.asarray(denominators[k], dtype=np.float64) for k in keys}

        def divide(key: str, x: np.ndarray) -> None:
            x /= denoms[key]

    if diis is None and diis_space >= 2:
        diis = DIIS(diis_space)
    history: list[IterationRecord] = []
    e_prev: float | None = None
    e_corr = float("nan")
    converged = False
    for iteration in range(1, max_iter + 1):
        e_value, r = residual(t)
        e_corr = float(e_value)
        _check_residual(r, t)
        rnorm = math.sqrt(sum(float(np.vdot(r[k], r[k]).real) for k in keys))
        delta_e = math.inf if e_prev is None else e_corr - e_prev
        size = 0 if diis is None else min(len(diis) + 1, diis.space)
        used = size if iteration >= diis_start and size >= 2 else 0
        record = IterationRecord(iteration, e_corr, delta_e, rnorm, used)
        history.append(record)
        if callback is not None:
            callback(record, t)
        if not (math.isfinite(e_corr) and math.isfinite(rnorm)):
            break
        if abs(delta_e) < conv_energy and rnorm < conv_residual:
            converged = True
            break
        e_prev = e_corr
        if iteration == max_iter:
            break
        # the step R / D, the Jacobi update t + step, then DIIS over the updates
        step = {k: _own(r[k]) if in_place else np.array(r[k], dtype=np.float64) for k in keys}
        del r
        for k in keys:
            divide(k, step[k])
        new = t if in_place else {k: t[k].copy() for k in keys}
        for k in keys:
            _add_into(new[k], step[k], slab_elements)
        if diis is not None:
            diis.push_blocks(new, step)
        del step                    # not held while the next residual runs
        if diis is not None and used:
            diis.extrapolate_into(new)
        t = new
    return CCResult(e_corr, t, len(history), converged, tuple(history))


class OrbitalDenominators:
    """``D1[a, i] = e_i - e_a`` and ``D2[a, b, i, j] = e_i + e_j - e_a - e_b`` from the
    orbital energies, applied in place slab by slab (``divide``): ``D2`` is never formed
    whole. ``shapes`` maps ``"t1"``, ``"t2"`` to the amplitude shapes; ``[key]`` forms the
    whole array (for callers that want one)."""

    def __init__(self, e_occ: np.ndarray, e_vir: np.ndarray) -> None:
        self.d1 = np.ascontiguousarray(np.asarray(e_occ)[None, :] - np.asarray(e_vir)[:, None])
        nv, no = self.d1.shape
        self.shapes = {"t1": (nv, no), "t2": (nv, nv, no, no)}

    def __getitem__(self, key: str) -> np.ndarray:
        d1 = self.d1
        if key == "t1":
            return d1.copy()
        return np.ascontiguousarray(d1[:, None, :, None] + d1[None, :, None, :])

    def divide(self, key: str, x: np.ndarray, start: int = 0) -> None:
        """``x /= D`` in place (the same quotients as dividing by the whole array); for
        ``t2``, ``x`` may be the rows ``start:start + len(x)`` of the whole."""
        d1 = self.d1
        if key == "t1":
            x /= d1
            return
        for a in range(x.shape[0]):
            x[a] /= d1[start + a][None, :, None] + d1[:, None, :]


def _diagonal(ints: Any, space: str) -> np.ndarray:
    return np.ascontiguousarray(np.diagonal(ints.fock((space, space))))


def denominators(ints: Any, triples: bool = False) -> Amplitudes:
    """Orbital-energy denominators from the Fock diagonal of ``ints``.

    ``ints`` is anything with a ``fock(spaces)`` block provider (e.g.
    :class:`~sequant_eval.chem.integrals.SpinOrbitalIntegrals`).  Returns
    ``{"t1": D1, "t2": D2}`` with ``D1[a, i] = f_ii - f_aa`` and
    ``D2[a, b, i, j] = f_ii + f_jj - f_aa - f_bb``; with ``triples`` also
    ``D3[a, b, c, i, j, k] = f_ii + f_jj + f_kk - f_aa - f_bb - f_cc`` as ``"t3"`` (CCSDT).
    """
    eo = _diagonal(ints, "i")
    ev = _diagonal(ints, "a")
    d1 = eo[None, :] - ev[:, None]
    d2 = d1[:, None, :, None] + d1[None, :, None, :]
    out = {"t1": np.ascontiguousarray(d1), "t2": np.ascontiguousarray(d2)}
    if triples:
        out["t3"] = np.ascontiguousarray(
            d2[:, :, None, :, :, None] + d1[None, None, :, None, None, :])
    return out


def orbital_denominators(ints: Any) -> OrbitalDenominators:
    """:func:`denominators`, applied slab by slab instead of formed whole."""
    return OrbitalDenominators(_diagonal(ints, "i"), _diagonal(ints, "a"))


def mp2_guess(ints: Any, triples: bool = False) -> Amplitudes:
    """First-order amplitudes: ``t1 = 0`` (``(nvir, nocc)``) and ``t2 = <ab||ij> / D2``;
    with ``triples`` also ``t3 = 0`` (``(nvir,)*3 + (nocc,)*3``: triples start at second
    order).

    ``ints`` needs ``fock(spaces)`` and ``eri(spaces)`` providers.  With these amplitudes
    the CCSD energy expression gives the MP2 correlation energy (canonical orbitals).
    Memory: the ``t2`` array and one slab of ``D2``.
    """
    d = orbital_denominators(ints)
    t2 = _own(ints.eri(("a", "a", "i", "i")))      # a fresh read is used as is
    d.divide("t2", t2)
    out = {"t1": np.zeros(d.shapes["t1"]), "t2": t2}
    if triples:
        nv, no = d.shapes["t1"]
        out["t3"] = np.zeros((nv,) * 3 + (no,) * 3)
    return out
