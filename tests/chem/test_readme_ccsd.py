"""The README's CCSD example runs as printed (oracle: its own restarted run, which must end
at the energy of the run that wrote the checkpoint, and PySCF's conventions it names)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("pyscf")


def test_readme_ccsd_example_runs(tmp_path, monkeypatch, capsys):
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## Closed-shell CCSD from PySCF\n\n```python\n(.*?)```", text,
                     re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    cc, cc2, cc3 = scope["cc"], scope["cc2"], scope["cc3"]
    assert type(cc).__name__ == "RCCSD" and cc.converged and cc.report.loops
    assert scope["e_corr"] == cc.e_corr and scope["t2"] is cc.t2
    assert cc3.converged and cc3.iterations == cc2.iterations and cc3.iterations_run <= 1
    assert abs(cc3.e_corr - cc2.e_corr) < 1e-9 and abs(cc2.e_corr - cc.e_corr) < 1e-6
    out = capsys.readouterr().out
    assert out.count("\ncycle = ") == cc2.iterations and "CCSD converged" in out
