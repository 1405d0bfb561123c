"""Restricted (closed-shell) CCSD: the spin-traced equations on an RHF's spatial orbitals.

The equations are the packaged closed-shell E, R1, R2 (``data/ccsd_cs.txt``, spin-traced
in-package from the spin-orbital derivation), with Coulomb/exchange pairs folded into
``L = 2g − g~`` and ``u2 = 2t2 − t2~`` (:func:`~sequant_eval.expr.exchange.fold_exchange`),
and evaluated with intermediates (:func:`~sequant_eval.expr.factor.factor_common`: terms
ending in the same factor read the same way are summed before that factor is contracted;
at (H2O)3/cc-pVDZ extents 15 distinct o³v³ contractions become 8, 29.7 GFLOP 16.4) stage
by stage (:class:`~sequant_eval.api.staged.StagedEvaluator`), the budget bounding both stages
with what is held. ``intermediates=False`` evaluates the plain equations in one program;
the default drops the intermediates for small systems (below ``FACTOR_FROM`` flops of the
vvvv ladder finding them costs more than they save in a whole run), when a budget cannot
hold them, and out of core (a few o²v² arrays held between stages would defeat the lean
solver). ``t2`` is the αβ amplitude, as in ``pyscf.cc.CCSD``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UnsupportedFeature
from ..expr.factor import factor_common
from .cc import CoupledCluster
from .closed_shell import ClosedShellIntegrals
from .equations import closed_shell_folded_equations
from .pairs import ClosedShellLadder
from .storage import _exchange

__all__ = ["RCCSD", "EXCHANGE_FOLDS", "CLOSED_SHELL_SYMMETRIES", "FACTOR_FROM"]

#: The closed-shell path folds ``2 X{p,q;r,s} - X{p,q;s,r}`` of these tensors.
EXCHANGE_FOLDS = {"t2": "u2", "g": "L"}

#: What ``factor_common`` may use on the folded closed-shell equations: every tensor has
#: particle symmetry, ``f`` and ``g`` (real orbitals) the per-column bra/ket swap, ``L`` the
#: whole swap, and ``R2`` equals its mirror image (``t2`` does).
CLOSED_SHELL_SYMMETRIES = {"symmetric": ("f", "g", "L", "t1", "t2", "u2"),
                           "real": ("f", "g"), "hermitian": ("L",), "mirrored": ("R2",)}

#: Flops of the vvvv ladder (2 o² v⁴) from which the default finds intermediates. Measured
#: (Intel Xeon, 2 cores): H2O/cc-pVDZ (6.5e6) the same residual time either way (8.8 ms)
#: and a first run 0.2–0.35 s slower with them (the merge search); (H2O)2 (4.2e8) a
#: residual of 58 ms against 88 ms without.
FACTOR_FROM = 1e8


class RCCSD(CoupledCluster):
    """Closed-shell CCSD (PySCF's ``RCCSD``) on a converged closed-shell RHF; the options
    are :class:`~sequant_eval.chem.cc.CoupledCluster`'s, and ``intermediates``: evaluate
    with common-factor intermediates (``True``), without (``False``), or with them unless
    the system is small (``FACTOR_FROM``), out of core or the budget cannot hold them
    (``None``, the default)."""

    method = "CCSD"
    spin_orbital = False
    label, orbital_kind = "closed-shell", "spatial orbitals (closed shell)"
    disk_tensors = ("g", "L")
    exchange = True
    triples = "closed-shell"
    #: Whether the particle–particle ladder runs over packed pairs of virtuals (a ≤ b and
    #: a < b: half its multiply-adds; :mod:`~sequant_eval.chem.pairs`), in memory.
    packed_pairs = True
    ladder = ClosedShellLadder

    _OPTIONS = CoupledCluster._OPTIONS | {"packed_pairs"}

    def plain_equations(self):
        """``data/ccsd_cs.txt``, exchange-folded (packaged as ``data/ccsd_cs_folded.txt``:
        the fold is a search over each term's spellings)."""
        return closed_shell_folded_equations()

    def factored_equations(self, plain, extents):
        """With intermediates (``R2`` equals its mirror image; the exchange fold hides it),
        or None: asked not to, or (the default) a system below ``FACTOR_FROM``. The wider
        merge search (beam 8, ~0.1 s more) saves 2-3 % of every residual: worth it from
        about (H2O)3/cc-pVDZ up (vvvv ladder 2 o^2 v^4 = 4.8 GFLOP there)."""
        ladder = 2 * extents["i"] ** 2 * extents["a"] ** 4
        if self.intermediates is False or (self.intermediates is None
                                           and ladder < FACTOR_FROM):
            return None
        beam = 8 if ladder > 3e9 else 1
        return factor_common(plain, extents, beam=beam, **CLOSED_SHELL_SYMMETRIES)

    def mean_field_integrals(self):
        return ClosedShellIntegrals.from_scf(self.mf, self.frozen)

    def base_tensors(self) -> dict[str, Any]:
        """The integral blocks; in memory every block the equations read is transformed
        first, in one go (:meth:`ClosedShellIntegrals.prefetch`; the intermediates read
        the same blocks, and one they did not would be transformed when first read). With
        the packed ladder the ``vvvv`` block is made with them and handed to the packing,
        which frees it (``chem/pairs.py``)."""
        ints = self.integrals
        if not self.out_of_core and not getattr(ints, "prefetched", False):
            from .on_disk import integral_blocks

            program = self.program()
            blocks = integral_blocks(program.plain, program.extents, ("g", "L"))
            if self.pairs() is not None:            # made in the same transform, then
                blocks += (("g", ("a",) * 4),)      # handed to the packing (take_block)
            ints.prefetch(blocks)
            ints.prefetched = True
        return ints.tensors()

    def amplitude_tensors(self, t: dict[str, Any], session: Any = None) -> dict[str, Any]:
        """``t1``, ``t2`` and the exchange amplitude ``u2 = 2 t2 - t2~`` (the session's: on
        disk slab by slab when out of core)."""
        t2 = t["t2"]
        u2 = session.exchange(t2) if session is not None else _exchange(np.asarray(t2))
        return {"t1": {("a", "i"): t["t1"]}, "t2": {("a", "a", "i", "i"): t2},
                "u2": {("a", "a", "i", "i"): u2}}

    def _check_options(self) -> None:
        if self.intermediates and self.out_of_core:
            raise UnsupportedFeature(
                "intermediates=True needs the closed-shell equations in memory; drop "
                "spin_orbital=True / integrals_on_disk, or leave intermediates unset")
