"""``sequant-eval clean DIR``: what runs that are gone left is removed and printed, a live
run's scratch and files that are not the package's are left (issue 22, item 2).

The folder is laid out by hand: scratch files of a process id above any ``pid_max``
(4999999: never a running process, so the case does not depend on another process's
pace), of this process (alive), of a process on another host (a shared folder), an
integral file of the older format (never reused) and a current one written by a real run
(H2/STO-3G), and files of the user's that look alike."""
from __future__ import annotations

import json
import os
import socket

import pytest

pytest.importorskip("pyscf")
h5py = pytest.importorskip("h5py")

from pyscf import gto, scf  # noqa: E402

from sequant_eval.chem import CCSD  # noqa: E402
from sequant_eval.cli import main  # noqa: E402

GONE = 4999999


def _lock(folder, pid, host=None):
    (folder / f"sequant-eval-{pid}.lock").write_text(json.dumps(
        {"pid": pid, "host": host or socket.gethostname(), "start": None}))


@pytest.fixture
def folder(tmp_path):
    mf = scf.RHF(gto.M(atom="H 0 0 0; H 0 0 0.74", basis="sto-3g", verbose=0)).run()
    CCSD(mf, integrals_on_disk=tmp_path).run().close()
    (current,) = tmp_path.glob("integrals-*.h5")
    with h5py.File(tmp_path / "integrals-0123456789abcdef.h5", "w") as h5:
        h5.attrs["format"], h5.attrs["complete"] = 1, True              # an older version's
    _lock(tmp_path, GONE)
    for name in (f"amplitudes-{GONE}-1.h5", f"diis-{GONE}-1.h5",
                 f"integrals-fedcba9876543210.{GONE}.3.partial", f".run.chk.{GONE}.tmp"):
        (tmp_path / name).write_bytes(b"x" * 100)
    me = os.getpid()
    _lock(tmp_path, me)
    (tmp_path / f"amplitudes-{me}-7.h5").write_bytes(b"live")
    _lock(tmp_path, 4999998, host="elsewhere.example")
    (tmp_path / "diis-4999998-1.h5").write_bytes(b"another host's")
    for name in ("amplitudes.h5", "notes.txt", "run.chk"):
        (tmp_path / name).write_bytes(b"the user's")
    return tmp_path, current.name


def _listing(path):
    return sorted(p.name for p in path.iterdir())


def test_clean_removes_what_gone_runs_left(folder, capsys):
    path, current = folder
    mine = [f"sequant-eval-{os.getpid()}.lock", f"amplitudes-{os.getpid()}-7.h5",
            "sequant-eval-4999998.lock", "diis-4999998-1.h5"]
    user = ["amplitudes.h5", "notes.txt", "run.chk"]
    before = _listing(path)
    assert main(["clean", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would remove 6 files" in out and _listing(path) == before
    assert main(["clean", str(path)]) == 0
    out = capsys.readouterr().out
    assert _listing(path) == sorted([current, *mine, *user])
    for name in (f"amplitudes-{GONE}-1.h5", f"diis-{GONE}-1.h5", f".run.chk.{GONE}.tmp",
                 f"integrals-fedcba9876543210.{GONE}.3.partial", f"sequant-eval-{GONE}.lock"):
        assert f"removed {path / name} (" in out and f"run {GONE} is gone" in out
    assert f"removed {path / 'integrals-0123456789abcdef.h5'}" in out and "format 1" in out
    assert f"kept {path / f'amplitudes-{os.getpid()}-7.h5'}: " in out and "still running" in out
    assert "on host elsewhere.example" in out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("removed 6 files (") and lines[-1].endswith(f"from {path}")
    assert all(".lock" in line for line in lines[-4:-1])              # locks go last
    assert main(["clean", str(path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"nothing to remove in {path}"


def test_clean_all_removes_the_integral_files_too(folder, capsys):
    path, current = folder
    assert main(["clean", str(path), "--all"]) == 0
    out = capsys.readouterr().out
    assert f"removed {path / current} (" in out and "integral file (--all)" in out
    assert not list(path.glob("integrals-*"))
    assert (path / f"amplitudes-{os.getpid()}-7.h5").exists()           # a live run's: kept
    assert (path / "run.chk").exists() and (path / "amplitudes.h5").exists()


def test_clean_refusals(tmp_path, capsys):
    assert main(["clean", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no such folder" in err
    assert main(["clean", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"nothing to remove in {tmp_path}"


def test_a_reused_process_id_is_not_alive(tmp_path, capsys):
    """A lock naming this process's id with another start time (the killed run's id now
    belongs to another process): its files are stale (Linux, where /proc says when a
    process started)."""
    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("no /proc here")
    me = os.getpid()
    (tmp_path / f"sequant-eval-{me}.lock").write_text(json.dumps(
        {"pid": me, "host": socket.gethostname(), "start": "1"}))
    (tmp_path / f"diis-{me}-5.h5").write_bytes(b"old")
    assert main(["clean", str(tmp_path)]) == 0
    assert "another process's now" in capsys.readouterr().out
    assert _listing(tmp_path) == []
