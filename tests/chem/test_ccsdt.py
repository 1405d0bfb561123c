"""Spin-orbital CCSDT through the chemistry front end (``CCSDT(mf)``, ``ccsd --method ccsdt``).

Oracles: PySCF's ``pyscf.cc.rccsdt.RCCSDT`` on the same closed-shell RHF, computed here (a
closed shell has one CCSDT energy whichever equations reach it); ebcc's GEBCC CCSDT on an
open-shell UHF; the residual's layouts against the test's einsum reader of the packaged
text (tests/chem/ccsdt_oracles.py).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("pyscf")

from pyscf import gto, scf  # noqa: E402

from sequant_eval.chem import CCSDT  # noqa: E402
from sequant_eval.chem.equations import ccsdt_text  # noqa: E402
from sequant_eval.chem.integrals import full_arrays  # noqa: E402
from sequant_eval.cli import main  # noqa: E402
from sequant_eval.errors import UnsupportedFeature  # noqa: E402
from tests.chem.ccsdt_oracles import evaluate_text, random_inputs  # noqa: E402

WATER = "O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469"


def _rhf(basis: str):
    return scf.RHF(gto.M(atom=WATER, basis=basis, verbose=0)).run(conv_tol=1e-12)


def _pyscf_rccsdt(mf) -> float:
    from pyscf.cc import rccsdt

    mc = rccsdt.RCCSDT(mf)
    mc.conv_tol, mc.conv_tol_normt = 1e-10, 1e-7
    mc.kernel()
    assert mc.converged
    return float(mc.e_corr)


@pytest.fixture(scope="module")
def water_sto3g():
    mf = _rhf("sto-3g")
    return mf, _pyscf_rccsdt(mf)


def test_energy_matches_pyscf_rccsdt_sto3g(water_sto3g):
    """H2O/STO-3G: the converged spin-orbital CCSDT energy equals PySCF RCCSDT's to 1e-8."""
    mf, e_ref = water_sto3g
    cc = CCSDT(mf, conv_tol=1e-10, conv_tol_normt=1e-8).run()
    assert cc.converged and cc.spin_orbital
    assert abs(cc.e_corr - e_ref) < 1e-8
    assert cc.t3.shape == (10, 10, 10, 4, 4, 4)
    assert np.abs(cc.t3).max() > 1e-4                       # the triples are not zero
    e, r1, r2, r3 = cc.residual(cc.t1, cc.t2, cc.t3)
    assert abs(e - cc.e_corr) < 1e-12
    assert max(np.abs(r).max() for r in (r1, r2, r3)) < 1e-7
    assert "CCSDT on H2O / sto-3g" in cc.summary() and cc.to_dict()["method"] == "CCSDT"


def test_residual_layouts():
    """``residual(t1, t2, t3)`` in PySCF layouts against the einsum reader of the text on
    the same spin-orbital integrals, at random antisymmetric amplitudes."""
    cc = CCSDT(_rhf("sto-3g"))
    ints = cc.integrals
    no, nv = ints.nocc, ints.nvir
    f, g = full_arrays(ints)
    amps = random_inputs(no, nv, seed=2, hermitian=True)
    want = evaluate_text(ccsdt_text(), dict(amps, f=f, g=g), no, nv)
    e, r1, r2, r3 = cc.residual(amps["t1"].T, amps["t2"].transpose(2, 3, 0, 1),
                                amps["t3"].transpose(3, 4, 5, 0, 1, 2))
    assert abs(e - want["E"]) < 1e-12 * abs(want["E"])
    np.testing.assert_allclose(r1, want["R1"].T, rtol=0, atol=1e-12 * np.abs(want["R1"]).max())
    np.testing.assert_allclose(r2, want["R2"].transpose(2, 3, 0, 1), rtol=0,
                               atol=1e-12 * np.abs(want["R2"]).max())
    np.testing.assert_allclose(r3, want["R3"].transpose(3, 4, 5, 0, 1, 2), rtol=0,
                               atol=1e-12 * np.abs(want["R3"]).max())


def test_open_shell_matches_ebcc():
    """OH radical/STO-3G, UHF reference (taken through GHF): the converged energy equals
    ebcc ``GEBCC(ansatz="CCSDT")``'s on the same UHF to 1e-8."""
    ebcc = pytest.importorskip("ebcc")
    mf = scf.UHF(gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0))
    mf.run(conv_tol=1e-12)
    ref = ebcc.GEBCC(mf, ansatz="CCSDT", log=ebcc.NullLogger())
    ref.options.e_tol, ref.options.t_tol = 1e-10, 1e-8
    ref.kernel()
    assert ref.converged
    cc = CCSDT(mf, conv_tol=1e-10, conv_tol_normt=1e-8).run()
    assert cc.converged and cc.nocc == 9 and cc.nvir == 3
    assert abs(cc.e_corr - ref.e_corr) < 1e-8


def test_refusals_name_the_way_out(tmp_path):
    mf = _rhf("sto-3g")
    with pytest.raises(UnsupportedFeature, match="drop spin_orbital=False"):
        CCSDT(mf, spin_orbital=False)
    with pytest.raises(UnsupportedFeature, match="integrals_on_disk is for CCSD"):
        CCSDT(mf, integrals_on_disk=tmp_path)
    with pytest.raises(UnsupportedFeature, match="leave it unset"):
        CCSDT(mf, intermediates=True)


def test_cli_method_ccsdt(water_sto3g, capsys):
    """``sequant-eval ccsd --method ccsdt`` on H2O/STO-3G prints PySCF RCCSDT's energy."""
    _, e_ref = water_sto3g
    assert main(["ccsd", "--method", "ccsdt", "--atom", WATER, "--basis", "sto-3g"]) == 0
    out = capsys.readouterr().out
    assert "CCSDT on H2O / sto-3g" in out and "-> equal" in out
    e = float(re.search(r"E\(corr\)\s+= (-?\d+\.\d+) Eh", out).group(1))
    assert abs(e - e_ref) < 1e-8


def test_cli_refuses_ccsdt_out_of_core(tmp_path, capsys):
    assert main(["ccsd", "--method", "ccsdt", "--basis", "sto-3g",
                 "--integrals-on-disk", str(tmp_path)]) == 2
    assert "--integrals-on-disk is for --method ccsd" in capsys.readouterr().err


@pytest.mark.slow
def test_energy_matches_pyscf_rccsdt_631g():
    """H2O/6-31G (10 occupied, 16 virtual spin orbitals): PySCF RCCSDT's energy to 1e-8."""
    mf = _rhf("6-31g")
    cc = CCSDT(mf, conv_tol=1e-10, conv_tol_normt=1e-8).run()
    assert cc.converged
    assert abs(cc.e_corr - _pyscf_rccsdt(mf)) < 1e-8
