"""Generalized (spin-orbital) CCSD: the spin-orbital equations on any reference's spin orbitals.

The equations are the packaged spin-orbital E, R1, R2 (``data/ccsd_so.txt``, derived
in-package with sympy, :mod:`~sequant_eval.chem.derive`); the integrals are ``f`` and
``g = <pq||rs>`` over the reference's spin orbitals (an RHF's ``2P + σ``, any other
reference through its GHF, :mod:`~sequant_eval.chem.spin_orbital`). Amplitudes are in
``pyscf.cc.GCCSD``'s layouts, so they compare directly.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..api import Evaluator
from ..errors import UnsupportedFeature
from .cc import CoupledCluster
from .equations import ccsd_equations
from .pairs import SpinOrbitalLadder

__all__ = ["GCCSD", "residual_function"]


class GCCSD(CoupledCluster):
    """Spin-orbital CCSD (PySCF's ``GCCSD``) on any converged SCF (RHF, UHF, ROHF, GHF);
    the options are :class:`~sequant_eval.chem.cc.CoupledCluster`'s, ``packed_pairs``
    included. ``frozen`` is
    PySCF's: spatial orbitals per spin for an RHF, UHF or ROHF (``frozen=N`` freezes the N
    lowest orbitals of each spin, as ``pyscf.cc.UCCSD(frozen=N)``; a list of spatial
    indices, or ``[alpha, beta]`` lists), spin orbitals for a GHF (as ``GCCSD``)."""

    method = "CCSD"
    spin_orbital = True
    label, orbital_kind = "spin-orbital", "spin-orbitals"
    triples = "spin-orbital"
    #: Whether the particle–particle ladder runs over packed pairs of virtuals (a < b,
    #: c < d: a quarter of its multiply-adds; :mod:`~sequant_eval.chem.pairs`), in memory.
    packed_pairs = True
    ladder = SpinOrbitalLadder

    _OPTIONS = CoupledCluster._OPTIONS | {"packed_pairs"}

    def plain_equations(self):
        """``data/ccsd_so.txt``."""
        return ccsd_equations()

    def mean_field_integrals(self):
        from .spin_orbital import spin_orbital_integrals

        return spin_orbital_integrals(self.mf, self.frozen)

    def _check_options(self) -> None:
        if self.intermediates:
            raise UnsupportedFeature(
                "intermediates=True needs the closed-shell equations in memory; drop "
                "spin_orbital=True / integrals_on_disk, or leave intermediates unset")


def residual_function(ints: Any, evaluator: Evaluator | None = None, backend: str = "numpy",
                      meters: list | None = None):
    """``residual(t) -> (E, {"t1": R1, "t2": R2, ...})`` for
    :func:`~sequant_eval.chem.solver.solve_cc` on spin-orbital integrals ``ints``: every
    amplitude ``tN`` given (solver layout, virtual slots first) goes in, its residual
    ``RN`` comes out; the packaged CCSD equations unless ``evaluator`` says otherwise."""
    ev = evaluator or Evaluator(ccsd_equations(), ints.extents)
    base = ints.tensors()

    def residual(t):
        tensors = dict(base, **{k: {("a",) * (v.ndim // 2) + ("i",) * (v.ndim // 2): v}
                                for k, v in t.items()})
        out, meter = ev.evaluate(tensors, backend=backend, return_meter=True)
        if meters is not None:
            meters.append(meter)
        return float(out["E"]), {k: np.asarray(out["R" + k[1:]]) for k in t}

    return residual
