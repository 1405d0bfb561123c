"""``sequant-eval ccsd`` on a user's molecule: per-iteration lines, JSON, frozen core, and
one-line refusals. Oracle for the energies: PySCF ``cc.CCSD`` / ``cc.UCCSD`` run here."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("pyscf")

from pyscf import cc, gto, scf  # noqa: E402

from sequant_eval.cli import main  # noqa: E402

WATER = "O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469"
#: Tighter than the default (PySCF's 1e-7, 1e-5): the energies are compared to 1e-8.
TIGHT = ["--conv-tol", "1e-10", "--conv-tol-normt", "1e-8"]


def _pyscf_ecorr(atom, basis, frozen=0, spin=0):
    mol = gto.M(atom=atom, basis=basis, spin=spin, verbose=0)
    mf = (scf.RHF(mol) if spin == 0 else scf.UHF(mol)).run(conv_tol=1e-11)
    ref = (cc.CCSD(mf, frozen=frozen) if spin == 0 else cc.UCCSD(mf))
    ref.conv_tol, ref.conv_tol_normt = 1e-10, 1e-8
    return ref.kernel()[0]


def test_atom_frozen_json(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["ccsd", "--atom", WATER, "--basis", "6-31g", "--frozen", "1", *TIGHT,
                 "--intermediates", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    iters = re.findall(r"^cycle = (\d+)  E_corr\(CCSD\) = (-?\d\.\d+)  dE = \S+  "
                       r"norm\(t1,t2\) = \S+  \(\d+\.\d\d s, peak .*\)$", text, re.M)
    data = json.loads(out.read_text())
    assert len(iters) == data["iterations"] >= 5
    assert data["equations"] == "closed-shell" and data["frozen"] == 1 and data["converged"]
    assert abs(data["e_corr"] - _pyscf_ecorr(WATER, "6-31g", frozen=1)) < 1e-8
    m = data["memory"]
    assert m["predicted_peak_bytes"] == m["measured_peak_bytes"] > 0
    assert "-> equal" in text and "1 frozen" in text and "CCSD on H2O / 6-31g" in text
    assert "CCSD converged" in text and "E(CCSD) = " in text
    assert data["intermediates"] and "staged: 3 stages" in text


def test_no_intermediates_gives_the_same_energy(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["ccsd", "--atom", WATER, "--basis", "sto-3g", "--no-intermediates", *TIGHT,
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert not data["intermediates"] and "forest:" in capsys.readouterr().out
    assert abs(data["e_corr"] - _pyscf_ecorr(WATER, "sto-3g")) < 1e-8


def test_xyz_file_and_open_shell(tmp_path, capsys):
    xyz = tmp_path / "oh.xyz"
    xyz.write_text("2\nhydroxyl radical\nO 0 0 0\nH 0 0 0.97\n")
    assert main(["ccsd", "--xyz", str(xyz), "--basis", "sto-3g", *TIGHT]) == 0
    text = capsys.readouterr().out
    assert "UHF E =" in text and "spatial orbitals (alpha, beta)" in text   # UCCSD
    e = float(re.search(r"E\(corr\)\s+= (-?\d\.\d+) Eh", text).group(1))
    assert abs(e - _pyscf_ecorr("O 0 0 0; H 0 0 0.97", "sto-3g", spin=1)) < 1e-8


@pytest.mark.parametrize("argv, culprit", [
    (["--frozen", "9"], "frozen=9"),
    (["--atom", "Xx 0 0 0"], "Xx"),
    (["--atom", WATER, "--basis", "no-such-basis"], "no-such-basis"),
    (["--xyz", "/nonexistent/file.xyz"], "no such file"),
    (["--molecule", "water", "--atom", WATER], "one of --molecule"),
    (["--molecule", "benzene"], "benzene"),
    (["--json", "/nonexistent/dir/o.json"], "does not exist"),
    (["--budget", "lots"], "lots"),
    (["--max-iter", "zero"], "invalid int"),
])
def test_mistakes_are_one_line_and_exit_2(argv, culprit, capsys):
    try:
        code = main(["ccsd", "--basis", "sto-3g", *argv])
    except SystemExit as exit_:         # argparse's own refusals exit from inside
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and culprit in err and "Traceback" not in err


def test_an_infeasible_budget_prints_the_number_and_the_flag(capsys):
    """Oracle: the smallest budget the API names for the same run (``InfeasibleBudget.minimum``
    of ``CCSD(mf, budget=1000)``)."""
    from sequant_eval.chem import CCSD
    from sequant_eval.chem.molecules import mean_field, molecule_from_atoms
    from sequant_eval.errors import InfeasibleBudget

    assert main(["ccsd", "--atom", WATER, "--basis", "sto-3g", "--budget", "1000"]) == 2
    err = capsys.readouterr().err
    with pytest.raises(InfeasibleBudget) as info:
        CCSD(mean_field(molecule_from_atoms(WATER, "sto-3g")), budget=1000).run()
    need = int(info.value.minimum)
    assert err == (f"sequant-eval: error: --budget 1000: 1000 B is below the smallest budget "
                   f"that works, {err.split('works, ')[1].split(';')[0]}; give --budget "
                   f"{need} or more\n")
    assert "InfeasibleBudget" not in err and "se.min_budget" not in err


def test_frozen_orbital_list_and_pyscf_default_thresholds(tmp_path, capsys, monkeypatch):
    """``--frozen 0,1`` is PySCF's ``frozen=[0, 1]`` (oracle: cc.CCSD with it); the
    command's default thresholds are the API's, PySCF's (1e-7, 1e-5)."""
    import sequant_eval.cli as cli
    from sequant_eval.chem import RCCSD

    out = tmp_path / "out.json"
    assert main(["ccsd", "--atom", WATER, "--basis", "6-31g", "--frozen", "0,1", *TIGHT,
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["frozen"] == [0, 1] and abs(data["e_corr"] - _pyscf_ecorr(
        WATER, "6-31g", frozen=[0, 1])) < 1e-8
    seen = {}
    monkeypatch.setattr(cli, "_cmd_ccsd", lambda args: seen.update(vars(args)) or 0)
    assert main(["ccsd"]) == 0
    assert (seen["conv_tol"], seen["conv_tol_normt"], seen["max_iter"]) == (
        RCCSD.conv_tol, RCCSD.conv_tol_normt, RCCSD.max_cycle) == (1e-7, 1e-5, 50)


def test_ccsd_t_prints_the_three_energies_and_the_triples_peak(tmp_path, capsys):
    """``--method "ccsd(t)"``: E(CCSD), E(T), E(CCSD(T)) and the (T) step's predicted and
    metered peak; E(T) against PySCF's ``ccsd_t`` on its own converged amplitudes."""
    out = tmp_path / "t.json"
    assert main(["ccsd", "--method", "ccsd(t)", "--atom", WATER, "--basis", "6-31g", *TIGHT,
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    m = re.search(r"^E\(CCSD\) = (-?\d+\.\d+)  E\(T\) = (-?\d\.\d+)  E\(CCSD\(T\)\) = "
                  r"(-?\d+\.\d+) Eh$", text, re.M)
    assert m, text
    mol = gto.M(atom=WATER, basis="6-31g", verbose=0)
    ref = cc.CCSD(scf.RHF(mol).run(conv_tol=1e-11))
    ref.conv_tol, ref.conv_tol_normt = 1e-10, 1e-8
    ref.kernel()
    e_t = ref.ccsd_t()
    assert abs(float(m.group(2)) - e_t) < 1e-9
    assert abs(float(m.group(3)) - (ref.e_tot + e_t)) < 1e-8
    peaks = re.search(r"\(T\) step: predicted peak (.+), metered (.+), program", text)
    assert peaks and peaks.group(1) == peaks.group(2)
    data = json.loads(out.read_text())["triples"]
    assert data["predicted_peak_bytes"] == data["metered_peak_bytes"]
    assert abs(data["e_t"] - e_t) < 1e-9
    # the ordered tuples of virtual blocks it ran over: C(n + 2, 3) of n blocks
    tuples = re.search(r"\(T\) over (\d+) ordered tuples of (\d+) virtual blocks of (\d+), "
                       r"(\d+) at a time", text)
    assert tuples, text
    n = int(tuples.group(2))
    assert int(tuples.group(1)) == data["tuples"] == n * (n + 1) * (n + 2) // 6
    assert (n - 1) * data["block"] < ref.nmo - ref.nocc <= n * data["block"]


def test_ccsd_t_of_an_open_shell_runs_the_unrestricted_triples(capsys):
    """The issue's command: OH/cc-pVDZ doublet, per-iteration lines, then E(T) equal to
    PySCF ``UCCSD(...).ccsd_t()`` on its own converged amplitudes."""
    atom = "O 0 0 0; H 0 0 0.97"
    assert main(["ccsd", "--atom", atom, "--spin", "1", "--basis", "cc-pvdz",
                 "--method", "ccsd(t)", *TIGHT]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^cycle = 1  E_corr\(CCSD\) = ", text, re.M), text
    m = re.search(r"E\(T\) = (-?\d\.\d+)", text)
    assert m, text
    mf = scf.UHF(gto.M(atom=atom, basis="cc-pvdz", spin=1, verbose=0)).run(conv_tol=1e-11)
    ref = cc.UCCSD(mf)
    ref.conv_tol, ref.conv_tol_normt = 1e-10, 1e-8
    ref.kernel()
    assert abs(float(m.group(1)) - ref.ccsd_t()) < 1e-9


def test_intermediates_are_refused_for_ccsdt(capsys):
    """``--intermediates`` reaches CCSDT, which evaluates its plain equations: a one-line
    error naming the way out, exit status 2, before any iteration."""
    assert main(["ccsd", "--atom", WATER, "--basis", "sto-3g", "--method", "ccsdt",
                 "--intermediates"]) == 2
    captured = capsys.readouterr()
    assert "intermediates=True is for closed-shell CCSD" in captured.err
    assert "cycle" not in captured.out
