"""PySCF's convergence test and DIIS: at PySCF's thresholds the iteration count is PySCF's
(oracle: PySCF's own ``kernel`` on the same mean field, counted by its ``cycles``), and the
energy within what ``conv_tol`` allows of its."""
from __future__ import annotations

import pytest

pyscf = pytest.importorskip("pyscf")
from pyscf import cc, gto, scf  # noqa: E402

from sequant_eval.chem import CCSD  # noqa: E402


def _pair(atom: str, basis: str, spin: int = 0):
    mol = gto.M(atom=atom, basis=basis, spin=spin, verbose=0)
    mf = (scf.RHF if spin == 0 else scf.UHF)(mol).run(conv_tol=1e-11)
    return cc.CCSD(mf).run(), CCSD(mf).run()


def test_closed_shell_water_takes_pyscfs_iterations():
    ref, ours = _pair("O 0 0 0; H 0 0.757 0.587; H 0 -0.757 0.587", "6-31g")
    assert ref.converged and ours.converged
    assert abs(ours.iterations - ref.cycles) <= 1, (ours.iterations, ref.cycles)
    assert abs(ours.e_corr - ref.e_corr) < 1e-7


def test_an_open_shell_radical_takes_pyscfs_iterations():
    ref, ours = _pair("O 0 0 0; H 0 0 0.97", "6-31g", spin=1)
    assert ref.converged and ours.converged
    assert abs(ours.iterations - ref.cycles) <= 1, (ours.iterations, ref.cycles)
    assert abs(ours.e_corr - ref.e_corr) < 1e-6


def test_the_log_names_pyscfs_norm(caplog):
    """The per-iteration line measures the amplitude change, PySCF's ``norm(t1,t2)``."""
    mol = gto.M(atom="H 0 0 0; H 0 0 0.74", basis="6-31g", verbose=0)
    mf = scf.RHF(mol).run()
    caplog.set_level("INFO", logger="sequant_eval.chem")
    CCSD(mf).run()
    cycles = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cycle")]
    assert cycles and all("norm(t1,t2) = " in line for line in cycles)
