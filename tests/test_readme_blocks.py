"""Every README code block runs as a script in a fresh process (issue 22, item 6).

Each ```python block is written to a file and run with this interpreter in a new process
(cwd: a temporary folder, so files it writes stay there). A block that does not import
``sequant_eval`` itself continues the nearest block above that does (the Dask example uses
the "Ten lines" names). The Dask block needs the ``dist`` extra (skipped when
``distributed`` does not import). Bash blocks: every ``sequant-eval`` command they show is a
subcommand whose ``--help`` runs, every ``pip install '.[extra]'`` names an extra of
``pyproject.toml``, and ``python -m pytest`` is what the test extra installs."""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
BASH = [code for lang, code in BLOCKS if lang == "bash"]


def _script(i: int) -> str:
    code = PYTHON[i]
    if "import sequant_eval" in code:
        return code
    base = next(PYTHON[j] for j in range(i - 1, -1, -1) if "import sequant_eval" in PYTHON[j])
    return base + "\n" + code


def _params():
    """One case per block (measured: 1.4 s, 7 s for the Dask block, 9 s for the CCSD one;
    all three under 20 s, so none is marked slow)."""
    for i in range(len(PYTHON)):
        yield pytest.param(i, id=f"python-{i}")


def test_the_readme_has_its_blocks():
    assert len(PYTHON) >= 3 and len(BASH) >= 2
    assert any('if __name__ == "__main__":' in code for code in PYTHON if "LocalCluster" in code)


@pytest.mark.parametrize("i", list(_params()))
def test_python_block_runs_as_a_script(i, tmp_path):
    script = _script(i)
    if "distributed" in script and importlib.util.find_spec("distributed") is None:
        pytest.skip("the Dask example needs the dist extra (pip install '.[dist]')")
    if "pyscf" in script and importlib.util.find_spec("pyscf") is None:
        pytest.skip("the CCSD example needs the chem extra")
    path = tmp_path / f"readme_block_{i}.py"
    path.write_text(script, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"README python block {i} failed:\n{done.stderr[-3000:]}"


def _commands():
    for code in BASH:
        for line in code.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part.strip())
                if words:
                    yield words


def test_bash_blocks_name_real_commands():
    import tomllib

    from sequant_eval.cli import main

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    seen = set()
    for words in _commands():
        seen.add(words[0])
        if words[:2] == ["pip", "install"]:
            for spec in words[2:]:
                found = re.fullmatch(r"\.\[([\w,-]+)\]", spec)
                assert found, f"README: pip install {spec!r} is not '.[extra]'"
                assert set(found.group(1).split(",")) <= set(extras), spec
        elif words[0] == "sequant-eval":
            with pytest.raises(SystemExit) as exit_:
                main([w for w in words[1:] if not w.startswith("-")] + ["--help"])
            assert exit_.value.code == 0, words
        elif words[:3] == ["python", "-m", "pytest"]:
            assert any(dep.startswith("pytest") for dep in extras["test"])
        else:
            raise AssertionError(f"README bash block runs {words!r}; teach this test about it")
    assert {"pip", "sequant-eval", "python"} <= seen
