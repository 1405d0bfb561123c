"""Logging, checkpoints and restart of the CC methods.

Oracles: the uninterrupted run of the same method (a restarted run takes the same steps,
so its energy is the same to rounding and its iterations continue the count); the
checkpoint file as written (what it holds, no temporary file left); the log records
themselves (PySCF's ``cycle = N  E_corr(CCSD) = ...`` shape). Water and its dimer at the
geometries below (Angstrom)."""
from __future__ import annotations

import copy
import json
import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("pyscf")

from sequant_eval.chem import CCSD, OnDisk  # noqa: E402
from sequant_eval.cli import main  # noqa: E402
from sequant_eval.errors import CheckpointError, CheckpointMismatch, UsageError  # noqa: E402

from tests.chem.references import TIGHT, WATER, rhf as _rhf  # noqa: E402



@pytest.fixture(scope="module")
def water():
    return _rhf("6-31g")


@pytest.fixture(scope="module")
def uninterrupted(water):
    return CCSD(water, **TIGHT).run()


def test_restart_continues_to_the_same_energy(water, uninterrupted, tmp_path):
    """A run stopped after 4 iterations (its checkpoint holds iteration 3's step: the
    last iteration takes none) and restarted reaches the uninterrupted energy and count."""
    chk = tmp_path / "ccsd.chk"
    part = CCSD(water, max_cycle=4, chkfile=chk, **TIGHT).run()
    assert not part.converged and chk.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["ccsd.chk"]     # no temporary left
    rest = CCSD(water, chkfile=chk, restart=True, **TIGHT).run()
    assert rest.converged and rest.iterations == uninterrupted.iterations
    assert rest.iterations_run == uninterrupted.iterations - 3
    assert abs(rest.e_corr - uninterrupted.e_corr) < 1e-12
    assert np.abs(rest.t2 - uninterrupted.t2).max() < 1e-10
    assert rest.result.history[3].iteration == 4 and "after the restart" in rest.summary()


def test_restart_out_of_core(water, uninterrupted, tmp_path):
    """Amplitudes and DIIS vectors on disk: copied into the checkpoint and back, slab by
    slab; the same energy."""
    chk = tmp_path / "ccsd.chk"
    CCSD(water, max_cycle=5, chkfile=chk, storage=OnDisk(tmp_path), **TIGHT).run().close()
    rest = CCSD(water, chkfile=chk, restart=True, storage=OnDisk(tmp_path), **TIGHT).run()
    rest.close()
    assert rest.iterations_run == rest.iterations - 4
    assert abs(rest.e_corr - uninterrupted.e_corr) < 1e-10


@pytest.fixture(scope="module")
def checkpoint(water, tmp_path_factory):
    chk = tmp_path_factory.mktemp("chk") / "water.chk"
    CCSD(water, max_cycle=3, chkfile=chk).run()
    return chk


@pytest.mark.parametrize("other, options, part", [
    ("sto-3g", {}, "the basis (checkpoint '6-31g', this run 'sto-3g')"),
    ("dimer", {}, "the molecule (checkpoint H2O, this run H4O2)"),
    ("moved", {}, "the geometry"),
    ("6-31g", {"frozen": 1}, "the frozen orbitals (checkpoint [], this run [0])"),
    ("6-31g", {"spin_orbital": True}, "the equations (checkpoint CCSD (closed-shell)"),
])
def test_a_checkpoint_of_another_system_is_refused(water, checkpoint, other, options, part):
    mf = {"sto-3g": lambda: _rhf("sto-3g"), "6-31g": lambda: water,
          "dimer": lambda: _rhf("6-31g", WATER + "; O 3 0 0.1173; H 3 0.7572 -0.4692; "
                                         "H 3 -0.7572 -0.4692"),
          "moved": lambda: _rhf("6-31g", WATER.replace("0.1173", "0.1273"))}[other]()
    with pytest.raises(CheckpointMismatch) as info:
        CCSD(mf, chkfile=checkpoint, restart=True, **options).run()
    assert part in str(info.value) and str(checkpoint) in str(info.value)
    assert any(d.startswith(part.split(" (")[0]) for d in info.value.differences)


def _with_orbitals(mf, change):
    out = copy.copy(mf)
    out.mo_coeff = change(mf.mo_coeff.copy())
    return out


def _flip(c):
    c[:, [2, 4, 7]] *= -1                 # two active occupied orbitals and a virtual
    return c


@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_orbitals_with_other_signs_are_the_same_system(water, uninterrupted, tmp_path,
                                                      storage):
    """An SCF may return an orbital with the other sign (another process, another
    eigensolver run): the amplitudes and DIIS vectors are read with the signs applied,
    and the solve continues with the same steps (oracle: the uninterrupted run's energy
    and iteration count; in memory and with both on disk, where they are copied in slabs
    and chunks)."""
    chk = tmp_path / "ccsd.chk"
    where = (lambda: {"storage": OnDisk(tmp_path)}) if storage == "disk" else dict
    CCSD(water, max_cycle=4, chkfile=chk, **where(), **TIGHT).run().close()
    flipped = _with_orbitals(water, _flip)
    rest = CCSD(flipped, chkfile=chk, restart=True, **where(), **TIGHT).run()
    rest.close()
    assert rest.iterations == uninterrupted.iterations and rest.iterations_run == \
        uninterrupted.iterations - 3
    assert abs(rest.e_corr - uninterrupted.e_corr) < 1e-10


def test_rotated_orbitals_are_refused(water, checkpoint):
    """Orbitals mixed by a rotation (0.01 rad between two virtuals) are another system."""
    def rotate(c):
        a, b = c[:, 6].copy(), c[:, 7].copy()
        c[:, 6], c[:, 7] = np.cos(.01) * a - np.sin(.01) * b, np.sin(.01) * a + np.cos(.01) * b
        return c

    with pytest.raises(CheckpointMismatch, match="the orbitals .*signs aside"):
        CCSD(_with_orbitals(water, rotate), chkfile=checkpoint, restart=True).run()


def test_restart_refusals(water, tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        CCSD(water, chkfile=tmp_path / "none.chk", restart=True).run()
    with pytest.raises(UsageError, match="needs chkfile"):
        CCSD(water, restart=True).run()
    bad = tmp_path / "bad.chk"
    bad.write_text("not hdf5")
    with pytest.raises(CheckpointError, match="cannot read"):
        CCSD(water, chkfile=bad, restart=True).run()


def test_a_damaged_checkpoint_is_a_checkpoint_error_wherever_the_damage(checkpoint,
                                                                         tmp_path):
    """One byte flipped at every 199th offset of a real checkpoint: opening it either gives
    the checkpoint (a byte nothing reads) or a CheckpointError. A flip in the HDF5
    structure raised h5py's KeyError, RuntimeError, or an OSError that restart reported as
    a failed write (a hostile-input probe, 2026-12-07). Oracle: the error type alone; at
    least one flip lands in the structure and one in a checksummed block."""
    from sequant_eval.chem.checkpoint import CheckpointCorrupt, open_checkpoint

    data = checkpoint.read_bytes()
    corrupt = set()
    for at in range(0, len(data), 199):
        damaged = bytearray(data)
        damaged[at] ^= 0x5A
        path = tmp_path / f"at{at}.chk"
        path.write_bytes(bytes(damaged))
        try:
            with open_checkpoint(path):
                pass
        except CheckpointCorrupt as err:
            corrupt.add("structure" if "cannot be read" in str(err) else "checksum")
        except CheckpointError:
            pass
        path.unlink()
    assert corrupt == {"structure", "checksum"}


# -------------------------------------------------------------------------- logging
def test_silent_unless_asked(water, capsys, caplog):
    """No output by default; an application's handler gets one INFO record per iteration
    and the final energies at NOTE; ``verbose=4`` prints them."""
    with caplog.at_level(logging.WARNING, logger="sequant_eval"):
        mycc = CCSD(water).run()
    assert capsys.readouterr().out == "" and not caplog.records
    with caplog.at_level(logging.INFO, logger="sequant_eval"):
        CCSD(water).run()
    cycles = [r for r in caplog.records if r.getMessage().startswith("cycle = ")]
    assert len(cycles) == mycc.iterations and all(r.levelno == logging.INFO for r in cycles)
    assert cycles[0].name == "sequant_eval.chem"
    assert caplog.records[-1].getMessage().startswith("E(CCSD) = ")
    assert caplog.records[-1].levelno == 25            # NOTE (another package may name 25)
    caplog.clear()
    loud = CCSD(water, verbose=4).run()            # its own energies: a second run may
    out = capsys.readouterr().out.splitlines()      # differ from the first in the last bit
    assert out[0].startswith("cycle = 1  E_corr(CCSD) = ") and "norm(t1,t2) = " in out[0]
    assert out[-2:] == ["CCSD converged", f"E(CCSD) = {loud.e_tot:.16g}  E_corr = "
                                          f"{loud.e_corr:.16g}"]
    CCSD(water, verbose=3).run()
    assert capsys.readouterr().out.splitlines()[0] == "CCSD converged"


def test_restart_from_one_checkpoint_writing_another(water, uninterrupted, tmp_path, capsys):
    """``restart=PATH`` (CLI ``--restart A --chkfile B``) continues from A and writes B; the
    CLI read B, found none and refused (a hostile-input probe, 2026-12-07). Oracle: the
    uninterrupted run's energy; A left as it was."""
    a, b = tmp_path / "a.chk", tmp_path / "b.chk"
    CCSD(water, max_cycle=4, chkfile=a, **TIGHT).run()
    before = a.read_bytes()
    rest = CCSD(water, chkfile=b, restart=a, **TIGHT).run()
    assert abs(rest.e_corr - uninterrupted.e_corr) < 1e-9
    assert b.is_file() and a.read_bytes() == before
    b.unlink()
    argv = ["ccsd", "--basis", "sto-3g", "--max-iter", "3", "--chkfile", str(a)]
    main(argv)
    assert main(["ccsd", "--basis", "sto-3g", "--restart", str(a), "--chkfile", str(b)]) == 0
    assert b.is_file()
    capsys.readouterr()


def test_a_file_that_is_not_a_checkpoint_is_not_written_over(water, tmp_path):
    """``chkfile=`` naming PySCF's SCF chkfile, or a text file, replaced it with the CC
    checkpoint (a hostile-input probe, 2026-12-07): refused before the run, the file as it
    was. An empty file and an earlier checkpoint of this package are written over."""
    from pyscf import lib

    scf_chk = tmp_path / "scf.chk"
    lib.chkfile.dump(str(scf_chk), "scf", {"e_tot": water.e_tot})
    text = tmp_path / "notes.txt"
    text.write_text("my notes")
    for path in (scf_chk, text):
        before = path.read_bytes()
        with pytest.raises(CheckpointError, match="is not a checkpoint of this package"):
            CCSD(water, chkfile=path, max_cycle=2).run()
        assert path.read_bytes() == before
    empty = tmp_path / "empty.chk"
    empty.write_bytes(b"")
    CCSD(water, chkfile=empty, max_cycle=2).run()
    CCSD(water, chkfile=empty, max_cycle=2).run()             # its own, written again
    assert empty.stat().st_size > 0


def test_another_mean_field_set_on_the_method_is_the_one_run():
    """``cc.mf = other`` kept the first mean field's integrals (its energy returned for the
    second; a hostile-input probe, 2026-12-07). Oracle: a method made on the second."""
    first, second = _rhf("6-31g"), _rhf("sto-3g")
    method = CCSD(first, **TIGHT)
    method.run()
    method.mf = second
    assert abs(method.run().e_corr - CCSD(second, **TIGHT).run().e_corr) < 1e-10


# -------------------------------------------------------------------------- the CLI, killed
#: Runs the CLI and kills its own process with SIGKILL as iteration ``N`` is logged (after
#: its checkpoint is written), so the test does not depend on timing.
KILLER = textwrap.dedent("""
    import logging, os, signal, sys
    from sequant_eval.cli import main

    class Kill(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("cycle = %d "):
                os.kill(os.getpid(), signal.SIGKILL)

    logging.getLogger("sequant_eval.chem").addHandler(Kill())
    sys.exit(main(sys.argv[1:]))
""")


def _killed_then_restarted(argv, tmp_path, capsys, after=3):
    chk = tmp_path / "run.chk"
    done = tmp_path / "uninterrupted.json"
    assert main([*argv, "--json", str(done)]) == 0
    full = json.loads(done.read_text())
    capsys.readouterr()
    proc = subprocess.run([sys.executable, "-c", KILLER % after, *argv, "--chkfile", str(chk)],
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert f"cycle = {after - 1} " in proc.stdout and f"cycle = {after} " not in proc.stdout
    again = tmp_path / "restarted.json"
    assert main([*argv, "--restart", str(chk), "--json", str(again)]) == 0
    text = capsys.readouterr().out
    rest = json.loads(again.read_text())
    assert f"restart from {chk} at iteration {after}" in text
    assert text.count("\ncycle = ") == rest["iterations_run"] == full["iterations"] - after
    assert rest["iterations"] == full["iterations"] and rest["converged"]
    assert abs(rest["e_corr"] - full["e_corr"]) < 1e-9
    return full, rest


def test_cli_killed_after_iteration_3_restarts_to_the_same_energy(tmp_path, capsys):
    """Closed-shell CCSD, H2O/6-31G."""
    _killed_then_restarted(["ccsd", "--atom", WATER, "--basis", "6-31g", "--conv-tol",
                            "1e-10", "--conv-tol-normt", "1e-8"], tmp_path, capsys)


@pytest.mark.slow
def test_cli_killed_after_iteration_3_restarts_the_water_dimer(tmp_path, capsys):
    """Closed-shell CCSD, (H2O)2/cc-pVDZ (the S22 geometry of ``--molecule water_dimer``)."""
    full, rest = _killed_then_restarted(["ccsd", "--molecule", "water_dimer", "--basis",
                                         "cc-pvdz", "--conv-tol", "1e-10",
                                         "--conv-tol-normt", "1e-8"], tmp_path, capsys)
    print(f"(H2O)2/cc-pVDZ: uninterrupted {full['iterations']} iterations, "
          f"E_corr {full['e_corr']:.12f}; restarted {rest['iterations_run']} iterations, "
          f"E_corr {rest['e_corr']:.12f}")
