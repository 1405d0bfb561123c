"""One budget, one refusal: the same bad budgets given to ``CCSD(mf, budget=...)``, to
``Budget.parse``, to the API (``se.Evaluator``, ``se.evaluate``, ``se.analyze``) and to the
command line (``ccsd`` and ``analyze``) are the same
``BudgetError`` with the same message (the command line leads it with the flag). Oracle:
the message ``Budget.parse`` gives, as written in ``sequant_eval/budget.py``."""
from __future__ import annotations

import pytest

pytest.importorskip("pyscf")

from pyscf import gto, scf  # noqa: E402

import sequant_eval as se  # noqa: E402
import sequant_eval.cli as cli  # noqa: E402
from sequant_eval.budget import Budget  # noqa: E402
from sequant_eval.chem import CCSD  # noqa: E402
from sequant_eval.errors import BudgetError  # noqa: E402

BAD = ["lots", "1.2.3", "0%", "-1MB", "0", "nan", "5 parsecs"]


@pytest.fixture(scope="module")
def water():
    return scf.RHF(gto.M(atom="O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469",
                         basis="sto-3g", verbose=0)).run()


def _cli(argv, capsys):
    rc = cli.main(argv)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("bad", BAD)
def test_the_same_bad_budget_is_the_same_error_everywhere(bad, water, capsys, tmp_path):
    with pytest.raises(BudgetError) as parsed:
        Budget.parse(bad)
    with pytest.raises(BudgetError) as method:
        CCSD(water, budget=bad)
    mycc = CCSD(water)
    with pytest.raises(BudgetError) as attribute:
        mycc.budget = bad
    eqs, ext = se.parse("E = g{i_1;a_1} * t{a_1;i_1}"), {"i": 2, "a": 3}
    for call in (lambda: se.Evaluator(eqs, ext, budget=bad),
                 lambda: se.evaluate(eqs, {}, ext, budget=bad),
                 lambda: se.analyze(eqs, ext, budget=bad)):
        with pytest.raises(BudgetError) as api:
            call()
        assert str(api.value) == str(parsed.value)
    assert str(method.value) == str(parsed.value) == str(attribute.value)
    assert method.value.value == bad
    line = f"sequant-eval: error: --budget: {method.value}\n"
    rc, err = _cli(["ccsd", "--basis", "sto-3g", f"--budget={bad}"], capsys)
    assert rc == 2 and err == line
    eq = tmp_path / "e.txt"
    eq.write_text("E = g{i_1;a_1} * t{a_1;i_1}\n", encoding="utf-8")
    rc, err = _cli(["analyze", str(eq), "--extent", "i=2", "--extent", "a=3",
                    f"--budget={bad}"], capsys)
    assert rc == 2 and err == line


def test_the_command_line_raises_the_same_type():
    """In process, the flag's refusal is a BudgetError too (what ``main`` prints)."""
    with pytest.raises(BudgetError, match=r"^--budget: budget 'lots' is not"):
        cli._flag_budget("lots")


def test_bad_max_memory_is_a_budget_error(water):
    with pytest.raises(BudgetError, match="max_memory"):
        CCSD(water, max_memory=-5)
