"""What a file the package writes was made from, and checksums of what it holds.

An integral file is named after a *canonical description* of what its integrals depend on
(:func:`description`): the format version, the molecule (elements, nuclear charges,
geometry in Bohr rounded to 1e-8, charge, spin, Cartesian or spherical functions), the
basis and ECP (digests of PySCF's internal tables), the reference (SCF class and
occupation pattern), the integral class, the frozen orbitals, the extents and the blocks
written. Nothing in it is a bit-exact float of an SCF: two SCF runs of one molecule agree
on it, so they name one file. The orbitals, which do differ from one SCF run to the next
(at 1e-16, or by the sign of an orbital), are stored in the file and compared to
:data:`ORBITAL_TOLERANCE` after aligning each orbital's sign (:func:`orbital_signs`).

Every block written carries a checksum (:class:`Checksum`: BLAKE2b over its float64 bytes
in row order, fed slab by slab as written); reuse recomputes it (:func:`dataset_checksum`,
slab by slab) and a file whose checksum differs is never used.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

__all__ = ["FORMAT", "ORBITAL_TOLERANCE", "Checksum", "dataset_checksum", "description",
           "description_key", "differing_parts", "orbital_signs", "rows_per_slab"]

#: The integral file format this version writes (1: no header, name of bit-exact orbitals).
FORMAT = 2

#: The largest coefficient difference (max abs, after aligning each orbital's sign)
#: between the orbitals an integral file was written with and a run's, for the run to
#: reuse it. Two SCF runs of one molecule to ``conv_tol`` 1e-10 agree to ~1e-12.
ORBITAL_TOLERANCE = 1e-8

_ALGORITHM = "blake2b-128"


def _digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _rounded(x: float, digits: int = 8) -> str:
    return f"{round(float(x), digits) + 0.0:.{digits}f}"          # -0.0 written as 0.0


def _molecule(mol: Any) -> dict[str, Any]:
    coords = np.asarray(mol.atom_coords(), dtype=np.float64)
    custom = getattr(mol, "incore_anyway", False)
    return {"elements": [mol.atom_symbol(k) for k in range(mol.natm)],
            "nuclear_charges": [_rounded(z, 6) for z in np.asarray(mol.atom_charges())],
            "geometry_bohr": [[_rounded(x) for x in row] for row in coords],
            "charge": int(mol.charge), "spin": int(mol.spin),
            "electrons": int(mol.nelectron), "cartesian": bool(mol.cart),
            "basis": str(mol.basis), "basis_digest": _digest(getattr(mol, "_basis", None)),
            "ecp_digest": _digest(getattr(mol, "_ecp", None)), "custom_hamiltonian": custom}


def description(ints: Any, blocks) -> dict[str, Any]:
    """The canonical description of the integral blocks ``blocks`` (``(tensor, spaces)``
    pairs) of ``ints``: JSON-ready, equal for two SCF runs of one system."""
    mf = ints.scf
    out = {"format": FORMAT, "integrals": type(ints).__name__,
           "reference": str(getattr(ints, "reference", type(mf).__name__)),
           "occupations": [_rounded(x, 6) for x in np.ravel(np.asarray(mf.mo_occ))],
           "frozen": [int(p) for p in ints.frozen],
           "extents": {k: int(v) for k, v in sorted(ints.extents.items())},
           "blocks": [f"{t}{{{','.join(s)}}}" for t, s in blocks],
           "molecule": _molecule(mf.mol)}
    eri = getattr(mf, "_eri", None)
    if out["molecule"]["custom_hamiltonian"] and eri is not None:
        out["eri_digest"] = hashlib.sha256(np.ascontiguousarray(eri).tobytes()).hexdigest()
    return out


def description_key(desc: dict[str, Any]) -> str:
    """The 16 hex digits that name the file of ``desc``."""
    return _digest(desc)


def differing_parts(stored: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The parts (top level, and the molecule's) in which two descriptions differ."""
    out = []
    for name in sorted(set(stored) | set(run)):
        if name == "molecule" and isinstance(stored.get(name), dict):
            mine, theirs = stored[name], run.get(name) or {}
            out += [f"molecule {k}" for k in sorted(set(mine) | set(theirs))
                    if mine.get(k) != theirs.get(k)]
        elif stored.get(name) != run.get(name):
            out.append(name)
    return out


def orbital_signs(stored: dict[str, np.ndarray], run: dict[str, np.ndarray],
                  tolerance: float = ORBITAL_TOLERANCE):
    """``(signs, reason)``: per space the sign (±1 per orbital) taking the run's orbitals
    to the stored ones, and None; or None and why they are other orbitals (other shapes,
    or coefficients further apart than ``tolerance`` with the signs aligned)."""
    if set(stored) != set(run) or any(np.shape(stored[s]) != np.shape(run[s]) for s in run):
        shapes = {s: np.shape(c) for s, c in stored.items()}
        return None, (f"the orbitals have other shapes (file {shapes}, this run "
                      f"{ {s: np.shape(c) for s, c in run.items()} })")
    signs, gap = {}, 0.0
    for space, c in run.items():
        ref = np.asarray(stored[space], dtype=np.float64)
        signs[space] = np.where(np.einsum("pk,pk->k", ref, c) < 0, -1.0, 1.0)
        gap = max(gap, float(np.abs(c * signs[space] - ref).max(initial=0.0)))
    if gap > tolerance:
        return None, (f"the orbitals differ by up to {gap:.1e} (more than {tolerance:g}, "
                      "signs aside): another SCF solution")
    return signs, None


class Checksum:
    """A running BLAKE2b-128 checksum of float64 blocks fed in row order."""

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=16)

    def update(self, values: np.ndarray) -> None:
        self._h.update(np.ascontiguousarray(values, dtype=np.float64).data)

    def text(self) -> str:
        """``"blake2b-128:<hex>"``, as stored in a dataset's ``checksum`` attribute."""
        return f"{_ALGORITHM}:{self._h.hexdigest()}"


def rows_per_slab(shape: tuple[int, ...], slab_bytes: float) -> int:
    """Rows of an array of ``shape`` read or written at a time: at most ``slab_bytes``
    (at least one row)."""
    row = 8 * int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 8
    return max(1, int(slab_bytes // max(1, row)))


def dataset_checksum(ds: Any, slab_bytes: float = 32 << 20) -> str:
    """:class:`Checksum` of an HDF5 dataset (or an array), read slab by slab."""
    out = Checksum()
    shape = tuple(ds.shape)
    if not shape:
        out.update(np.asarray(ds[()]))
        return out.text()
    rows = rows_per_slab(shape, slab_bytes)
    for lo in range(0, shape[0], rows):
        out.update(np.asarray(ds[lo:lo + rows]))
    return out.text()
