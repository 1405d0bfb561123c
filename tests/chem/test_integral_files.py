"""Files the chemistry front end writes are content-addressed and verified (issue 22, item 2).

An integral file is named after what it is made of (not the bit-exact orbitals), carries a
header (format, description, orbitals, a checksum per block) and is reused only when all
of it verifies; scratch files go on every exit, and what a SIGKILLed run left is removed by
the next run. Oracles: PySCF's ``cc.CCSD`` on the same mean field (1e-8 at the tight
thresholds below) for a file that was tampered with; the package's own in-memory run on
the same mean field for orbitals PySCF would not be given (rotated or sign-flipped); the
folder's listing for what is left. H2O/6-31G and STO-3G (``tests/chem/references.py``).
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("pyscf")
h5py = pytest.importorskip("h5py")

from pyscf import cc as pyscf_cc  # noqa: E402

from sequant_eval.chem import CCSD  # noqa: E402
from sequant_eval.chem.checkpoint import CheckpointCorrupt  # noqa: E402
from sequant_eval.chem.on_disk import IntegralFile  # noqa: E402
from sequant_eval.cli import main  # noqa: E402
from sequant_eval.errors import CheckpointError, FileMismatch  # noqa: E402

from tests.chem.references import TIGHT, WATER, rhf  # noqa: E402


_MF: dict = {}


def _water(basis):
    if basis not in _MF:
        _MF[basis] = rhf(basis)
    return _MF[basis]


def _pyscf_energy(mf):
    key = ("pyscf", id(mf))
    if key not in _MF:
        mycc = pyscf_cc.CCSD(mf)
        mycc.conv_tol, mycc.conv_tol_normt = 1e-11, 1e-9
        mycc.kernel()
        assert mycc.converged
        _MF[key] = mycc.e_corr
    return _MF[key]


@pytest.fixture(scope="module")
def water():
    return _water("6-31g")


@pytest.fixture(scope="module")
def pyscf_energy(water):
    return _pyscf_energy(water)


#: The closed-shell equations on H2O/6-31G, the spin-orbital ones on H2O/STO-3G (fast).
KINDS = [pytest.param(False, "6-31g", id="closed-shell"),
         pytest.param(True, "sto-3g", id="spin-orbital")]


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def _one_integral_file(folder):
    names = _names(folder)
    assert len(names) == 1 and names[0].startswith("integrals-") and names[0].endswith(".h5"), \
        names
    return folder / names[0]


def _scale_every_block(path, factor):
    with h5py.File(path, "r+") as h5:
        for tensor in h5:
            if tensor == "header":
                continue
            for ds in h5[tensor].values():
                ds[...] = ds[()] * factor


def _run(mf, folder, **kw):
    mycc = CCSD(mf, integrals_on_disk=folder, **TIGHT, **kw).run()
    mycc.close()
    return mycc


@pytest.mark.parametrize("spin_orbital, basis", KINDS)
def test_a_modified_integral_file_is_rewritten(tmp_path, spin_orbital, basis):
    """Every block scaled by 1.01 between two runs of the same mf: the checksums say so,
    the file is written afresh, and the energy is PySCF's (it was -0.1382 for -0.1354
    when the file was trusted)."""
    water = _water(basis)
    pyscf_energy = _pyscf_energy(water)
    first = _run(water, tmp_path, spin_orbital=spin_orbital)
    assert first.integrals.status == "written" and not first.integrals.reused
    path = _one_integral_file(tmp_path)
    _scale_every_block(path, 1.01)
    second = _run(water, tmp_path, spin_orbital=spin_orbital)
    status = second.integrals.status
    assert status.startswith("rewritten") and "checksum differs" in status, status
    assert not second.integrals.reused
    assert abs(second.e_corr - pyscf_energy) < 1e-8
    assert "rewritten (block " in second.summary()
    assert _one_integral_file(tmp_path) == path
    third = _run(water, tmp_path, spin_orbital=spin_orbital)
    assert third.integrals.status == "reused, verified" and third.integrals.reused
    assert "reused, verified" in third.summary()
    assert abs(third.e_corr - pyscf_energy) < 1e-8


def test_two_identical_runs_reuse_one_file_and_leave_no_scratch(tmp_path, pyscf_energy):
    """Two separate SCF runs of one molecule (their orbitals are not compared bit for
    bit): one integral file, reused and verified by the second run, and nothing else."""
    runs = [_run(rhf("6-31g"), tmp_path) for _ in range(2)]
    assert [r.integrals.status for r in runs] == ["written", "reused, verified"]
    assert runs[0].integrals.path == runs[1].integrals.path
    _one_integral_file(tmp_path)
    for r in runs:
        assert abs(r.e_corr - pyscf_energy) < 1e-8
    data = runs[1].to_dict()["integrals_file"]
    assert data["status"] == "reused, verified" and data["removed_stale"] == []


def _with_orbitals(mf, change):
    out = copy.copy(mf)
    out.mo_coeff = change(mf.mo_coeff.copy())
    return out


def _flip(c):
    c[:, [2, 4, c.shape[1] - 1]] *= -1     # two active occupied orbitals and a virtual
    return c


def _rotate(c, angle=1e-4):
    a, b = c[:, 6].copy(), c[:, 7].copy()
    c[:, 6] = np.cos(angle) * a - np.sin(angle) * b
    c[:, 7] = np.sin(angle) * a + np.cos(angle) * b
    return c


@pytest.mark.parametrize("spin_orbital, basis", KINDS)
def test_orbitals_with_other_signs_reuse_the_file(tmp_path, spin_orbital, basis):
    """An SCF that returns three orbitals with the other sign reuses the file (the
    orbitals agree to 1e-8 with the signs aligned); the solve works in the file's
    orbitals and hands back amplitudes and residuals in the run's. Oracle: the in-memory
    run on the flipped mean field (energy, t1, t2, the residual at its amplitudes)."""
    water = _water(basis)
    _run(water, tmp_path, spin_orbital=spin_orbital)
    flipped = _with_orbitals(water, _flip)
    disk = CCSD(flipped, integrals_on_disk=tmp_path, spin_orbital=spin_orbital, **TIGHT).run()
    ref = CCSD(flipped, spin_orbital=spin_orbital, **TIGHT).run()
    assert disk.integrals.status == "reused, verified"
    assert f"{6 if spin_orbital else 3} orbitals' signs aligned" in disk.summary()
    assert abs(disk.e_corr - ref.e_corr) < 1e-10
    np.testing.assert_allclose(disk.t1, ref.t1, rtol=0, atol=1e-8)
    np.testing.assert_allclose(disk.t2, ref.t2, rtol=0, atol=1e-8)
    e_disk, *r_disk = disk.residual(ref.t1, ref.t2)
    e_mem, *r_mem = ref.residual(ref.t1, ref.t2)
    assert abs(e_disk - e_mem) < 1e-11
    for a, b in zip(r_disk, r_mem):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-11)
    # given amplitudes are taken into the file's orbitals: a solve from the converged
    # ones stops at once
    again = disk.kernel(ref.t1, ref.t2)
    assert disk.iterations <= 2 and abs(again[0] - ref.e_corr) < 1e-10
    disk.close()
    _one_integral_file(tmp_path)


def test_other_orbitals_rewrite_the_file(water, tmp_path):
    """Orbitals mixed by 1e-4 rad (another SCF solution, the same name): rewritten, and
    the energy is the in-memory run's on those orbitals."""
    _run(water, tmp_path)
    rotated = _with_orbitals(water, _rotate)
    disk = _run(rotated, tmp_path)
    assert disk.integrals.status.startswith("rewritten (the orbitals differ by up to")
    ref = CCSD(rotated, **TIGHT).run()
    assert abs(disk.e_corr - ref.e_corr) < 1e-10
    _one_integral_file(tmp_path)


@pytest.mark.parametrize("damage, reason", [
    (lambda h5: h5.attrs.__setitem__("format", 1), "format 1"),
    (lambda h5: h5.attrs.__setitem__("complete", False), "incomplete"),
    (lambda h5: h5["g"].__delitem__("a,a,i,i"), "block g{a,a,i,i} is missing"),
    (lambda h5: h5["g/a,i,a,i"].attrs.__delitem__("checksum"), "g{a,i,a,i} checksum"),
])
def test_a_header_that_does_not_match_is_never_used(water, pyscf_energy, tmp_path, damage,
                                                     reason):
    _run(water, tmp_path)
    path = _one_integral_file(tmp_path)
    with h5py.File(path, "r+") as h5:
        damage(h5)
    again = _run(water, tmp_path)
    assert again.integrals.status.startswith("rewritten") and reason in again.integrals.status
    assert abs(again.e_corr - pyscf_energy) < 1e-8


def test_an_unreadable_file_is_rewritten_and_verify_is_typed(water, pyscf_energy, tmp_path):
    """A file cut to half its size is unreadable: rewritten. ``verify()`` of an open file
    passes, and a FileMismatch names what differs once a block is changed."""
    first = _run(water, tmp_path)
    path = first.integrals.path
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    again = CCSD(water, integrals_on_disk=tmp_path, **TIGHT)
    assert again.integrals.status.startswith("rewritten (unreadable")
    again.integrals.verify()
    again.close()
    _scale_every_block(path, 1.01)
    reopened = IntegralFile(path, _closed_shell(water), h5py.File(path, "r"), "reused, verified")
    with pytest.raises(FileMismatch, match="checksum differs") as info:
        reopened.verify()
    assert info.value.path == path and info.value.reasons
    reopened.close()


def _closed_shell(mf):
    from sequant_eval.chem.closed_shell import ClosedShellIntegrals

    return ClosedShellIntegrals.from_scf(mf)


# ---------------------------------------------------------------------- any exit
def test_scratch_files_go_on_an_exception(water, tmp_path):
    """A callback that raises during the iterations (an error, then Ctrl-C): the
    amplitude and DIIS files and the lock are removed, the integral file stays."""
    for exc in (RuntimeError("stop"), KeyboardInterrupt()):
        def stop(record, seconds, peak, exc=exc):
            if record.iteration == 2:
                raise exc

        with pytest.raises(type(exc)):
            CCSD(water, integrals_on_disk=tmp_path, callback=stop).run()
        _one_integral_file(tmp_path)


def test_a_failure_while_writing_leaves_nothing(water, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("block_rows failed")

    monkeypatch.setattr("sequant_eval.chem.on_disk._write_block", boom)
    with pytest.raises(RuntimeError, match="block_rows failed"):
        CCSD(water, integrals_on_disk=tmp_path)
    assert _names(tmp_path) == []


# ---------------------------------------------------------------------- killed
#: The CLI, killed with SIGKILL by itself at a fixed point (no timing): as iteration 2 is
#: logged, or once the second block of the integral file is written; or sent SIGTERM as
#: iteration 2 is logged.
KILLER = textwrap.dedent("""
    import logging, os, signal, sys
    import sequant_eval.chem.on_disk as on_disk
    from sequant_eval.cli import main

    where = sys.argv.pop(1)
    if where in ("iterations", "sigterm"):
        sig = signal.SIGKILL if where == "iterations" else signal.SIGTERM
        class Kill(logging.Handler):
            def emit(self, record):
                if record.getMessage().startswith("cycle = 2 "):
                    os.kill(os.getpid(), sig)
        logging.getLogger("sequant_eval.chem").addHandler(Kill())
    else:
        real, written = on_disk._write_block, []
        def write_then_die(*args, **kwargs):
            real(*args, **kwargs)
            written.append(1)
            if len(written) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
        on_disk._write_block = write_then_die
    sys.exit(main(sys.argv[1:]))
""")

ARGV = ["ccsd", "--atom", WATER, "--basis", "sto-3g", "--conv-tol", "1e-10",
        "--conv-tol-normt", "1e-8"]


@pytest.mark.parametrize("where, left", [
    ("iterations", {"integrals-", "amplitudes-", "diis-", "sequant-eval-"}),
    ("writing", {"integrals-", "sequant-eval-"}),
])
def test_what_a_killed_run_leaves_the_next_run_removes(tmp_path, capsys, where, left):
    """SIGKILL during the iterations (the amplitude and DIIS files, the lock) or while the
    integral file is written (its .partial, the lock): the next run removes them, says
    so, and leaves one integral file; the energy is PySCF's (-0.04943856 Eh, water/STO-3G,
    as in test_out_of_core.py)."""
    folder = tmp_path / "integrals"
    folder.mkdir()
    proc = subprocess.run([sys.executable, "-c", KILLER, where, *ARGV, "--integrals-on-disk",
                           str(folder)], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    names = _names(folder)
    kinds = {next(k for k in ("sequant-eval-", "integrals-", "amplitudes-", "diis-")
                  if n.startswith(k)) for n in names}
    assert kinds == left, names
    if where == "writing":
        assert any(n.endswith(".partial") for n in names) and not any(
            n.endswith(".h5") for n in names)
    out = tmp_path / "next.json"
    assert main([*ARGV, "--integrals-on-disk", str(folder), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    removed = len(names) - (1 if where == "iterations" else 0)
    assert f"removed {removed} stale scratch files" in text
    assert data["integrals_file"]["status"] == ("reused, verified" if where == "iterations"
                                                else "written")
    assert len(data["integrals_file"]["removed_stale"]) == removed
    assert abs(data["e_corr"] - (-0.04943856)) < 1e-8
    _one_integral_file(folder)


def test_sigterm_is_an_ordinary_exit(tmp_path):
    """``kill PID`` (SIGTERM) during the iterations: exit status 143, the scratch files
    and the lock removed on the way out, the integral file kept."""
    proc = subprocess.run([sys.executable, "-c", KILLER, "sigterm", *ARGV,
                           "--integrals-on-disk", str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 143, proc.stderr
    assert "cycle = 1 " in proc.stdout and "cycle = 3 " not in proc.stdout
    assert "Traceback" not in proc.stderr
    _one_integral_file(tmp_path)


# ---------------------------------------------------------------------- checkpoints
def test_a_modified_checkpoint_is_refused(water, tmp_path, capsys):
    """The checkpoint's t2 scaled by 1.01: restart refuses it (CheckpointCorrupt, a
    CheckpointError and a FileMismatch), the CLI in one line with exit 2."""
    chk = tmp_path / "run.chk"
    CCSD(water, max_cycle=3, chkfile=chk).run()
    with h5py.File(chk, "r+") as h5:
        h5["amplitudes/t2"][...] = h5["amplitudes/t2"][()] * 1.01
    with pytest.raises(CheckpointCorrupt, match="amplitudes/t2") as info:
        CCSD(water, chkfile=chk, restart=True).run()
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, FileMismatch)
    code = main(["ccsd", "--atom", WATER, "--basis", "6-31g", "--restart", str(chk)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not verify" in err


def test_a_killed_checkpoint_writes_temporary_is_removed(water, tmp_path):
    """A ``.NAME.PID.tmp`` of a process that is gone beside the checkpoint (a run killed
    while writing it) is removed by the next run writing that checkpoint; one of a live
    process (this one's parent) is not."""
    chk = tmp_path / "run.chk"
    dead = tmp_path / ".run.chk.4999999.tmp"          # above any pid_max: never a process
    live = tmp_path / f".run.chk.{os.getppid()}.tmp"
    dead.write_bytes(b"half a checkpoint")
    live.write_bytes(b"being written")
    CCSD(water, max_cycle=2, chkfile=chk).run()
    assert _names(tmp_path) == sorted([live.name, "run.chk"])
