"""Unrestricted (open-shell) CCSD: the spin-integrated equations on a UHF's or ROHF's α and
β spatial orbitals.

The equations are the packaged unrestricted E, R1a, R1b, R2aa, R2ab, R2bb
(``data/ccsd_u.txt``, spin-integrated in-package from the spin-orbital derivation,
:mod:`~sequant_eval.expr.spin_integrate`), over the α/β integral blocks of
:class:`~sequant_eval.chem.unrestricted_integrals.UnrestrictedIntegrals` (an ROHF with its
off-diagonal Fock blocks carried, as PySCF's ``UCCSD`` takes it). The amplitudes are
PySCF ``UCCSD``'s: ``t1 = (t1a, t1b)``, ``t2 = (t2aa, t2ab, t2bb)`` with ``t2ab[i, J, a,
B]``; the solver iterates the five blocks together (one DIIS vector), with denominators
from the diagonals of ``fa`` and ``fb``. About a tenth of the spin-orbital path's flops
at (H2O)2+ / cc-pVDZ (``tests/chem/test_unrestricted_equations.py``). As the closed-shell
path, the residual runs with common-factor intermediates
(:func:`~sequant_eval.expr.factor.factor_common`, greedy: at (H2O)3+ / cc-pVDZ 80.3 GFLOP
become 53.6) stage by stage, unless ``intermediates=False``, out of core, or a budget
that cannot hold them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UnsupportedFeature
from ..expr.factor import factor_common
from .cc import CoupledCluster
from .equations import unrestricted_equations
from .solver import AmplitudeLayout
from .unrestricted_integrals import UnrestrictedIntegrals

__all__ = ["UCCSD", "UNRESTRICTED_LAYOUT", "UNRESTRICTED_SYMMETRIES"]

#: The unrestricted amplitude blocks (solver layout) and their MP2 numerators.
UNRESTRICTED_LAYOUT = AmplitudeLayout(
    spaces={"t1a": ("a", "i"), "t1b": ("A", "I"), "t2aa": ("a", "a", "i", "i"),
            "t2ab": ("a", "A", "i", "I"), "t2bb": ("A", "A", "I", "I")},
    guess=dict(zip(("t2aa", "t2ab", "t2bb"), UnrestrictedIntegrals.GUESS_BLOCKS)))

#: What ``factor_common`` may use on the unrestricted equations: particle symmetry of the
#: one-spin tensors (not of ``gab``, ``t2ab``: their particles have different spins), the
#: bra/ket swap of the real Fock matrices (per column) and of ``gaa``, ``gbb`` (whole:
#: ``<pq||rs> = <rs||pq>``; not per column, which the exchange part breaks), and
#: ``R2aa``, ``R2bb`` equal to their mirror images.
UNRESTRICTED_SYMMETRIES = {
    "symmetric": ("fa", "fb", "gaa", "gbb", "t1a", "t1b", "t2aa", "t2bb"),
    "real": ("fa", "fb"), "hermitian": ("gaa", "gbb"), "mirrored": ("R2aa", "R2bb")}


class UCCSD(CoupledCluster):
    """Unrestricted CCSD (PySCF's ``UCCSD``) on a converged UHF or ROHF; the options are
    :class:`~sequant_eval.chem.cc.CoupledCluster`'s, and ``intermediates`` as
    :class:`~sequant_eval.chem.rccsd.RCCSD`'s. ``frozen`` is ``UCCSD``'s: ``N``
    freezes the N lowest orbitals of each spin, a list the same orbitals of both spins,
    ``[alpha, beta]`` lists each spin's. ``kernel(t1, t2)`` takes and returns PySCF's
    tuples; ``residual`` takes the five blocks (``t1a, t1b, t2aa, t2ab, t2bb``)."""

    method = "CCSD"
    spin_orbital = False
    triples = "unrestricted"
    label, orbital_kind = "unrestricted", "spatial orbitals (alpha, beta)"
    amplitudes = ("t1a", "t1b", "t2aa", "t2ab", "t2bb")
    disk_tensors = ("gaa", "gab", "gbb")
    layout = UNRESTRICTED_LAYOUT

    def plain_equations(self):
        """``data/ccsd_u.txt``."""
        return unrestricted_equations()

    def factored_equations(self, plain, extents):
        """With intermediates (greedy merge: the beam search costs more than it saves)."""
        if self.intermediates is False:
            return None
        return factor_common(plain, extents, beam=1, **UNRESTRICTED_SYMMETRIES)

    def mean_field_integrals(self):
        return UnrestrictedIntegrals.from_scf(self.mf, self.frozen)

    def amplitude_tensors(self, t: dict[str, Any], session: Any = None) -> dict[str, Any]:
        """Each block over its spaces (``t2ab`` over ``a, A, i, I``)."""
        return {k: {self.layout.spaces[k]: v} for k, v in t.items()}

    def kernel(self, t1: Any = None, t2: Any = None):
        """PySCF ``UCCSD``'s ``kernel(t1, t2)``: from ``t1 = (t1a, t1b)`` and ``t2 =
        (t2aa, t2ab, t2bb)`` when given (the MP2 guess, or the checkpoint with
        ``restart``, otherwise); returns ``(e_corr, t1, t2)`` as tuples."""
        given = {}
        for names, value in ((self.amplitudes[:2], t1), (self.amplitudes[2:], t2)):
            if value is not None:
                if len(value) != len(names):
                    raise UnsupportedFeature(
                        f"UCCSD.kernel takes t1 = (t1a, t1b) and t2 = (t2aa, t2ab, t2bb) as "
                        f"PySCF's UCCSD does; got {len(value)} arrays for {', '.join(names)}")
                given.update(zip(names, value))
        self._solve(given)
        return self.e_corr, self.t1, self.t2

    @property
    def t1(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(t1a, t1b)`` in PySCF's layout (``t1a[i, a]``), None before the run."""
        return None if self.t1a is None else (self.t1a, self.t1b)

    @property
    def t2(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(t2aa, t2ab, t2bb)`` in PySCF's layout (``t2ab[i, J, a, B]``), None before."""
        return None if self.t2aa is None else (self.t2aa, self.t2ab, self.t2bb)

    def _check_options(self) -> None:
        if self.intermediates and self.out_of_core:
            raise UnsupportedFeature(
                "intermediates=True needs the unrestricted equations in memory; drop "
                "integrals_on_disk, or leave intermediates unset")
