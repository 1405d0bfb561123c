"""``sequant-eval ccsd --spin 2S --charge Q``: open shells run UCCSD on a UHF; a spin the
electron count cannot have is one line on stderr and exit status 2."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("pyscf")

from sequant_eval.cli import main  # noqa: E402

OH = "O 0 0 0; H 0 0 0.97"
#: PySCF ``cc.UCCSD`` on the OH/cc-pVDZ UHF at 1e-11 / 1e-9 (tests/chem/test_uccsd.py's
#: slow test computes it and ours to 3.5e-11); the command's default thresholds (PySCF's
#: 1e-7, 1e-5) leave the energy within 1e-6 of it.
E_CORR_OH_CC_PVDZ = -0.16552527938


def test_oh_doublet_prints_iterations_and_the_energy(capsys, tmp_path):
    out_json = tmp_path / "oh.json"
    assert main(["ccsd", "--atom", OH, "--spin", "1", "--basis", "cc-pvdz",
                 "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("UHF E = ")
    cycles = re.findall(r"^cycle = (\d+)  E_corr\(CCSD\) = (\S+)", text, re.M)
    assert len(cycles) >= 5 and [int(c) for c, _ in cycles] == list(range(1, len(cycles) + 1))
    e_corr = float(re.search(r"E\(corr\)\s+= (\S+) Eh", text).group(1))
    assert abs(e_corr - E_CORR_OH_CC_PVDZ) < 1e-6
    assert "(5, 4) occupied" in text and "-> equal" in text
    data = json.loads(out_json.read_text())
    assert data["reference"] == "UHF" and data["equations"] == "unrestricted"
    assert data["spin"] == 1 and data["nocc"] == [5, 4]


def test_cation_takes_the_unrestricted_path(capsys):
    """H2O+ / STO-3G: ``--charge 1`` alone is a doublet (the lowest spin allowed);
    ``--spin-orbital`` gives the same energy through GCCSD."""
    water = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
    tight = ["--conv-tol", "1e-10", "--conv-tol-normt", "1e-8"]
    energies = []
    for extra in ([], ["--spin", "1", "--spin-orbital"]):
        assert main(["ccsd", "--atom", water, "--charge", "1", "--basis", "sto-3g",
                     *tight, *extra]) == 0
        text = capsys.readouterr().out
        assert ("spin-orbitals" in text) == bool(extra)
        energies.append(float(re.search(r"E\(corr\)\s+= (\S+) Eh", text).group(1)))
    assert abs(energies[0] - energies[1]) < 1e-9


@pytest.mark.parametrize("charge, spin, why", [(0, 0, "other parity"), (0, 2, "other parity"),
                                               (1, 11, "more than the 8 electrons"),
                                               (0, -1, "negative")])
def test_inconsistent_charge_and_spin_is_one_line(capsys, charge, spin, why):
    assert main(["ccsd", "--atom", OH, "--basis", "sto-3g", "--charge", str(charge),
                 "--spin", str(spin)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and "RuntimeError" not in err
    assert err.startswith("sequant-eval: error: --spin") and why in err
    assert "give --spin" in err and captured.out == ""
