"""PySCF-shaped entry points: ``CCSD(mf)`` picks the method class by the reference.

    from pyscf import gto, scf
    import sequant_eval.chem as sc
    mf = scf.RHF(gto.M(atom="O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469",
                       basis="cc-pvdz")).run()
    mycc = sc.CCSD(mf, frozen=1).run()
    print(mycc.e_corr, mycc.e_tot, mycc.summary())

As ``pyscf.cc.CCSD``: a closed-shell RHF gets :class:`~sequant_eval.chem.rccsd.RCCSD`
(the spin-traced closed-shell equations on spatial orbitals), a UHF or ROHF
:class:`~sequant_eval.chem.uccsd.UCCSD` (the spin-integrated unrestricted equations on α
and β spatial orbitals), a GHF :class:`~sequant_eval.chem.gccsd.GCCSD` (the spin-orbital
equations). ``spin_orbital=True`` asks for ``GCCSD`` on any reference (an RHF, UHF or
ROHF through its generalized spin orbitals: the benchmarks' comparison path). Each is a
small class over the shared solver :class:`~sequant_eval.chem.cc.CoupledCluster`, whose
docstring lists the options (``conv_tol``, ``conv_tol_normt``, ``max_cycle``,
``diis_space``, ``frozen``, ``budget``, ``max_memory``, ``verbose``, ``chkfile``,
``restart``, ``storage``, ...).
"""
from __future__ import annotations

from typing import Any

from ..errors import UnsupportedFeature
from .cc import require_mean_field
from .gccsd import GCCSD
from .rccsd import CLOSED_SHELL_SYMMETRIES, EXCHANGE_FOLDS, RCCSD
from .uccsd import UCCSD

__all__ = ["CCSD", "CLOSED_SHELL_SYMMETRIES", "EXCHANGE_FOLDS", "reference_kind"]

#: The CCSD class for each kind of reference (``reference_kind``).
CCSD_BY_REFERENCE = {"RHF": RCCSD, "ROHF": UCCSD, "UHF": UCCSD, "GHF": GCCSD}


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
         **options: Any) -> RCCSD | UCCSD | GCCSD:
    """The CCSD method object for ``mf``, like ``pyscf.cc.CCSD``: :class:`RCCSD` for a
    closed-shell RHF, :class:`UCCSD` for a UHF or ROHF (but one with no electron of one
    spin, an H atom, whose α/β blocks would be empty), :class:`GCCSD` for a GHF, those, or
    with ``spin_orbital=True``; ``options`` are the class's
    (:class:`~sequant_eval.chem.cc.CoupledCluster`)."""
    require_mean_field(mf)
    kind = reference_kind(mf)
    if spin_orbital is False and kind == "GHF":
        raise UnsupportedFeature(
            f"a GHF reference ({type(mf).__name__}) has only the spin-orbital equations; "
            "drop spin_orbital=False")
    cls = GCCSD if spin_orbital else CCSD_BY_REFERENCE[kind]
    if cls is UCCSD and spin_orbital is None and min(mf.mol.nelec) == 0:
        cls = GCCSD               # one spin empty (an H atom): the spin-orbital equations
    return cls(mf, frozen, **options)
