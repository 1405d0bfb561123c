"""Every fault is a typed error, and from the command line one line on stderr with its own
exit status (``sequant_eval.cli.EXIT_CODES``): 2 a usage mistake or refused input, 3 an I/O
failure (disk full, a read-only folder), never 1 (not converged). Issue 22, item 4.

Disk full is simulated (an ``OSError(ENOSPC)`` from a write the run makes); a read-only
folder is simulated the same way (``EROFS``, with the cleanup's own ``unlink`` failing too),
and, where the platform allows (root with ``mount``), also a real read-only tmpfs."""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyscf")
pytest.importorskip("h5py")

from pyscf import gto, scf  # noqa: E402

import sequant_eval.chem as sc  # noqa: E402
from sequant_eval.cli import EXIT_CODES, main  # noqa: E402
from sequant_eval.errors import (ClosedError, InputTypeError, OptionError,  # noqa: E402
                                 PolicyError, StorageError, UnsupportedFeature)

WATER = "O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469"
H2 = "H 0 0 0; H 0 0 0.74"


def _cli(argv, capsys):
    """``(exit status, stderr)`` of ``sequant-eval ARGV``; argparse's refusals included."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def _one_line(err: str, culprit: str) -> None:
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and culprit in err, err


@pytest.fixture(scope="module")
def h2():
    return scf.RHF(gto.M(atom=H2, basis="6-31g", verbose=0)).run(conv_tol=1e-11)


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_while_writing_integrals(tmp_path, monkeypatch, capsys):
    """ENOSPC while the integral file is written: exit 3, one line, no ``.partial`` left."""
    monkeypatch.setattr("sequant_eval.chem.on_disk._write_block", _enospc)
    code, err = _cli(["ccsd", "--atom", H2, "--basis", "6-31g", "--integrals-on-disk",
                      str(tmp_path)], capsys)
    assert code == 3
    _one_line(err, "disk is full")
    assert list(tmp_path.iterdir()) == []


def test_disk_full_during_the_iterations(tmp_path, monkeypatch, h2, capsys):
    """ENOSPC from the amplitude file during the solve: a StorageError (errno 28) from the
    API, exit 3 from the CLI; the scratch files are removed."""
    monkeypatch.setattr("sequant_eval.chem.on_disk.AmplitudeFile.mp2_guess", _enospc)
    with pytest.raises(StorageError, match="disk is full") as info:
        sc.CCSD(h2, integrals_on_disk=tmp_path).run()
    assert info.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("integrals-")] == []
    code, err = _cli(["ccsd", "--atom", H2, "--basis", "6-31g", "--integrals-on-disk",
                      str(tmp_path)], capsys)
    assert code == 3
    _one_line(err, "disk is full")


def test_disk_full_writing_the_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sequant_eval.chem.checkpoint._copy_block", _enospc)
    code, err = _cli(["ccsd", "--atom", H2, "--basis", "6-31g", "--chkfile",
                      str(tmp_path / "run.chk")], capsys)
    assert code == 3
    _one_line(err, "checkpoint")
    assert list(tmp_path.iterdir()) == []


def test_read_only_folder_cleanup_does_not_hide_the_error(tmp_path, monkeypatch, capsys):
    """A read-only folder: creating the file fails with EROFS and so does every unlink (a
    read-only mount); the error is the write's, exit 3."""
    import h5py

    real = h5py.File

    def read_only(name, mode="r", *args, **kwargs):
        if mode != "r":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(name))
        return real(name, mode, *args, **kwargs)

    def unlink(self, missing_ok=False):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(h5py, "File", read_only)
    monkeypatch.setattr(Path, "unlink", unlink)
    for flag, target in (("--integrals-on-disk", str(tmp_path)),
                         ("--chkfile", str(tmp_path / "run.chk"))):
        code, err = _cli(["ccsd", "--atom", H2, "--basis", "6-31g", flag, target], capsys)
        assert code == 3, err
        _one_line(err, "read-only")


@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only tmpfs (root and ``mount`` needed; skipped otherwise)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_real_read_only_folder(read_only_mount, capsys):
    for flag, target in (("--integrals-on-disk", str(read_only_mount)),
                         ("--chkfile", str(read_only_mount / "run.chk"))):
        code, err = _cli(["ccsd", "--atom", H2, "--basis", "6-31g", flag, target], capsys)
        assert code == 3, err
        _one_line(err, "read-only")


def test_a_real_full_disk(tmp_path, capsys):
    """A 64 KiB tmpfs cannot hold water/cc-pVDZ's integral file: exit 3, nothing left."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        code, err = _cli(["ccsd", "--atom", WATER, "--basis", "cc-pvdz", "--integrals-on-disk",
                          str(folder)], capsys)
        assert code == 3, err
        _one_line(err, "disk is full")
        assert list(folder.iterdir()) == []
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_run_after_close_is_a_typed_error(tmp_path, h2):
    mycc = sc.CCSD(h2, integrals_on_disk=tmp_path)
    mycc.run()
    mycc.close()
    with pytest.raises(ClosedError, match="was closed"):
        mycc.run()


@pytest.mark.parametrize("beam, error", [("x", InputTypeError), (None, InputTypeError),
                                         (2.5, InputTypeError), (True, InputTypeError),
                                         (0, PolicyError), (-3, PolicyError)])
def test_factor_common_beam_is_checked(beam, error):
    from sequant_eval.expr.factor import factor_common

    with pytest.raises(error, match="beam"):
        factor_common("R{i;a} = f{i;a}", {"i": 2, "a": 3}, beam=beam)


def test_no_virtual_orbitals(capsys):
    """He/STO-3G has one orbital, occupied: said so, not an extent error."""
    mf = scf.RHF(gto.M(atom="He 0 0 0", basis="sto-3g", verbose=0)).run()
    for kw in ({}, {"spin_orbital": True}):
        with pytest.raises(UnsupportedFeature, match="no virtual orbitals"):
            sc.CCSD(mf, **kw)
    code, err = _cli(["ccsd", "--atom", "He 0 0 0", "--basis", "sto-3g"], capsys)
    assert code == 2
    _one_line(err, "no virtual orbitals")


@pytest.mark.parametrize("mf", [{}, {"mol": 1}, None, "rhf"])
def test_not_a_mean_field(mf):
    for make in (sc.CCSD, sc.RCCSD, sc.GCCSD, sc.CCSDT):
        with pytest.raises(InputTypeError, match="not a PySCF SCF object"):
            make(mf)


@pytest.mark.parametrize("atom", ["Xx 0 0 0; H 0 0 1", "Q 0 0 0", "H 0 0 0; Zz 0 0 1"])
def test_unknown_element(atom, capsys):
    code, err = _cli(["ccsd", "--atom", atom, "--basis", "sto-3g"], capsys)
    assert code == 2
    _one_line(err, "unknown element")


def test_xyz_directory_and_count_line(tmp_path, capsys):
    code, err = _cli(["ccsd", "--xyz", str(tmp_path)], capsys)
    assert code == 2
    _one_line(err, "is a directory")
    for count in (1, 3):
        xyz = tmp_path / f"h2-{count}.xyz"
        xyz.write_text(f"{count}\nhydrogen\nH 0 0 0\nH 0 0 0.74\n")
        code, err = _cli(["ccsd", "--xyz", str(xyz), "--basis", "sto-3g"], capsys)
        assert code == 2
        _one_line(err, f"announces {count} atoms")


@pytest.mark.parametrize("option, value", [("conv_tol", float("inf")), ("conv_tol", 0.0),
                                           ("conv_tol", float("nan")), ("conv_tol", "1e-7"),
                                           ("conv_tol_normt", float("inf")),
                                           ("max_cycle", 0), ("max_cycle", 2.5),
                                           ("diis_space", -1)])
def test_convergence_options_are_checked(h2, option, value):
    """Refused before the solve: not a NaN energy or a wrong "converged"."""
    mycc = sc.CCSD(h2)
    setattr(mycc, option, value)
    with pytest.raises(OptionError, match=option):
        mycc.run()
    with pytest.raises(OptionError, match=option):
        sc.CCSD(h2, **{option: value}).run()


def test_exit_codes_are_in_the_help(capsys):
    for argv in (["--help"], ["ccsd", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())
        assert "exit status:" in out and "3 I/O failure" in out and "1 ccsd: not converged" in out
    assert set(EXIT_CODES) == {0, 1, 2, 3}
