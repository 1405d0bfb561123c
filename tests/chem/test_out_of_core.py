"""Out-of-core CCSD: integral blocks written once to HDF5 in slabs and read per batch.

Oracles, all computed in the test: the in-memory integral classes' own blocks
(``SpinOrbitalIntegrals.eri``, ``ClosedShellIntegrals.eri`` / ``exchange``) for the file's
contents; the unbatched in-memory CCSD of the same equations for the out-of-core energy;
the in-memory ``DIIS`` solver for the on-disk one; PySCF GCCSD's water/STO-3G correlation
energy (-0.04943856 Eh, as in ``test_cli_ccsd.py``) for the command line. Geometry: the
package's ``water`` (``chem/molecules.py``).
"""
from __future__ import annotations

import gc
import json
import re
import tracemalloc
import weakref

import numpy as np
import pytest

pytest.importorskip("pyscf")
h5py = pytest.importorskip("h5py")

from pyscf import scf  # noqa: E402

import sequant_eval as se  # noqa: E402
from sequant_eval.chem import CCSD  # noqa: E402
from sequant_eval.chem.closed_shell import ClosedShellIntegrals  # noqa: E402
from sequant_eval.chem.equations import ccsd_equations  # noqa: E402
from sequant_eval.chem.integrals import SpinOrbitalIntegrals  # noqa: E402
from sequant_eval.chem.molecules import build_molecule  # noqa: E402
from sequant_eval.chem.on_disk import AmplitudeFile, IntegralFile, integral_blocks  # noqa: E402
from sequant_eval.chem.solver import (DIIS, HDF5DIIS, OrbitalDenominators, mp2_guess,  # noqa: E402
                                      orbital_denominators, solve_cc)
from sequant_eval.cli import main  # noqa: E402
from sequant_eval.errors import InfeasibleBudget, UsageError  # noqa: E402

TIGHT = {"conv_tol": 1e-11, "conv_tol_normt": 1e-9}


@pytest.fixture(scope="module")
def water_631g():
    mf = scf.RHF(build_molecule("water", "6-31g"))
    mf.conv_tol = 1e-12
    mf.kernel()
    assert mf.converged
    return mf


def test_file_holds_the_in_memory_blocks_and_the_writer_holds_one_slab(water_631g, tmp_path):
    """Oracle: ``SpinOrbitalIntegrals.eri`` for every block. The writer's traced peak
    (tracemalloc) stays within two slabs plus a fixed 128 KiB (h5py objects, NumPy's
    ufunc buffers), below one whole ⟨ab‖cd⟩ block."""
    ints = SpinOrbitalIntegrals.from_scf(water_631g)
    blocks = integral_blocks(ccsd_equations(), ints.extents, ("g",))
    assert ("g", ("a", "a", "a", "a")) in blocks and len(blocks) == 9
    vvvv = 8 * ints.nvir**4
    slab = 8 * ints.nvir**3 * 2                 # two rows of <ab||cd>: one spatial orbital
    fresh = SpinOrbitalIntegrals.from_scf(water_631g)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        disk = IntegralFile.write(fresh, tmp_path, blocks, slab_bytes=slab)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 2 * slab + (128 << 10) < vvvv
    assert not fresh._g_cache and not fresh._chem_cache and fresh._eri_full is None
    assert not disk.reused and disk.path.parent == tmp_path
    for tensor, spaces in blocks:
        np.testing.assert_allclose(disk.eri(spaces), ints.eri(spaces), rtol=0, atol=1e-13)
    np.testing.assert_allclose(disk.fock(("a", "a")), ints.fock(("a", "a")), rtol=0, atol=1e-12)
    g = disk.tensors()["g"]
    assert all(isinstance(ds, h5py.Dataset) for ds in g.values())
    # the same reference again: the complete file is reused, not rewritten
    again = IntegralFile.write(SpinOrbitalIntegrals.from_scf(water_631g), tmp_path, blocks)
    assert again.reused and again.path == disk.path
    disk.close()
    again.close()


def test_closed_shell_file_holds_g_and_L(water_631g, tmp_path):
    """Oracle: ``ClosedShellIntegrals.eri`` and ``.exchange`` (L = 2g - g~), in slabs."""
    ints = ClosedShellIntegrals.from_scf(water_631g)
    blocks = (("L", ("a", "a", "i", "i")), ("L", ("a", "i", "a", "i")),
              ("g", ("a", "a", "a", "i")), ("g", ("a", "i", "i", "a")))
    disk = IntegralFile.write(ClosedShellIntegrals.from_scf(water_631g), tmp_path, blocks,
                              slab_bytes=8 * 8**3 * 2)
    for tensor, spaces in blocks:
        want = ints.exchange(spaces) if tensor == "L" else ints.eri(spaces)
        got = disk.exchange(spaces) if tensor == "L" else disk.eri(spaces)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    disk.close()


def test_spin_orbital_ccsd_from_disk_matches_in_memory(water_631g, tmp_path, monkeypatch):
    """Oracle: the unbatched in-memory spin-orbital CCSD (1e-10). The residual runs under
    30 % of its unbatched peak (the iteration budget adds the amplitudes and DIIS buffers
    the solver holds), every residual's NumPy meter peak within it, reading h5py datasets;
    no in-memory integral object survives the writing, and the DIIS file is removed."""
    alive: list = []
    init = SpinOrbitalIntegrals.__init__

    def tracked(self, *a, **kw):
        init(self, *a, **kw)
        alive.append(weakref.ref(self))

    monkeypatch.setattr(SpinOrbitalIntegrals, "__init__", tracked)
    top = se.analyze(ccsd_equations(), {"i": 10, "a": 16}).peak_bytes
    peaks: list[int] = []
    probe = CCSD(water_631g, spin_orbital=True, integrals_on_disk=tmp_path)
    held = probe.held_bytes
    probe.close()
    reserve = se.Evaluator(ccsd_equations(), {"i": 10, "a": 16}, budget=top).program_bytes
    cc = CCSD(water_631g, spin_orbital=True, budget=0.30 * top + held + reserve,
              integrals_on_disk=tmp_path, callback=lambda rec, s, peak: peaks.append(peak),
              **TIGHT)
    gc.collect()
    assert alive and all(ref() is None for ref in alive)      # nothing cached is kept
    assert isinstance(cc.integrals, IntegralFile)
    cc.run()
    cc.close()
    assert cc.converged
    evaluator_budget = cc.evaluator().policy.budget_bytes
    assert evaluator_budget == pytest.approx(0.30 * top + reserve)
    assert len(peaks) == cc.iterations >= 2
    assert all(0 < p <= evaluator_budget - reserve for p in peaks)
    assert cc.report.loops and cc.report.peak_bytes < top          # really batched
    assert not list(tmp_path.glob("diis-*.h5")) and not list(tmp_path.glob("amplitudes-*"))
    assert "integrals on disk" in cc.summary()
    ref = CCSD(water_631g, spin_orbital=True, **TIGHT).run()
    assert ref.converged and abs(cc.e_corr - ref.e_corr) < 1e-10


def test_budget_below_the_held_amplitudes_is_refused(tmp_path):
    """A budget the amplitudes alone exceed is refused before anything is written, naming
    the out-of-core iteration and where the smallest budget that works is read
    (water/STO-3G); a missing folder is a usage error."""
    mf = scf.RHF(build_molecule("water", "sto-3g")).run()
    with pytest.raises(InfeasibleBudget, match="out-of-core CCSD iteration") as info:
        CCSD(mf, spin_orbital=True, budget=1000, integrals_on_disk=tmp_path)
    assert "InfeasibleBudget.minimum" in str(info.value) and info.value.budget == 1000
    assert not list(tmp_path.iterdir())
    with pytest.raises(UsageError, match="does not exist"):
        CCSD(mf, spin_orbital=True, integrals_on_disk=tmp_path / "missing")


def _linear_problem(n=40, seed=3):
    rng = np.random.default_rng(seed)
    a = np.diag(rng.uniform(1.0, 3.0, n)) + 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)

    def residual(t):
        r = b - a @ t["x"]
        return float(t["x"] @ b), {"x": r}

    return residual, {"x": np.zeros(n)}, {"x": np.diag(a).copy()}


def test_diis_on_disk_in_place_follows_the_in_memory_solver(tmp_path):
    """Oracle: the in-memory DIIS solver, not in place: the same iterates (to rounding of
    the chunked overlaps) and the same solution; chunks smaller than the vector."""
    residual, t0, d = _linear_problem()
    ref = solve_cc(residual, t0, d, conv_residual=1e-11, conv_energy=1e-14,
                   diis=DIIS(4))
    store = HDF5DIIS(tmp_path / "diis.h5", 4, chunk_elements=7)
    got = solve_cc(residual, t0, d, conv_residual=1e-11, conv_energy=1e-14, diis=store,
                   in_place=True)
    store.close()
    assert not (tmp_path / "diis.h5").exists()
    assert got.converged and ref.converged and abs(got.iterations - ref.iterations) <= 1
    head = min(got.iterations, ref.iterations) - 3
    for a, b in zip(got.history[:head], ref.history[:head]):
        assert a.diis_size == b.diis_size
        assert a.e_corr == pytest.approx(b.e_corr, rel=1e-12)
        assert a.residual_norm == pytest.approx(b.residual_norm, rel=1e-6, abs=1e-12)
    np.testing.assert_allclose(got.t["x"], ref.t["x"], rtol=0, atol=1e-10)


def test_orbital_denominators_divide_like_the_whole_array():
    """Oracle: dividing by the whole D2 = e_i + e_j - e_a - e_b (bitwise equal)."""
    rng = np.random.default_rng(0)
    eo, ev = -rng.uniform(1, 2, 4), rng.uniform(1, 2, 6)
    d = OrbitalDenominators(eo, ev)
    x = rng.standard_normal((6, 6, 4, 4))
    want = x / d["t2"]
    d.divide("t2", x)
    assert np.array_equal(x, want)


def test_cli_integrals_on_disk(tmp_path, capsys):
    """Oracle: PySCF GCCSD on water/STO-3G (-0.04943856 Eh); the command names the file,
    the iteration budget and the peak RSS growth since its SCF."""
    out = tmp_path / "ccsd.json"
    assert main(["ccsd", "--basis", "sto-3g", "--spin-orbital", "--budget", "80%",
                 "--conv-tol", "1e-10", "--conv-tol-normt", "1e-8",
                 "--integrals-on-disk", str(tmp_path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"E\(corr\)\s+= -0\.04943856\d+ Eh", text)
    assert "integrals on disk: " in text and "iteration budget" in text
    assert list(tmp_path.glob("integrals-*.h5"))
    data = json.loads(out.read_text())
    mem = data["memory"]
    assert data["integrals_on_disk"].endswith(".h5")
    assert mem["budget_bytes"] + mem["held_bytes"] == pytest.approx(mem["iteration_budget_bytes"])
    assert mem["predicted_peak_bytes"] <= mem["budget_bytes"]
    assert main(["ccsd", "--basis", "sto-3g", "--integrals-on-disk",
                 str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_open_shell_reference_from_disk(tmp_path):
    """Oracle: the in-memory spin-orbital CCSD of the same UHF (OH radical, STO-3G;
    generalized spin orbitals), unbatched, to 1e-10."""
    from pyscf import gto

    mf = scf.UHF(gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0))
    mf.conv_tol = 1e-12
    mf.kernel()
    ref = CCSD(mf, spin_orbital=True, **TIGHT).run()
    cc = CCSD(mf, spin_orbital=True, integrals_on_disk=tmp_path, **TIGHT).run()
    cc.close()
    assert cc.spin_orbital and cc.converged and ref.converged
    assert abs(cc.e_corr - ref.e_corr) < 1e-10


def test_amplitude_file_guess_and_exchange_follow_the_in_memory_ones(water_631g, tmp_path):
    """Oracles: ``mp2_guess`` formed whole from the same file (bitwise), and from the
    in-memory closed-shell integrals (to rounding of the slab-wise integral transform);
    ``u2 = 2 t2 - t2.transpose(0, 1, 3, 2)`` formed whole; slabs of 3 rows (not a divisor
    of the virtual extent)."""
    ints = ClosedShellIntegrals.from_scf(water_631g)
    disk = IntegralFile.write(ints, tmp_path, integral_blocks(
        ccsd_equations(), ints.extents, ("g",)))
    nv, no = ints.nvir, ints.nocc
    amps = AmplitudeFile(tmp_path / "amplitudes.h5", (nv, nv, no, no), 3 * nv * no * no,
                         exchange=True)
    try:
        got = amps.mp2_guess(disk, orbital_denominators(disk))
        want = mp2_guess(disk)
        assert np.array_equal(got["t1"], want["t1"])
        assert np.array_equal(got["t2"][()], want["t2"])
        memory = mp2_guess(ClosedShellIntegrals.from_scf(water_631g))["t2"]
        np.testing.assert_allclose(got["t2"][()], memory, rtol=0, atol=1e-14)
        amps.refresh_exchange()
        t2 = want["t2"]
        assert np.array_equal(amps.u2[()], 2 * t2 - t2.transpose(0, 1, 3, 2))
    finally:
        amps.close()
        disk.close()
    assert not (tmp_path / "amplitudes.h5").exists()


def test_closed_shell_from_disk_holds_no_doubles_in_memory(water_631g, tmp_path):
    """The lean closed-shell run keeps t2 and u2 on disk: what the solver holds is t1 and
    two slabs (here the smallest DIIS chunks, 1 Ki elements each), less than the t2 and
    u2 it held in memory before; the energy equals the in-memory run's (1e-10)."""
    cc = CCSD(water_631g, budget="40%", integrals_on_disk=tmp_path, **TIGHT)
    t2_bytes = 8 * (cc.nocc * cc.nvir) ** 2
    assert cc.held_bytes < 2 * t2_bytes
    cc.run()
    cc.close()
    assert cc.converged and cc.t2.shape == (cc.nocc, cc.nocc, cc.nvir, cc.nvir)
    assert not list(tmp_path.glob("amplitudes-*")) and not list(tmp_path.glob("diis-*"))
    ref = CCSD(water_631g, **TIGHT).run()
    assert abs(cc.e_corr - ref.e_corr) < 1e-10
    np.testing.assert_allclose(cc.t2, ref.t2, rtol=0, atol=1e-8)
