"""The command line: every mistake is one line on stderr and exit status 2, no traceback;
``analyze`` takes the policy flags of ``report``; ``--version``; ``--plot`` refuses before
any work without matplotlib; ``snapshots`` says it is a development command outside a
source checkout.

Runs ``main([...])`` in-process. Oracles: the file system and the inputs as written (which
file is missing, which flag is malformed), and for the JSON outputs the Python API
(``se.analyze``) on the same equations and extents.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import sequant_eval as se
from sequant_eval.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "water20"
SMALL = ("R{a_1;i_1} = f{a_1;a_2} * t{a_2;i_1} + g{a_1,i_2;i_1,a_3} * t{a_3;i_2}\n"
         "E = g{i_1;a_1} * t{a_1;i_1}\n")
EXTENTS = {"i": 4, "a": 6}
EXT = ["--extent", "i=4", "--extent", "a=6"]


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.txt"
    path.write_text(SMALL, encoding="utf-8")
    return path


@pytest.fixture
def regime(tmp_path) -> Path:
    path = tmp_path / "regime.json"
    path.write_text(json.dumps({"name": "tiny", "extents": EXTENTS}), encoding="utf-8")
    return path


def _run(argv, capsys):
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as stop:              # argparse: --version, usage mistakes
        rc = stop.code
    out, err = capsys.readouterr()
    return rc, out, err


def _refused(argv, capsys, *words):
    """Exit 2, one line on stderr naming the culprit, nothing on stdout, no traceback."""
    rc, out, err = _run(argv, capsys)
    assert rc == 2, (rc, out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("sequant-eval") and "error: " in err, err
    assert "Traceback" not in err and out == "", (out, err)
    for word in words:
        assert word in err, err
    return err


# -- FILE arguments ------------------------------------------------------------------------

def test_missing_file(tmp_path, capsys):
    _refused(["analyze", tmp_path / "nope.txt", *EXT], capsys, "nope.txt", "no such file")


def test_directory_as_file(tmp_path, capsys):
    _refused(["analyze", tmp_path, *EXT], capsys, str(tmp_path), "is a directory")


def test_non_utf8_file(tmp_path, capsys):
    path = tmp_path / "latin1.txt"
    path.write_bytes("R{a_1;i_1} = µ f{a_1;i_1}".encode("latin-1"))
    _refused(["analyze", path, *EXT], capsys, "latin1.txt", "not UTF-8", "0xb5")


def test_parse_error_names_the_file_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.txt"
    path.write_text("E = g{i_1;a_1} * t{a_1;i_1}\nR{a_1;i_1} = f{a_1;i²}\n", encoding="utf-8")
    _refused(["analyze", path, *EXT], capsys, "bad.txt: line 2, column 21", "SUPERSCRIPT TWO")


def test_duplicate_results_across_files(tmp_path, small, capsys):
    other = tmp_path / "other.txt"
    other.write_text("E = 2 g{i_1;a_1} * t{a_1;i_1}\n", encoding="utf-8")
    _refused(["analyze", small, other, *EXT], capsys, "result E", "small.txt", "other.txt")


# -- flags ---------------------------------------------------------------------------------

def test_malformed_budget(small, capsys):
    _refused(["analyze", small, *EXT, "--budget", "1.2.3"], capsys, "--budget: budget '1.2.3'",
             "is not a byte count")


def test_malformed_budget_in_report(small, regime, capsys):
    _refused(["report", small, "--regime", regime, "--budget", "."], capsys, "--budget: budget '.'")


def test_malformed_extent(small, capsys):
    _refused(["analyze", small, "--extent", "i=²", "--extent", "a=6"], capsys, "--extent",
             "'i=²'")


def test_an_extent_given_twice_is_refused(small, capsys):
    """It took the last value silently (a hostile-input probe, 2026-12-07)."""
    _refused(["analyze", small, "--extent", "i=4", "--extent", "a=6", "--extent", "i=5"],
             capsys, "--extent gives space 'i' twice", "i=4 and i=5")


def test_analyze_without_extents(small, capsys):
    _refused(["analyze", small], capsys, "--extent SPACE=N", "--regime")


def test_unknown_space_in_a_policy_flag(small, capsys):
    _refused(["analyze", small, *EXT, "--budget", "2KB", "--contracted", "x"], capsys,
             "contracted names space 'x'", "known: i, a")


def test_malformed_block(small, capsys):
    _refused(["analyze", small, *EXT, "--budget", "2KB", "--block", "i=0"], capsys, "--block")


def test_unknown_option_is_one_line(small, capsys):
    _refused(["analyze", small, *EXT, "--bogus"], capsys, "--bogus")


def test_no_command_shows_help_and_exits_2(capsys):
    rc, out, _ = _run([], capsys)
    assert rc == 2 and "usage" in out


# -- --regime ------------------------------------------------------------------------------

def test_missing_regime(small, tmp_path, capsys):
    _refused(["report", small, "--regime", tmp_path / "none.json", "--budget", "1GB"], capsys,
             "none.json", "no such file")


def test_invalid_regime_json(small, tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text('{"extents": {"i": 4,}', encoding="utf-8")
    _refused(["report", small, "--regime", path, "--budget", "1GB"], capsys, "broken.json",
             "not valid JSON", "line 1")


def test_regime_without_extents(small, tmp_path, capsys):
    path = tmp_path / "noext.json"
    path.write_text('{"name": "x", "power_means": {}}', encoding="utf-8")
    _refused(["report", small, "--regime", path, "--budget", "1GB"], capsys, "noext.json",
             '"extents"')


def test_regime_with_a_bad_extent(small, tmp_path, capsys):
    path = tmp_path / "neg.json"
    path.write_text('{"extents": {"i": 4, "a": -6}}', encoding="utf-8")
    _refused(["analyze", small, "--regime", path], capsys, "neg.json", "'a'", "-6")


# -- outputs -------------------------------------------------------------------------------

def test_json_into_a_missing_directory(small, regime, tmp_path, capsys):
    target = tmp_path / "missing" / "r.json"
    _refused(["report", small, "--regime", regime, "--budget", "2KB", "--json", target],
             capsys, "--json", "does not exist")
    assert not target.parent.exists()


def test_plot_into_a_missing_directory(small, regime, tmp_path, capsys):
    _refused(["report", small, "--regime", regime, "--budget", "2KB", "--plot",
              tmp_path / "missing" / "r.png"], capsys, "--plot", "does not exist")


def test_analyze_json_into_a_missing_directory(small, tmp_path, capsys):
    _refused(["analyze", small, *EXT, "--json", tmp_path / "no" / "a.json"], capsys, "--json")


def test_plot_without_matplotlib_refuses_before_any_work(small, regime, tmp_path, capsys,
                                                        monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)    # find_spec → None: "not installed"
    target = tmp_path / "r.png"
    _refused(["report", small, "--regime", regime, "--budget", "2KB", "--plot", target],
             capsys, "matplotlib", "pip install 'sequant-eval[plot]'")
    assert not target.exists()


# -- what works ----------------------------------------------------------------------------

def test_version(capsys):
    rc, out, _ = _run(["--version"], capsys)
    assert rc == 0 and out.strip() == f"sequant-eval {se.__version__}"


def test_analyze_takes_the_policy_flags_and_writes_json(small, regime, tmp_path, capsys):
    """Oracle: se.analyze with the same equations, extents and BatchPolicy."""
    out_json = tmp_path / "a.json"
    rc, out, err = _run(["analyze", small, "--regime", regime, "--budget", "2KB",
                         "--contracted", "i", "--external", "a", "--block", "i=1,a=2",
                         "--arrays-only", "--json", out_json], capsys)
    assert rc == 0, err
    eqs = se.parse(SMALL)
    policy = se.BatchPolicy(2000, contracted={"i"}, external={"a"}, block={"i": 1, "a": 2},
                            program=False)
    ref = se.analyze(eqs, EXTENTS, policy=policy)
    assert out == ref.dump()
    data = json.loads(out_json.read_text(encoding="utf-8"))
    assert data["peak_bytes"] == ref.peak_bytes <= 2000
    assert data["flops"] == ref.flops and data["extents"] == EXTENTS
    assert data["memory"]["budget_bytes"] == 2000


def test_analyze_share_budget_is_a_share_of_the_unbatched_peak(small, tmp_path, capsys):
    """Oracle: se.analyze at 50 % of se.analyze's unbatched peak."""
    out_json = tmp_path / "a.json"
    rc, _, err = _run(["analyze", small, *EXT, "--budget", "50%", "--json", out_json], capsys)
    assert rc == 0, err
    top = se.analyze(SMALL, EXTENTS).peak_bytes
    reserve = se.Evaluator(SMALL, EXTENTS).program_reserve()       # the program on top
    data = json.loads(out_json.read_text(encoding="utf-8"))
    assert data["memory"]["budget_bytes"] == top * 0.5 + reserve
    assert data["memory"]["program_bytes"] == reserve > 0
    assert data["peak_bytes"] == se.analyze(SMALL, EXTENTS,
                                            budget=top * 0.5 + reserve).peak_bytes <= top * 0.5


def test_report_share_budget(capsys, tmp_path):
    """Oracle: the report command at the byte budget 50 % of the unbatched peak names."""
    energy = DATA / "csv_ccsd_energy_df.txt"
    ev = se.Evaluator(energy.read_text(encoding="utf-8"),
                      se.plan.regime.load_regime(DATA / "regime.json"))
    top, reserve = ev.analyze().peak_bytes, ev.program_reserve()   # 50 %: the program on top
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    rc1, _, err = _run(["report", energy, "--regime", DATA / "regime.json", "--budget", "50%",
                        "--contracted", "Κ", "--json", a], capsys)
    rc2, _, _ = _run(["report", energy, "--regime", DATA / "regime.json", "--budget",
                      repr(0.5 * top + reserve), "--contracted", "Κ", "--json", b], capsys)
    assert rc1 == rc2 == 0, err
    assert json.loads(a.read_text()) == json.loads(b.read_text())


def test_snapshots_outside_a_checkout_says_it_is_a_development_command(tmp_path, capsys,
                                                                       monkeypatch):
    """As from a wheel: the module lives in site-packages and the cwd is no checkout."""
    from sequant_eval import checkout

    fake = tmp_path / "site-packages" / "sequant_eval" / "checkout.py"
    monkeypatch.setattr(checkout, "__file__", str(fake))
    monkeypatch.chdir(tmp_path)
    _refused(["snapshots"], capsys, "development command", "source checkout")
    _refused(["snapshots", "--update"], capsys, "development command")
    assert not (tmp_path / "site-packages" / "schedules").exists()


def test_snapshots_from_the_checkout_directory(tmp_path, capsys, monkeypatch):
    """As from a wheel run at the repository root: the checkout is the current directory."""
    from sequant_eval import checkout

    monkeypatch.setattr(checkout, "__file__", str(tmp_path / "x" / "checkout.py"))
    monkeypatch.chdir(ROOT)
    assert checkout.source_root() == ROOT
    assert checkout.load_tool("snapshots")._dir(None) == ROOT / "schedules"


def test_analyze_prints_the_smallest_feasible_budget(tmp_path, capsys):
    """Oracle: se.min_budget on the same equations and extents."""
    path = tmp_path / "small.txt"
    path.write_text("R{a_1;i_1} = f{a_1;a_2} * t{a_2;i_1} + g{a_1,i_2;i_1,a_3} * t{a_3;i_2}\n",
                    encoding="utf-8")
    assert main(["analyze", str(path), "--extent", "i=4", "--extent", "a=6",
                 "--min-budget"]) == 0
    need = se.min_budget(se.parse(path.read_text(encoding="utf-8"), default_name="small"),
                         {"i": 4, "a": 6})
    assert f"({need} B)" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--atom", "H 0 0 0; H 0 0 0"], ["--charge", "-100"]])
def test_ccsd_with_an_impossible_molecule_is_one_line(argv, capsys):
    """PySCF's own failures (singular overlap, too many electrons) become one-line errors."""
    pytest.importorskip("pyscf")
    assert main(["ccsd", "--basis", "sto-3g", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("sequant-eval: error:") and "Traceback" not in "\n".join(err)


def test_an_infeasible_budget_names_the_number_and_the_flags(small, capsys):
    """Oracle: se.min_budget on the same equations and extents (the number printed); no
    Python names (InfeasibleBudget.minimum, BatchPolicy) in a command-line message."""
    rc, out, err = _run(["analyze", small, *EXT, "--budget", "100"], capsys)
    need = se.min_budget(se.parse(SMALL), EXTENTS)
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("sequant-eval: error: --budget 100: 100 B is below the smallest "
                          "budget that works, ") and f"give --budget {need} or more" in err
    assert "--block SPACE=N" in err
    assert "InfeasibleBudget" not in err and "BatchPolicy" not in err and "se." not in err
