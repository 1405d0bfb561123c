"""Checkpoints of a CC solve: one HDF5 file, rewritten atomically after every iteration.

The file holds the solver's state after an iteration's step
(:class:`~sequant_eval.chem.solver.SolverState`): the amplitudes the next residual is
evaluated at (solver layout, ``t1[a, i]``, ``t2[a, b, i, j]``, ...), the DIIS store (its
vectors, errors and overlap matrix) and the iteration records, and a :class:`Fingerprint`
of what the amplitudes belong to: the molecule (elements, geometry, charge, spin), the
basis, the reference's active orbitals, the frozen orbitals and the equations. A solve
restarted from it takes the same steps as the one that wrote it. A checkpoint of another
system is refused (:class:`~sequant_eval.errors.CheckpointMismatch`, naming what differs).
Orbitals that came out of the SCF with other signs (an eigensolver's choice, which may
change from one process to the next) are the same orbitals: the amplitudes and DIIS
vectors are read with those signs applied (:class:`Phases`).

Each write goes to a temporary file in the same folder (``.NAME.PID.tmp``, removed on any
failure; one a killed run left is removed by the next run that writes the checkpoint),
which then replaces the checkpoint (``os.replace``): a run killed at any point leaves the
previous checkpoint or the new one, never half of one. Every dataset carries a checksum
(``checksum`` attribute, BLAKE2b over its float64 values), recomputed when the checkpoint
is opened: a checkpoint changed or damaged after it was written is refused
(:class:`CheckpointCorrupt`), never restarted from.
"""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, CheckpointMismatch, FileMismatch
from .diis import slabs
from .files import discard, storage_error
from .provenance import dataset_checksum
from .solver import IterationRecord, SolverState

__all__ = ["Fingerprint", "Phases", "write_checkpoint", "open_checkpoint", "ORBITAL_TOLERANCE",
           "CheckpointCorrupt", "remove_stale_temporaries", "refuse_foreign"]

#: Orbital coefficients may differ by this much (max abs, after aligning their signs)
#: between the run that wrote a checkpoint and the run restarted from it (an SCF converged
#: again to the same state).
ORBITAL_TOLERANCE = 1e-6

#: 2: every dataset carries a checksum (``checksum`` attribute), verified on opening.
_FORMAT = 2
_RECORD_FIELDS = ("iteration", "e_corr", "delta_e", "residual_norm", "diis_size")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fingerprint:
    """What a checkpoint's amplitudes belong to. ``formula``, ``geometry`` (Bohr, one row
    per atom), ``charge``, ``spin``: the molecule; ``basis`` (its name) and ``basis_digest``
    (the shells of every element); ``reference`` (the SCF class); ``orbitals`` (the active
    orbitals' coefficients along each amplitude axis, ``"i"`` and ``"a"``, compared to
    :data:`ORBITAL_TOLERANCE` up to their signs); ``frozen``; ``method`` and ``equations``
    (a digest of the equation text the residual evaluates)."""

    formula: str
    geometry: tuple[tuple[float, ...], ...]
    charge: int
    spin: int
    basis: str
    basis_digest: str
    reference: str
    frozen: tuple[int, ...]
    method: str
    equations: str
    orbitals: dict[str, np.ndarray]

    @classmethod
    def of(cls, mf: Any, ints: Any, method: str, equations_text: str) -> "Fingerprint":
        """The fingerprint of a solve of ``method`` on ``mf`` with integrals ``ints``."""
        from .molecules import chemical_formula

        mol = mf.mol
        basis = json.dumps(mol._basis, sort_keys=True, default=repr)
        return cls(chemical_formula(mol), tuple(map(tuple, np.round(mol.atom_coords(), 10))),
                   int(mol.charge), int(mol.spin), str(mol.basis), _digest(basis),
                   type(mf).__name__, tuple(int(p) for p in ints.frozen), method,
                   _digest(equations_text),
                   {s: np.asarray(c, dtype=np.float64) for s, c in ints.orbitals().items()})

    def differences(self, other: "Fingerprint") -> list[str]:
        """What differs between this fingerprint (the checkpoint's) and ``other`` (the
        run's), one phrase per part; empty when the checkpoint fits."""
        out = []
        if self.formula != other.formula:
            out.append(f"the molecule (checkpoint {self.formula}, this run {other.formula})")
        elif np.shape(self.geometry) != np.shape(other.geometry) or not np.allclose(
                self.geometry, other.geometry, rtol=0, atol=1e-6):
            out.append("the geometry (the atoms are elsewhere)")
        for name in ("charge", "spin"):
            if getattr(self, name) != getattr(other, name):
                out.append(f"the {name} (checkpoint {getattr(self, name)}, this run "
                           f"{getattr(other, name)})")
        if self.basis_digest != other.basis_digest:
            out.append(f"the basis (checkpoint {self.basis!r}, this run {other.basis!r})")
        if self.frozen != other.frozen:
            out.append(f"the frozen orbitals (checkpoint {list(self.frozen)}, this run "
                       f"{list(other.frozen)})")
        if (self.method, self.equations) != (other.method, other.equations):
            out.append(f"the equations (checkpoint {self.method} {self.equations}, this run "
                       f"{other.method} {other.equations})")
        if not out:
            out += self._orbital_differences(other)
        return out

    def _signs(self, other: "Fingerprint") -> dict[str, np.ndarray]:
        """Per space, the sign that takes each of this fingerprint's orbitals to ``other``'s."""
        return {s: np.where(np.einsum("pk,pk->k", c, other.orbitals[s]) < 0, -1.0, 1.0)
                for s, c in self.orbitals.items()}

    def _orbital_differences(self, other: "Fingerprint") -> list[str]:
        if self.reference != other.reference:
            return [f"the reference (checkpoint {self.reference}, this run {other.reference})"]
        mine = {s: np.shape(c) for s, c in self.orbitals.items()}
        theirs = {s: np.shape(c) for s, c in other.orbitals.items()}
        if mine != theirs:
            return [f"the orbitals (checkpoint {mine} coefficients, this run {theirs})"]
        signs = self._signs(other)
        gap = max(float(np.abs(c * signs[s] - other.orbitals[s]).max(initial=0.0))
                  for s, c in self.orbitals.items())
        if gap > ORBITAL_TOLERANCE:
            return [f"the orbitals (coefficients differ by up to {gap:.1e}, more than "
                    f"{ORBITAL_TOLERANCE:g}, signs aside)"]
        return []

    def phases(self, other: "Fingerprint", layout) -> "Phases | None":
        """The sign flips from this fingerprint's orbitals to ``other``'s for amplitudes of
        ``layout`` (``(name, shape)`` in the solver's order); None when there are none."""
        signs = self._signs(other)
        if all(np.all(v > 0) for v in signs.values()):
            return None
        return Phases(signs, tuple(layout))

    def write(self, group: Any) -> None:
        """Store into an HDF5 group."""
        for name in ("formula", "basis", "basis_digest", "reference", "method", "equations"):
            group.attrs[name] = getattr(self, name)
        group.attrs["charge"], group.attrs["spin"] = self.charge, self.spin
        group.create_dataset("geometry", data=np.asarray(self.geometry, dtype=np.float64))
        group.create_dataset("frozen", data=np.asarray(self.frozen, dtype=np.int64))
        for space, coeff in self.orbitals.items():
            group.create_dataset(f"orbitals/{space}", data=coeff)

    @classmethod
    def read(cls, group: Any) -> "Fingerprint":
        """What :meth:`write` stored."""
        a = group.attrs
        text = {k: str(a[k]) for k in ("formula", "basis", "basis_digest", "reference",
                                        "method", "equations")}
        return cls(text["formula"], tuple(map(tuple, np.asarray(group["geometry"]))),
                   int(a["charge"]), int(a["spin"]), text["basis"], text["basis_digest"],
                   text["reference"], tuple(int(p) for p in np.asarray(group["frozen"])),
                   text["method"], text["equations"],
                   {s: np.asarray(c) for s, c in group["orbitals"].items()})


class Phases:
    """Sign flips of the orbitals between a checkpoint and the run restarted from it,
    applied to what is read: ``signs[space]`` is ±1 per orbital of each space (``"i"``,
    ``"a"``; the unrestricted ``"I"``, ``"A"`` too); ``layout`` the amplitude blocks
    ``(name, shape)`` or ``(name, shape, spaces)`` in the solver's order (virtual axes
    first; without spaces ``a..a i..i``), as the DIIS vectors concatenate them."""

    def __init__(self, signs: dict[str, np.ndarray], layout) -> None:
        self.signs, self.layout = signs, tuple(layout)
        self._spaces = {item[0]: tuple(item[2]) for item in self.layout if len(item) > 2}

    def _axis_signs(self, ndim: int, spaces=None) -> list[np.ndarray]:
        n = ndim // 2
        return [self.signs[s] for s in (spaces or "a" * n + "i" * n)]

    def block(self, x: np.ndarray, start: int = 0, spaces=None) -> np.ndarray:
        """``x`` (rows ``start:`` of one amplitude block, solver layout, over ``spaces``)
        with the signs of its orbitals applied, in place."""
        for axis, s in enumerate(self._axis_signs(x.ndim, spaces)):
            part = s[start:start + x.shape[0]] if axis == 0 else s
            x *= part.reshape((-1,) + (1,) * (x.ndim - axis - 1))
        return x

    def named(self, name: str, x: np.ndarray, start: int = 0) -> np.ndarray:
        """:meth:`block` for the layout's block ``name``."""
        return self.block(x, start, self._spaces.get(name))

    def flat(self, values: np.ndarray, lo: int) -> np.ndarray:
        """``values``, elements ``lo:`` of the blocks concatenated (a DIIS vector), with the
        signs applied, in place."""
        off, hi = 0, lo + values.size
        for name, shape, *spaces in self.layout:
            size = int(np.prod(shape))
            a, b = max(lo, off), min(hi, off + size)
            if a < b:
                index = np.unravel_index(np.arange(a - off, b - off), shape)
                sign = np.ones(b - a)
                for axis, s in enumerate(self._axis_signs(len(shape), self._spaces.get(name))):
                    sign *= s[index[axis]]
                values[a - lo:b - lo] *= sign
            off += size
        return values


def refuse_foreign(path: str | os.PathLike) -> None:
    """Refuse (CheckpointError), before a run writes a checkpoint at ``path``, a file there
    that is not one of this package's checkpoints (PySCF's SCF chkfile, a text file): the
    first checkpoint would replace it. An empty file, or none, is written over."""
    import h5py

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with h5py.File(path, "r") as h5:
            ours = "format" in h5.attrs and "fingerprint" in h5
    except Exception:                  # not HDF5, or not readable as such
        ours = False
    if not ours:
        raise CheckpointError(
            f"chkfile {path} exists and is not a checkpoint of this package (PySCF's SCF "
            f"chkfile, or another file): the run's checkpoint would replace it. Name another "
            f"file (chkfile=..., CLI --chkfile), or remove this one")


def write_checkpoint(path: str | os.PathLike, fingerprint: Fingerprint,
                     state: SolverState) -> None:
    """Write ``state`` (amplitudes, DIIS store, records) and ``fingerprint`` to ``path``,
    atomically: a temporary file beside it, then ``os.replace``. On-disk amplitude blocks
    and DIIS vectors are copied slab by slab."""
    import h5py

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with h5py.File(tmp, "w") as h5:
            h5.attrs["format"], h5.attrs["iteration"] = _FORMAT, state.iteration
            fingerprint.write(h5.create_group("fingerprint"))
            amps = h5.create_group("amplitudes")
            for name, block in state.t.items():
                _copy_block(amps, name, block)
            rows = [[getattr(r, f) for f in _RECORD_FIELDS] for r in state.history]
            h5.create_dataset("history", data=np.asarray(rows, dtype=np.float64).reshape(
                len(rows), len(_RECORD_FIELDS)))
            if state.diis is not None:
                state.diis.export(h5.create_group("diis"))
            _seal(h5)
        os.replace(tmp, path)
    except OSError as err:
        discard(tmp)
        raise storage_error("checkpoint", path, err) from err
    except BaseException:
        discard(tmp)
        raise


def _datasets(h5: Any) -> list[tuple[str, Any]]:
    out: list = []
    h5.visititems(lambda name, obj: out.append((name, obj)) if hasattr(obj, "shape") else None)
    return out


def _seal(h5: Any) -> None:
    """A checksum on every dataset of the file (read back slab by slab)."""
    for _, ds in _datasets(h5):
        ds.attrs["checksum"] = dataset_checksum(ds, 8 << 20)


class CheckpointCorrupt(CheckpointError, FileMismatch):
    """A checkpoint whose blocks do not hold what was written (a checksum differs, one is
    missing): changed after it was written, or damaged. Never restarted from."""


def _verify(h5: Any, path: Path) -> None:
    """Every dataset's checksum recomputed (slab by slab); a mismatch is CheckpointCorrupt."""
    bad = []
    for name, ds in _datasets(h5):
        stored = ds.attrs.get("checksum")
        try:
            if stored is None or dataset_checksum(ds, 8 << 20) != str(stored):
                bad.append(name)
        except OSError:
            bad.append(name)
    if bad:
        raise CheckpointCorrupt(
            f"checkpoint {path} does not verify: the checksum of {', '.join(bad[:4])}"
            f"{' and more' if len(bad) > 4 else ''} differs from the one written (the file "
            "was changed or damaged after it was written); restart from another checkpoint "
            "or start afresh without restart", path, tuple(f"{n} checksum differs" for n in bad))


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove the temporaries ``.NAME.PID.tmp`` beside checkpoint ``path`` that a killed
    run left (its process is gone; :mod:`~sequant_eval.chem.scratch`); best effort."""
    from .scratch import clean

    path = Path(path)
    if not path.parent.is_dir():
        return []
    mine = [r for r in clean(path.parent, scratch_only=True, strict=False, dry_run=True)
            if not r.kept and r.path.name.startswith(f".{path.name}.")
            and r.path.name.endswith(".tmp")]
    for item in mine:
        discard(item.path)
    return [r.path for r in mine]


def _copy_block(group: Any, name: str, block: Any) -> None:
    if isinstance(block, np.ndarray):
        group.create_dataset(name, data=block)
        return
    out = group.create_dataset(name, shape=block.shape, dtype=np.float64)
    for lo, hi in slabs(tuple(block.shape), 1 << 17):
        out[lo:hi] = block[lo:hi]


@dataclass(frozen=True)
class Checkpoint:
    """An open checkpoint: its ``fingerprint``, the iteration ``history``, the
    ``amplitudes`` group (name → dataset, solver layout) and the ``diis`` group (None when
    the solve ran without DIIS)."""

    path: Path
    fingerprint: Fingerprint
    history: tuple[IterationRecord, ...]
    amplitudes: Any
    diis: Any

    def check(self, run: Fingerprint) -> None:
        """Refuse (CheckpointMismatch) a checkpoint of another system than ``run``'s."""
        diff = self.fingerprint.differences(run)
        if diff:
            raise CheckpointMismatch(
                f"checkpoint {self.path} is of another system: it differs in "
                f"{'; '.join(diff)}; restart from a checkpoint of this system, or start "
                "afresh without restart", tuple(diff))


@contextmanager
def open_checkpoint(path: str | os.PathLike):
    """The :class:`Checkpoint` at ``path``, open while the ``with`` block runs; a missing
    or unreadable file is a CheckpointError."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: run with chkfile={str(path)!r} "
                              "(CLI: --chkfile) first, or drop restart")
    try:
        h5 = h5py.File(path, "r")
    except OSError as err:
        raise CheckpointError(f"cannot read the checkpoint {path} ({err})") from err
    with h5:
        try:
            if h5.attrs.get("format") != _FORMAT or "fingerprint" not in h5:
                raise CheckpointError(f"{path} is not a checkpoint of this version (format "
                                      f"{h5.attrs.get('format')!r}, expected {_FORMAT})")
            _verify(h5, path)
            history = tuple(IterationRecord(int(r[0]), float(r[1]), float(r[2]),
                                            float(r[3]), int(r[4]))
                            for r in np.asarray(h5["history"]))
            found = Checkpoint(path, Fingerprint.read(h5["fingerprint"]), history,
                               h5["amplitudes"], h5["diis"] if "diis" in h5 else None)
        except CheckpointError:
            raise
        except Exception as err:       # h5py's KeyError, RuntimeError, OSError on damage
            raise CheckpointCorrupt(
                f"checkpoint {path} is damaged: its HDF5 structure cannot be read "
                f"({type(err).__name__}: {err}); restart from another checkpoint or start "
                "afresh without restart", path, (f"{type(err).__name__}: {err}",)) from err
        yield found
