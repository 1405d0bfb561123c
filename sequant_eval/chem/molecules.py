"""Named test molecules, so that examples, tests and benchmarks agree on one geometry.

Every geometry is a fixed Cartesian structure in Angstrom; a name maps to exactly one
structure so that energies quoted anywhere in the project are reproducible.

Known names
-----------
``water``
    H2O, the usual textbook near-equilibrium structure (Angstrom)::

        O   0.000000   0.000000   0.117300
        H   0.000000   0.757200  -0.469200
        H   0.000000  -0.757200  -0.469200

``water_dimer``
    (H2O)2, the S22 benchmark-set water-dimer minimum (Jurecka et al., PCCP 8, 1985
    (2006)), Angstrom::

        O  -1.551007  -0.114520   0.000000
        H  -1.934259   0.762503   0.000000
        H  -0.599677   0.040712   0.000000
        O   1.350625   0.111469   0.000000
        H   1.680398  -0.373741  -0.758561
        H   1.680398  -0.373741   0.758561

All molecules are closed-shell neutral singlets; PySCF's point-group symmetry is switched
off (so that orbitals come out in plain energy order) and its output silenced.
"""
from __future__ import annotations

import numpy as np

from typing import TYPE_CHECKING

from sequant_eval.errors import SequantEvalError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyscf import gto

__all__ = ["UnknownMolecule", "UnknownBasis", "BadGeometry", "SpinMismatch", "GEOMETRIES",
           "known_molecules",
           "geometry", "build_molecule", "molecule_from_atoms", "read_xyz", "mean_field",
           "chemical_formula"]


class UnknownMolecule(SequantEvalError, KeyError):
    """A molecule name that is not in :data:`GEOMETRIES`."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class UnknownBasis(SequantEvalError):
    """A basis-set name PySCF does not know."""


class BadGeometry(SequantEvalError):
    """Atom text or an XYZ file PySCF cannot read, or an impossible charge."""


class SpinMismatch(BadGeometry):
    """A spin (``2S``, PySCF's: unpaired electrons) the electron count cannot have: of the
    other parity, negative, or more than the electrons."""


#: name -> geometry as PySCF atom text (Angstrom).
GEOMETRIES: dict[str, str] = {
    "water": (
        "O   0.000000   0.000000   0.117300\n"
        "H   0.000000   0.757200  -0.469200\n"
        "H   0.000000  -0.757200  -0.469200"
    ),
    "water_dimer": (
        "O  -1.551007  -0.114520   0.000000\n"
        "H  -1.934259   0.762503   0.000000\n"
        "H  -0.599677   0.040712   0.000000\n"
        "O   1.350625   0.111469   0.000000\n"
        "H   1.680398  -0.373741  -0.758561\n"
        "H   1.680398  -0.373741   0.758561"
    ),
}


def known_molecules() -> tuple[str, ...]:
    """The names :func:`build_molecule` accepts, sorted."""
    return tuple(sorted(GEOMETRIES))


def geometry(name: str) -> str:
    """The geometry of molecule ``name`` as PySCF atom text in Angstrom.

    Raises
    ------
    UnknownMolecule
        If ``name`` is not a known molecule; the message lists the known names.
    """
    try:
        return GEOMETRIES[name]
    except KeyError:
        raise UnknownMolecule(
            f"unknown molecule {name!r}; known molecules: {', '.join(known_molecules())}"
        ) from None


def build_molecule(name: str, basis: str) -> "gto.Mole":
    """Build the PySCF molecule ``name`` in basis ``basis``.

    Parameters
    ----------
    name
        One of :func:`known_molecules` (e.g. ``"water"``, ``"water_dimer"``).
    basis
        Any basis-set name PySCF knows (``"sto-3g"``, ``"6-31g"``, ``"cc-pvdz"``, ...).

    Returns
    -------
    pyscf.gto.Mole
        Built molecule: Angstrom units, charge 0, singlet, no symmetry, ``verbose=0``.

    Raises
    ------
    UnknownMolecule
        If ``name`` is not known (the message lists the known names).
    UnknownBasis
        If PySCF does not know ``basis``.
    """
    import warnings

    from pyscf import gto
    from pyscf.lib.exceptions import BasisNotFoundError

    atom = geometry(name)
    mol = gto.Mole()
    mol.atom = atom
    mol.unit = "Angstrom"
    mol.basis = basis
    mol.charge = 0
    mol.spin = 0
    mol.symmetry = False
    mol.verbose = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PySCF's "try basis-set-exchange" hint
            mol.build()
    except BasisNotFoundError as exc:
        raise UnknownBasis(f"PySCF does not know basis {basis!r} (molecule {name!r})") from exc
    return mol


def read_xyz(path: str) -> str:
    """The atoms of an XYZ file (``N``, a comment line, then ``El x y z`` in Angstrom)."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise BadGeometry(f"--xyz {path}: is a directory; give an XYZ file")
    if not p.is_file():
        raise BadGeometry(f"--xyz {path}: no such file")
    lines = [ln.strip() for ln in p.read_text(encoding="utf-8", errors="replace").splitlines()]
    if lines and lines[0].isdigit():
        count, lines = int(lines[0]), lines[2:]
        atoms = [ln for ln in lines if ln]
        if len(atoms) != count:
            raise BadGeometry(f"{path}: the count line announces {count} atoms, the file "
                              f"has {len(atoms)} atom lines; correct the count line")
        return "; ".join(atoms)
    return "; ".join(ln for ln in lines if ln and not ln.startswith("#"))


def molecule_from_atoms(atom: str, basis: str, charge: int = 0,
                        spin: int | None = None) -> "gto.Mole":
    """A PySCF molecule from atom text (``"O 0 0 0.117; H 0 0.757 -0.469; ..."``, Angstrom);
    ``spin`` is PySCF's ``2S`` (the unpaired electrons; by default the lowest the electron
    count allows: singlet or doublet), refused (:class:`SpinMismatch`) when the electron
    count cannot have it; no symmetry, silent."""
    import warnings

    from pyscf import gto
    from pyscf.lib.exceptions import BasisNotFoundError

    mol = gto.Mole(atom=atom, basis=basis, charge=charge, unit="Angstrom", symmetry=False,
                   verbose=0)
    electrons = _electrons(mol)
    if spin is None:
        spin = electrons % 2
    elif spin < 0 or spin > electrons or (electrons - spin) % 2:
        allowed = "0, 2, 4, ..." if electrons % 2 == 0 else "1, 3, 5, ..."
        why = "negative" if spin < 0 else f"more than the {electrons} electrons" \
            if spin > electrons else f"of the other parity than the {electrons} electrons"
        raise SpinMismatch(f"--spin {spin} with --charge {charge}: {electrons} electrons "
                           f"cannot have {spin} unpaired ({why}); give --spin {allowed} "
                           f"(2S, PySCF's convention) or another --charge")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mol.build(spin=spin)
    except BasisNotFoundError as exc:
        raise UnknownBasis(f"PySCF does not know basis {basis!r}") from exc
    except Exception as exc:  # PySCF raises bare exceptions for malformed atoms
        raise BadGeometry(f"PySCF cannot read the atoms {atom!r}: {exc}") from exc
    return mol


def _electrons(mol) -> int:
    from pyscf.data.elements import charge as nuclear_charge

    if not str(mol.atom).strip(" ;\n"):
        raise BadGeometry("no atoms given: write them as \"O 0 0 0.117; H 0 0.757 -0.469; ...\"")
    try:
        atoms = mol.format_atom(mol.atom, unit=mol.unit)
    except Exception as exc:
        unknown = str(exc).partition("Unsupported atom symbol")[2].strip()
        if unknown:
            raise BadGeometry(f"unknown element {unknown.split()[0]!r} in the atoms "
                              f"{mol.atom!r}; write element symbols such as H, C, O") from exc
        raise BadGeometry(f"PySCF cannot read the atoms {mol.atom!r}: {exc}") from exc
    written = _symbols_written(mol.atom, len(atoms))
    charges = []
    for (symbol, _), raw in zip(atoms, written):
        z = _nuclear_charge(symbol, nuclear_charge)
        if z <= 0 and not _is_ghost(symbol, nuclear_charge):
            raise BadGeometry(f"unknown element {raw!r} in the atoms {mol.atom!r}; write "
                              "element symbols such as H, C, O (ghost atoms as X-H)")
        charges.append(max(z, 0))
    n = sum(charges) - mol.charge
    if n <= 0:
        raise BadGeometry(f"charge {mol.charge} leaves {n} electrons in {mol.atom!r}; give a "
                          "smaller --charge or known element symbols")
    return n


def _symbols_written(atom, count: int) -> list[str]:
    """The element symbols as the user wrote them (for messages), else PySCF's."""
    if isinstance(atom, str):
        parts = [p.split()[0] for p in atom.replace(";", "\n").splitlines() if p.split()]
        if len(parts) == count:
            return parts
    return [str(a[0]) if not isinstance(a, str) else a.split()[0] for a in atom] \
        if not isinstance(atom, str) and len(atom) == count else ["?"] * count


def _nuclear_charge(symbol: str, nuclear_charge) -> int:
    try:
        return int(nuclear_charge(symbol))
    except (KeyError, ValueError, TypeError):
        return -1


def _is_ghost(symbol: str, nuclear_charge) -> bool:
    """A ghost atom of a known element (PySCF's ``X-H``, ``ghost-H``)."""
    upper = symbol.upper()
    for prefix in ("X-", "GHOST-", "GHOST_"):
        if upper.startswith(prefix):
            return _nuclear_charge(symbol[len(prefix):], nuclear_charge) > 0
    return False


def mean_field(mol, conv_tol: float = 1e-10):
    """A converged RHF (closed shell) or UHF (open shell) of ``mol``."""
    from pyscf import scf

    mf = scf.RHF(mol) if mol.spin == 0 else scf.UHF(mol)
    mf.conv_tol = conv_tol
    mf.max_cycle = 200
    try:
        mf.kernel()
    except (ArithmeticError, RuntimeError, ValueError, np.linalg.LinAlgError) as err:
        raise SequantEvalError(
            f"the {type(mf).__name__} calculation failed ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else err!r}); check the geometry (no "
            f"two atoms at one place), the charge and the basis") from err
    if not mf.converged:
        raise SequantEvalError(f"{type(mf).__name__} did not converge in {mf.max_cycle} "
                               "cycles; check the geometry and charge")
    return mf


def chemical_formula(mol) -> str:
    """The Hill formula of a PySCF molecule: C, then H, then the other elements in
    alphabetical order (all alphabetical without carbon), counts of one left out, e.g.
    ``"H4O2"`` for the water dimer; ghost atoms are not counted."""
    counts: dict[str, int] = {}
    for k in range(mol.natm):
        if mol.atom_charge(k) == 0:                  # a ghost atom (basis functions only)
            continue
        symbol = mol.atom_pure_symbol(k)
        counts[symbol] = counts.get(symbol, 0) + 1
    first = [e for e in ("C", "H") if e in counts] if "C" in counts else []
    order = first + sorted(e for e in counts if e not in first)
    return "".join(f"{e}{counts[e] if counts[e] > 1 else ''}" for e in order)
