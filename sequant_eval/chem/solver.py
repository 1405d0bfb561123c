"""A coupled-cluster amplitude solver (Jacobi + Pulay DIIS) that knows nothing of the residual.

The residual is a black box ``residual(t) -> (e_corr, R)``: the same solver drives the
evaluator's fused-forest residual, a textbook einsum reference, or any other
implementation, so their converged energies can be compared like for like.

Each iteration evaluates the residual at ``t``, takes the quasi-Newton (Jacobi) step
``t += R / D`` with orbital-energy denominators ``D``, and, from ``diis_start`` on,
replaces the new amplitudes by the Pulay DIIS extrapolation over the last ``diis_space``
steps, using the step ``R / D`` as the error vector.

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

__all__ = [
    "IterationRecord",
    "CCResult",
    "solve_cc",
    "denominators",
    "mp2_guess",
    "DIIS",
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


class DIIS:
    """Pulay's direct inversion in the iterative subspace, on flattened vectors.

    ``push(vector, error)`` stores one trial vector and its error vector (dropping the
    oldest beyond ``space``); ``extrapolate()`` returns ``sum_k c_k vector_k`` with the
    coefficients minimising ``|sum_k c_k error_k|`` subject to ``sum_k c_k = 1``.
    """

    def __init__(self, space: int) -> None:
        self.space = int(space)
        self._vectors: list[np.ndarray] = []
        self._errors: list[np.ndarray] = []
        self._overlap = np.zeros((0, 0))

    def __len__(self) -> int:
        return len(self._vectors)

    def push(self, vector: np.ndarray, error: np.ndarray) -> None:
        if len(self._vectors) == self.space:
            self._vectors.pop(0)
            self._errors.pop(0)
            self._overlap = self._overlap[1:, 1:]
        self._vectors.append(vector)
        self._errors.append(error)
        row = np.array([float(np.dot(e, error)) for e in self._errors])
        n = len(self._errors)
        overlap = np.empty((n, n))
        overlap[: n - 1, : n - 1] = self._overlap
        overlap[n - 1, :] = row
        overlap[:, n - 1] = row
        self._overlap = overlap

    def coefficients(self) -> np.ndarray:
        n = len(self._errors)
        b = self._overlap
        scale = float(np.max(np.abs(np.diag(b)))) or 1.0
        lhs = np.zeros((n + 1, n + 1))
        lhs[:n, :n] = b / scale
        lhs[:n, n] = lhs[n, :n] = -1.0
        rhs = np.zeros(n + 1)
        rhs[n] = -1.0
        sol, *_ = np.linalg.lstsq(lhs, rhs, rcond=1e-14)
        c = sol[:n]
        total = float(np.sum(c))
        if not np.all(np.isfinite(c)) or abs(total) < 1e-12:
            c = np.zeros(n)
            c[-1] = 1.0  # degenerate subspace: fall back to the newest vector
        else:
            c = c / total
        return c

    def extrapolate(self) -> np.ndarray:
        c = self.coefficients()
        out = np.zeros_like(self._vectors[-1])
        for ck, vk in zip(c, self._vectors):
            out += ck * vk
        return out


def _check_inputs(t_init: Mapping[str, np.ndarray], denoms: Mapping[str, np.ndarray]) -> None:
    if set(t_init) != set(denoms):
        missing = sorted(set(t_init) ^ set(denoms))
        raise MissingTensor(
            f"amplitudes {sorted(t_init)} and denominators {sorted(denoms)} disagree on {missing}"
        )
    for key, t in t_init.items():
        if np.shape(t) != np.shape(denoms[key]):
            raise ShapeMismatch(
                f"amplitude {key!r} has shape {np.shape(t)} but its denominator has "
                f"shape {np.shape(denoms[key])}"
            )


def _check_residual(r: Mapping[str, np.ndarray], t: Mapping[str, np.ndarray]) -> None:
    for key, tk in t.items():
        if key not in r:
            raise MissingTensor(f"the residual function returned no block {key!r} (got {sorted(r)})")
        if np.shape(r[key]) != tk.shape:
            raise ShapeMismatch(
                f"residual {key!r} has shape {np.shape(r[key])}, amplitude has {tk.shape}"
            )


def solve_cc(
    residual: Residual,
    t_init: Mapping[str, np.ndarray],
    denominators: Mapping[str, np.ndarray],
    *,
    conv_energy: float = 1e-10,
    conv_residual: float = 1e-8,
    max_iter: int = 100,
    diis_space: int = 8,
    diis_start: int = 2,
    callback: Callable[[IterationRecord, Amplitudes], Any] | None = None,
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
        Same keys and shapes as ``t_init``; e.g. :func:`denominators`.
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

    Returns
    -------
    CCResult
        With ``converged=False`` if ``max_iter`` was reached or the iteration produced a
        non-finite energy or residual (it does not raise); the result then holds the last
        amplitudes evaluated.
    """
    _check_inputs(t_init, denominators)
    keys = list(t_init)
    t: Amplitudes = {k: np.array(t_init[k], dtype=np.float64, copy=True) for k in keys}
    denoms = {k: np.asarray(denominators[k], dtype=np.float64) for k in keys}
    shapes = [t[k].shape for k in keys]
    sizes = [t[k].size for k in keys]
    offsets = np.cumsum([0] + sizes)

    def flatten(blocks: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.ravel(blocks[k]) for k in keys]) if keys else np.zeros(0)

    def unflatten(vec: np.ndarray) -> Amplitudes:
        return {
            k: vec[offsets[n] : offsets[n + 1]].reshape(shapes[n]).copy()
            for n, k in enumerate(keys)
        }

    diis = DIIS(diis_space) if diis_space >= 2 else None
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
        step = {k: np.asarray(r[k], dtype=np.float64) / denoms[k] for k in keys}
        new_vec = flatten(t) + flatten(step)
        used = 0
        if diis is not None:
            diis.push(new_vec, flatten(step))
            if iteration >= diis_start and len(diis) >= 2:
                new_vec = diis.extrapolate()
                used = len(diis)
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
        if iteration < max_iter:
            t = unflatten(new_vec)
    return CCResult(e_corr, t, len(history), converged, tuple(history))


def _diagonal(ints: Any, space: str) -> np.ndarray:
    return np.ascontiguousarray(np.diagonal(ints.fock((space, space))))


def denominators(ints: Any) -> Amplitudes:
    """Orbital-energy denominators from the Fock diagonal of ``ints``.

    ``ints`` is anything with a ``fock(spaces)`` block provider (e.g.
    :class:`~sequant_eval.chem.integrals.SpinOrbitalIntegrals`).  Returns
    ``{"t1": D1, "t2": D2}`` with ``D1[a, i] = f_ii - f_aa`` and
    ``D2[a, b, i, j] = f_ii + f_jj - f_aa - f_bb``.
    """
    eo = _diagonal(ints, "i")
    ev = _diagonal(ints, "a")
    d1 = eo[None, :] - ev[:, None]
    d2 = d1[:, None, :, None] + d1[None, :, None, :]
    return {"t1": np.ascontiguousarray(d1), "t2": np.ascontiguousarray(d2)}


def mp2_guess(ints: Any) -> Amplitudes:
    """First-order amplitudes: ``t1 = 0`` (``(nvir, nocc)``) and ``t2 = <ab||ij> / D2``.

    ``ints`` needs ``fock(spaces)`` and ``eri(spaces)`` providers.  With these amplitudes
    the CCSD energy expression gives the MP2 correlation energy (canonical orbitals).
    """
    d = denominators(ints)
    t2 = np.array(ints.eri(("a", "a", "i", "i")), dtype=np.float64) / d["t2"]
    return {"t1": np.zeros_like(d["t1"]), "t2": np.ascontiguousarray(t2)}
