"""A coupled-cluster amplitude solver (Jacobi + Pulay DIIS) that knows nothing of the residual.

The residual is a black box ``residual(t) -> (e_corr, R)``: the same solver drives the
evaluator's fused-forest residual, a textbook einsum reference, or any other
implementation, so their converged energies can be compared like for like.

Each iteration evaluates the residual at ``t``, takes the quasi-Newton (Jacobi) step
``t += R / D`` with orbital-energy denominators ``D``, and, from ``diis_start`` on,
replaces the new amplitudes by the Pulay DIIS extrapolation over the last ``diis_space``
steps, using the step ``R / D`` as the error vector (``diis.py``; re-exported here).

Two convergence tests. Without an ``energy`` function: ``|E_k - E_{k-1}|`` and the
residual norm ``|R(t_k)|``, both at evaluated amplitudes (which takes one more residual
than the step that converged). With ``energy(t)`` (the correlation energy alone, cheap):
PySCF's — after iteration ``k``'s step (and extrapolation) the energy at the new amplitudes
``E(t_{k+1})`` against ``E(t_k)``, and the norm of the step ``|t_{k+1}' - t_k|`` (before
the extrapolation), PySCF's ``norm(t1,t2)``; the first step is then not kept in the DIIS
subspace (PySCF's DIIS takes it as its reference vector), so the iterations are PySCF's.

Amplitude layout: ``t1[a, i]`` and ``t2[a, b, i, j]`` (bra/virtual first, ket/occupied
second), with denominators ``D1[a, i] = f_ii - f_aa`` and
``D2[a, b, i, j] = f_ii + f_jj - f_aa - f_bb``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, Callable, Mapping

import numpy as np

from sequant_eval.errors import InputTypeError, MissingTensor, ShapeMismatch

from .diis import DIIS, HDF5DIIS, pulay_coefficients, slabs  # noqa: F401  (re-exported)

__all__ = [
    "from_pyscf",
    "real_amplitude",
    "IterationRecord",
    "CCResult",
    "SolverOptions",
    "SolverState",
    "solve_cc",
    "denominators",
    "orbital_denominators",
    "mp2_guess",
    "DIIS",
    "HDF5DIIS",
    "OrbitalDenominators",
    "AmplitudeLayout",
    "SPIN_ORBITAL_SPACES",
    "pulay_coefficients",
    "slabs",
    "swap_halves",
]

Amplitudes = dict[str, np.ndarray]
Residual = Callable[[Amplitudes], "tuple[float, Mapping[str, np.ndarray]]"]


@dataclass(frozen=True)
class IterationRecord:
    """One solver iteration: energy at the amplitudes it was given, and how far from done."""

    iteration: int
    e_corr: float
    delta_e: float  #: change from the previous iteration's energy (``inf`` on the first)
    residual_norm: float  #: norm of all residual blocks (PySCF's test: of the step)
    diis_size: int  #: number of vectors used in this iteration's extrapolation (0: none)

    def __str__(self) -> str:
        return (
            f"iter {self.iteration:3d}  E_corr = {self.e_corr: .12f}  "
            f"dE = {self.delta_e: .3e}  |R| = {self.residual_norm:.3e}  DIIS {self.diis_size}"
        )


@dataclass(frozen=True)
class CCResult:
    """Outcome of :func:`solve_cc`.

    ``e_corr`` and ``t`` belong together: ``e_corr`` is the energy at ``t`` (the residual
    function's, or with PySCF's test the energy function's after the last step).
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


@dataclass(frozen=True)
class SolverOptions:
    """The thresholds and settings of :func:`solve_cc` (its keyword arguments).

    Converged when ``|E_k - E_{k-1}| < conv_energy`` and ``|R(t_k)| < conv_residual``
    (Frobenius norm over all blocks), which needs two residual evaluations; at most
    ``max_iter`` of them (counting those of a restarted solve's ``history``). DIIS keeps
    ``diis_space`` vectors (``< 2``: off) and extrapolates from iteration ``diis_start``
    (1-based). ``in_place``: lean memory (see :func:`solve_cc`); on-disk amplitude blocks
    are then updated ``slab_elements`` at a time."""

    conv_energy: float = 1e-10
    conv_residual: float = 1e-8
    max_iter: int = 100
    diis_space: int = 8
    diis_start: int = 2
    in_place: bool = False
    slab_elements: int = 1 << 17


@dataclass
class SolverState:
    """Where a solve stands after an iteration: the amplitudes ``t`` the next residual is
    evaluated at (after the iteration's step; the last ones evaluated once ``done``), the
    records so far, and the DIIS store. A checkpoint is this state, and a solve restarted
    from it (``solve_cc(..., history=state.history, diis=state.diis)`` from ``state.t``)
    takes the same steps as the solve that wrote it."""

    t: Amplitudes
    history: list[IterationRecord]
    diis: "DIIS | HDF5DIIS | None"
    done: bool = False

    @property
    def iteration(self) -> int:
        """Iterations done."""
        return len(self.history)


def solve_cc(residual: Residual, t_init: Mapping[str, np.ndarray],
             denominators: "Mapping[str, np.ndarray] | OrbitalDenominators", *,
             callback: Callable[[IterationRecord, SolverState], Any] | None = None,
             diis: "DIIS | HDF5DIIS | None" = None,
             history: Sequence[IterationRecord] = (),
             energy: Callable[[Amplitudes], float] | None = None,
             **options: Any) -> CCResult:
    """Solve ``R(t) = 0`` by Jacobi steps ``t += R / D`` accelerated by DIIS.

    ``residual(t) -> (e_corr, R)`` gives the correlation energy at ``t`` and residual
    blocks keyed like ``t`` (e.g. ``{"t1": R1, "t2": R2}``); it must not modify ``t``.
    ``t_init`` are the starting amplitudes (copied), e.g. :func:`mp2_guess`;
    ``denominators`` has the same keys and shapes (:func:`denominators`), or is an
    :class:`OrbitalDenominators` (applied slab by slab, never formed whole). ``options``
    are :class:`SolverOptions`' fields. ``callback(record, state)`` runs once per
    iteration, after its step (:class:`SolverState`). ``diis`` is the DIIS store (default:
    an in-memory :class:`DIIS` of ``diis_space`` vectors; an :class:`HDF5DIIS` keeps its
    vectors on disk). ``history``: the records of a solve restarted from its checkpoint
    (``t_init`` its amplitudes, ``diis`` its store): the iterations continue from there.
    ``energy(t) -> e_corr`` switches to PySCF's convergence test (module docstring).

    ``in_place`` (lean memory): ``t_init``'s arrays are iterated in place (not copied;
    they hold the last amplitudes evaluated afterwards), the residual arrays returned
    become the steps, and the arrays handed to ``residual`` and ``callback`` change between
    iterations; an amplitude block may then be an on-disk dataset (h5py). The solver then
    holds one set of amplitudes besides the residual.

    Returns a :class:`CCResult`, ``converged=False`` if ``max_iter`` was reached or the
    iteration produced a non-finite energy or residual (it does not raise); the result then
    holds the last amplitudes evaluated.
    """
    opts = SolverOptions(**options)
    _check_inputs(t_init, denominators)
    t: Amplitudes = {k: _start(v, opts.in_place) for k, v in t_init.items()}
    if diis is None and opts.diis_space >= 2:
        diis = DIIS(opts.diis_space)
    state = SolverState(t, list(history), diis)
    divide = _divider(denominators, list(t))
    while not state.done:
        record, r = _evaluate(residual, state, opts)
        if energy is None:
            state.history.append(record)
            state.done = _finished(record, opts)
            if not state.done:
                state.t = _step(state, r, divide, opts, record)
        else:
            state.done = not _finite(record)
            if state.done:
                state.history.append(record)
            else:
                state.t, record = _pyscf_step(state, r, divide, opts, record, energy)
                state.history.append(record)
                state.done = _finished(record, opts)
        del r                         # not held while the next residual runs
        if callback is not None:
            callback(record, state)
    last = state.history[-1]
    return CCResult(last.e_corr, state.t, len(state.history),
                    _converged(last, opts), tuple(state.history))


def _start(x: Any, in_place: bool) -> Any:
    if in_place:
        return x if _on_disk(x) else _own(x)
    return np.array(x, dtype=np.float64, copy=True)


def _divider(denominators: Any, keys: list[str]) -> Callable[[str, np.ndarray], None]:
    """``divide(key, x)``: ``x /= D[key]`` in place."""
    if isinstance(denominators, OrbitalDenominators):
        return denominators.divide
    denoms = {k: np.asarray(denominators[k], dtype=np.float64) for k in keys}

    def divide(key: str, x: np.ndarray) -> None:
        x /= denoms[key]

    return divide


def _evaluate(residual: Residual, state: SolverState, opts: SolverOptions):
    """One residual evaluation at ``state.t``: its record and the residual blocks."""
    e_value, r = residual(state.t)
    e_corr = float(e_value)
    _check_residual(r, state.t)
    r = dict(r)                       # ours: the step takes its arrays out of it
    rnorm = math.sqrt(sum(float(np.vdot(r[k], r[k]).real) for k in state.t))
    prev = state.history[-1].e_corr if state.history else None
    delta_e = math.inf if prev is None else e_corr - prev
    iteration = len(state.history) + 1
    diis = state.diis
    size = 0 if diis is None else min(len(diis) + 1, diis.space)
    used = size if iteration >= opts.diis_start and size >= 2 else 0
    return IterationRecord(iteration, e_corr, delta_e, rnorm, used), r


def _converged(record: IterationRecord, opts: SolverOptions) -> bool:
    return abs(record.delta_e) < opts.conv_energy and record.residual_norm < opts.conv_residual


def _finite(record: IterationRecord) -> bool:
    return math.isfinite(record.e_corr) and math.isfinite(record.residual_norm)


def _finished(record: IterationRecord, opts: SolverOptions) -> bool:
    if not _finite(record):
        return True
    return _converged(record, opts) or record.iteration >= opts.max_iter


def _pyscf_step(state: SolverState, r: dict[str, np.ndarray], divide, opts: SolverOptions,
                record: IterationRecord, energy):
    """The step, its norm and the energy after it: ``(t_{k+1}, record)`` with
    ``e_corr = E(t_{k+1})``, ``delta_e = E(t_{k+1}) - E(t_k)`` and the step's norm."""
    e_here, norm = record.e_corr, [0.0]
    new = _step(state, r, divide, opts, record, norm, keep=record.iteration > 1)
    e_next = float(energy(new))
    return new, IterationRecord(record.iteration, e_next, e_next - e_here, norm[0],
                                record.diis_size)


def _step(state: SolverState, r: dict[str, np.ndarray], divide, opts: SolverOptions,
          record: IterationRecord, norm: list | None = None, keep: bool = True):
    """The step ``R / D`` (``r``'s arrays taken out of it: not held beside the step), the
    Jacobi update ``t + step``, then DIIS over the updates (``keep``: the step joins the
    subspace). ``norm[0]`` receives the step's norm."""
    keys = list(state.t)
    step = {k: _own(r.pop(k)) if opts.in_place else np.array(r.pop(k), dtype=np.float64)
            for k in keys}
    for k in keys:
        divide(k, step[k])
    if norm is not None:
        norm[0] = math.sqrt(sum(float(np.vdot(step[k], step[k]).real) for k in keys))
    new = state.t if opts.in_place else {k: state.t[k].copy() for k in keys}
    for k in keys:
        _add_into(new[k], step[k], opts.slab_elements)
    if state.diis is not None and keep:
        state.diis.push_blocks(new, step)
    del step
    if state.diis is not None and record.diis_size:
        state.diis.extrapolate_into(new)
    return new


class OrbitalDenominators:
    """``D1[a, i] = e_i - e_a`` and ``D2[a, b, i, j] = e_i + e_j - e_a - e_b`` from the
    orbital energies, applied in place slab by slab (``divide``): ``D2`` is never formed
    whole. ``shapes`` maps ``"t1"``, ``"t2"`` to the amplitude shapes; ``[key]`` forms the
    whole array (for callers that want one). :meth:`of_spaces` makes the same for any
    singles and doubles blocks over named spaces (the unrestricted ``t2ab[a, A, i, I]``:
    ``e_i + e_I - e_a - e_A``)."""

    def __init__(self, e_occ: np.ndarray, e_vir: np.ndarray) -> None:
        self._init({"i": e_occ, "a": e_vir}, SPIN_ORBITAL_SPACES)

    @classmethod
    def of_spaces(cls, energies: Mapping[str, np.ndarray],
                  spaces: Mapping[str, tuple[str, ...]]) -> "OrbitalDenominators":
        """Denominators of the blocks ``spaces`` (name -> spaces, virtual slots first, one
        or two virtual-occupied pairs) from the orbital energies of each space."""
        out = cls.__new__(cls)
        out._init(energies, spaces)
        return out

    def _init(self, energies: Mapping[str, np.ndarray],
              spaces: Mapping[str, tuple[str, ...]]) -> None:
        self._pairs: dict[str, list[np.ndarray]] = {}
        for key, sp in spaces.items():
            n = len(sp) // 2
            if n not in (1, 2):
                raise ShapeMismatch(f"OrbitalDenominators takes singles and doubles; "
                                    f"{key!r} has {n} virtual-occupied pairs")
            self._pairs[key] = [np.ascontiguousarray(np.asarray(energies[o])[None, :]
                                                     - np.asarray(energies[v])[:, None])
                                for v, o in zip(sp[:n], sp[n:])]
        self.shapes = {k: tuple(p.shape[0] for p in ps) + tuple(p.shape[1] for p in ps)
                       for k, ps in self._pairs.items()}
        self.d1 = self._pairs["t1"][0] if "t1" in self._pairs else None

    def __getitem__(self, key: str) -> np.ndarray:
        pairs = self._pairs[key]
        if len(pairs) == 1:
            return pairs[0].copy()
        return np.ascontiguousarray(pairs[0][:, None, :, None] + pairs[1][None, :, None, :])

    def divide(self, key: str, x: np.ndarray, start: int = 0) -> None:
        """``x /= D`` in place (the same quotients as dividing by the whole array); for
        a doubles block, ``x`` may be the rows ``start:start + len(x)`` of the whole."""
        pairs = self._pairs[key]
        if len(pairs) == 1:
            x /= pairs[0]
            return
        first, second = pairs
        for a in range(x.shape[0]):
            x[a] /= first[start + a][None, :, None] + second[:, None, :]


#: The amplitude blocks of the spin-orbital and closed-shell methods (solver layout).
SPIN_ORBITAL_SPACES = {"t1": ("a", "i"), "t2": ("a", "a", "i", "i")}


@dataclass(frozen=True)
class AmplitudeLayout:
    """A method's amplitude blocks when they are not just ``t1``, ``t2`` over ``i``/``a``
    (the unrestricted ``t1a``, ``t1b``, ``t2aa``, ``t2ab``, ``t2bb``): ``spaces`` per block
    (solver layout, virtual slots first) and, per doubles block, the integral block
    ``(tensor, spaces)`` whose quotient by the denominator is its MP2 guess (singles start
    at zero). The integrals serve ``block(tensor, spaces, ranges)`` and
    ``fock_diagonal(space)``."""

    spaces: Mapping[str, tuple[str, ...]]
    guess: Mapping[str, tuple[str, tuple[str, ...]]]

    def shapes(self, extents: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Each block's shape at ``extents``."""
        return {k: tuple(extents[s] for s in sp) for k, sp in self.spaces.items()}

    def doubles(self) -> tuple[str, ...]:
        """The blocks with four slots (kept on disk out of core)."""
        return tuple(k for k, sp in self.spaces.items() if len(sp) == 4)

    def denominators(self, ints: Any) -> OrbitalDenominators:
        """The blocks' denominators from the Fock diagonals of ``ints``."""
        names = {s for sp in self.spaces.values() for s in sp}
        return OrbitalDenominators.of_spaces({s: ints.fock_diagonal(s) for s in names},
                                             self.spaces)

    def mp2_guess(self, ints: Any, d: OrbitalDenominators | None = None) -> Amplitudes:
        """Zero singles and ``block / D`` doubles (in memory)."""
        d = d or self.denominators(ints)
        out = {}
        for key, shape in d.shapes.items():
            if key in self.guess:
                out[key] = _own(ints.block(*self.guess[key]))   # a fresh read is used as is
                d.divide(key, out[key])
            else:
                out[key] = np.zeros(shape)
        return out


def from_pyscf(name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Amplitude ``name`` given in PySCF's layout (occupied slots first), checked — a real
    numeric array whose solver-layout shape is ``shape`` — and returned in the solver's
    layout (:func:`swap_halves`); anything else is refused with a typed error."""
    if x is None or isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
        raise InputTypeError(f"amplitude {name} must be an array, got {type(x).__name__}")
    a = real_amplitude(f"amplitude {name}", x)
    n = len(shape) // 2
    want = tuple(shape[n:]) + tuple(shape[:n])
    if a.shape != want:
        raise ShapeMismatch(f"amplitude {name} must have shape {want} (PySCF's layout, "
                            f"occupied slots first), got {a.shape}")
    return swap_halves(a)


def real_amplitude(what: str, x: Any) -> np.ndarray:
    """``x`` as an array of real numbers (integers or floats), else InputTypeError naming
    ``what``: the references' orbitals are real, and booleans or objects are no amplitudes."""
    a = np.asarray(x)
    if a.dtype.kind not in "iuf":
        why = ("the reference's orbitals are real: give real amplitudes"
               if a.dtype.kind == "c" else "give integer or floating-point numbers")
        raise InputTypeError(f"{what} has elements of type {a.dtype}; real numeric "
                             f"amplitudes are needed ({why})")
    return a


def swap_halves(x: np.ndarray) -> np.ndarray:
    """An amplitude between the solver's layout (virtual slots first, ``t2[a, b, i, j]``)
    and PySCF's (occupied first, ``t2[i, j, a, b]``): the two halves of its axes swapped
    (a view; its own inverse)."""
    n = np.ndim(x) // 2
    return np.asarray(x).transpose(tuple(range(n, 2 * n)) + tuple(range(n)))


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
