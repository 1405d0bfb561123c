"""PySCF-shaped entry points: ``CCSD(mf)`` picks the method class by the reference.

    from pyscf import gto, scf
    import sequant_eval.chem as sc
    mf = scf.RHF(gto.M(atom="O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469",
                       basis="cc-pvdz")).run()
    mycc = sc.CCSD(mf, frozen=1).run()
    print(mycc.e_corr, mycc.e_tot, mycc.summary())

As ``pyscf.cc.CCSD``: a closed-shell RHF gets :class:`~sequant_eval.chem.rccsd.RCCSD`
(the spin-traced closed-shell equations on spatial orbitals), any other reference (UHF,
ROHF, GHF) :class:`~sequant_eval.chem.gccsd.GCCSD` (the spin-orbital equations on its
generalized spin orbitals; an unrestricted ``UCCSD`` takes UHF over when it comes).
``spin_orbital=True`` asks for ``GCCSD`` on an RHF too. Each is a small class over the
shared solver :class:`~sequant_eval.chem.cc.CoupledCluster`, whose docstring lists the
options (``conv_tol``, ``conv_tol_normt``, ``max_cycle``, ``diis_space``, ``frozen``,
``budget``, ``max_memory``, ``verbose``, ``chkfile``, ``restart``, ``storage``, ...).
"""
from __future__ import annotations

from typing import Any

from ..errors import UnsupportedFeature
from .cc import require_mean_field
from .gccsd import GCCSD
from .rccsd import CLOSED_SHELL_SYMMETRIES, EXCHANGE_FOLDS, RCCSD

__all__ = ["CCSD", "CLOSED_SHELL_SYMMETRIES", "EXCHANGE_FOLDS", "reference_kind"]

#: The CCSD class for each kind of reference (``reference_kind``). UHF goes through its
#: generalized spin orbitals until an unrestricted class takes it.
CCSD_BY_REFERENCE = {"RHF": RCCSD, "ROHF": GCCSD, "UHF": GCCSD, "GHF": GCCSD}


def reference_kind(mf: Any) -> str:
    """``"RHF"`` (closed-shell restricted), ``"ROHF"``, ``"UHF"`` or ``"GHF"``."""
    istype = getattr(mf, "istype", None)
    if istype is None:
        return "GHF"
    if istype("RHF") and not istype("ROHF"):
        return "RHF" if getattr(mf.mol, "spin", 0) == 0 else "ROHF"
    for kind in ("ROHF", "UHF", "GHF"):
        if istype(kind):
            return kind
    return "GHF"


def CCSD(mf: Any, frozen: Any = 0, spin_orbital: bool | None = None,
         **options: Any) -> RCCSD | GCCSD:
    """The CCSD method object for ``mf``, like ``pyscf.cc.CCSD``: :class:`RCCSD` for a
    closed-shell RHF, :class:`GCCSD` for any other reference or with
    ``spin_orbital=True``; ``options`` are the class's
    (:class:`~sequant_eval.chem.cc.CoupledCluster`)."""
    require_mean_field(mf)
    kind = reference_kind(mf)
    if spin_orbital is False and kind != "RHF":
        raise UnsupportedFeature(
            f"closed-shell CCSD needs a closed-shell RHF reference, got "
            f"{type(mf).__name__} (spin={mf.mol.spin}); use spin_orbital=True")
    cls = GCCSD if spin_orbital else CCSD_BY_REFERENCE[kind]
    return cls(mf, frozen, **options)
