"""The main job (README's first command) runs and prints a converged energy and the memory
report; with a budget every residual stays within it."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("pyscf")

from sequant_eval.cli import main  # noqa: E402

#: Tighter than the default (PySCF's 1e-7, 1e-5), for eight digits of the energy.
TIGHT = ["--conv-tol", "1e-10", "--conv-tol-normt", "1e-8"]


@pytest.mark.parametrize("extra", [[], ["--budget", "50%"]])
def test_ccsd_command(capsys, extra):
    assert main(["ccsd", "--basis", "sto-3g", *TIGHT, *extra]) == 0
    text = capsys.readouterr().out
    assert "converged" in text and "E(corr)" in text
    assert re.search(r"E\(corr\)\s+= -0\.04943856\d+ Eh", text)     # PySCF GCCSD, STO-3G
    assert "-> equal" in text                     # measured peak == predicted peak
