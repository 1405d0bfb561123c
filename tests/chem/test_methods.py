"""The PySCF-shaped methods: ``CCSD(mf)`` picks a small class by the reference, options are
attributes with PySCF's defaults, ``kernel(t1, t2)`` / ``run()`` as in PySCF, and the
results (``e_hf``, ``e_corr``, ``e_tot``, ``converged``, ``t1``, ``t2``) equal
``pyscf.cc.CCSD``'s. Oracles: PySCF's ``cc.CCSD`` / ``cc.GCCSD`` on the same mean field, run
here (water as below, 6-31G and STO-3G; OH radical UHF)."""
from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("pyscf")

from pyscf import cc, gto, scf  # noqa: E402

import sequant_eval.chem as sc  # noqa: E402
from sequant_eval.chem import CCSD, CCSDT, GCCSD, RCCSD, UCCSD, InMemory, OnDisk  # noqa: E402
from sequant_eval.errors import (InfeasibleBudget, InputTypeError, ShapeMismatch,  # noqa: E402
                                 UnsupportedFeature)

from tests.chem.references import TIGHT, rhf as _rhf  # noqa: E402


@pytest.fixture(scope="module")
def water():
    return _rhf("6-31g")


@pytest.fixture(scope="module")
def radical():
    mf = scf.UHF(gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


def _pyscf(mf, frozen=0, cls=cc.CCSD):
    ref = cls(mf, frozen=frozen)
    ref.conv_tol, ref.conv_tol_normt = 1e-11, 1e-9
    ref.kernel()
    assert ref.converged
    return ref


def test_the_factory_picks_a_class_by_the_reference(water, radical):
    assert type(CCSD(water)) is RCCSD and type(CCSD(radical)) is UCCSD
    assert type(CCSD(radical, spin_orbital=True)) is GCCSD
    assert type(CCSD(water, spin_orbital=True)) is GCCSD
    assert issubclass(CCSDT, GCCSD) and not issubclass(RCCSD, GCCSD)
    with pytest.raises(UnsupportedFeature, match="drop spin_orbital=True"):
        RCCSD(water, spin_orbital=True)


def test_options_are_attributes_with_pyscf_defaults(water):
    ours, ref = CCSD(water), cc.CCSD(water)
    for name in ("conv_tol", "conv_tol_normt", "max_cycle", "diis_space"):
        assert getattr(ours, name) == getattr(ref, name), name
    assert ours.max_memory == water.max_memory and ours.verbose == 0
    assert isinstance(ours.storage, InMemory) and ours.frozen == 0 and ours.budget.unlimited
    with pytest.raises(InputTypeError, match="no option 'conv_tolerance'"):
        CCSD(water, conv_tolerance=1e-9)


def test_results_equal_pyscf_ccsd(water):
    """``kernel()`` returns ``(e_corr, t1, t2)``, the attributes hold the same, and every
    one equals PySCF ``cc.CCSD``'s (energies 1e-9, amplitudes 1e-6)."""
    ref = _pyscf(water)
    mycc = CCSD(water)
    mycc.conv_tol, mycc.conv_tol_normt = 1e-11, 1e-9         # set as attributes, as in PySCF
    e_corr, t1, t2 = mycc.kernel()
    assert e_corr == mycc.e_corr and t1 is mycc.t1 and t2 is mycc.t2
    assert mycc.converged and ref.converged
    assert abs(mycc.e_hf - ref.e_hf) < 1e-12
    assert abs(mycc.e_corr - ref.e_corr) < 1e-9 and abs(mycc.e_tot - ref.e_tot) < 1e-9
    assert t1.shape == ref.t1.shape and t2.shape == ref.t2.shape
    assert np.abs(t1 - ref.t1).max() < 1e-6 and np.abs(t2 - ref.t2).max() < 1e-6


def test_run_returns_self_and_kernel_starts_from_given_amplitudes(water):
    """PySCF's ``kernel(t1, t2)``: from PySCF's converged amplitudes the solve converges in
    a few iterations (the same test as PySCF's: the amplitude change and the energy), to
    the same energy; from the MP2 guess it takes many more."""
    ref = _pyscf(water)
    mycc = CCSD(water, **TIGHT)
    assert mycc.run(ref.t1, ref.t2) is mycc
    assert mycc.converged and mycc.iterations <= 4 < CCSD(water, **TIGHT).run().iterations
    assert abs(mycc.e_corr - ref.e_corr) < 1e-9
    fresh = CCSD(water, **TIGHT).run(t2=ref.t2)                # t1 from the guess (zero)
    assert fresh.converged and abs(fresh.e_corr - ref.e_corr) < 1e-9


@pytest.mark.parametrize("frozen", [[0, 1], [0, 12], 1])
def test_frozen_orbital_lists_equal_pyscf(water, frozen):
    """``frozen`` as PySCF reads it: a count, or orbital indices (12: the last virtual)."""
    ref = _pyscf(water, frozen)
    ours = CCSD(water, frozen=frozen, **TIGHT).run()
    assert abs(ours.e_corr - ref.e_corr) < 1e-9
    assert ours.t2.shape == ref.t2.shape


def test_frozen_list_on_the_spin_orbital_path(radical):
    """A UHF's ``frozen`` list names spatial orbitals of both spins (oracle: PySCF
    ``UCCSD(frozen=[0, 1])``); a GHF's names spin orbitals (oracle: PySCF ``GCCSD`` on the
    UHF's GHF with the same spin orbitals frozen)."""
    ref = _pyscf(radical, [0, 1], cls=cc.UCCSD)
    ours = CCSD(radical, frozen=[0, 1], spin_orbital=True, **TIGHT).run()
    assert type(ours) is GCCSD and abs(ours.e_corr - ref.e_corr) < 1e-9
    assert ours.integrals.frozen == (0, 1, 2, 3)
    ghf = scf.addons.convert_to_ghf(radical)
    ref = _pyscf(ghf, [0, 1], cls=cc.GCCSD)
    ours = CCSD(ghf, frozen=[0, 1], **TIGHT).run()
    assert abs(ours.e_corr - ref.e_corr) < 1e-9


def test_frozen_none_is_pyscfs_default_no_frozen_orbital(water, radical):
    """``frozen=None``, the value PySCF's CCSD classes default to, freezes nothing: the
    same active orbitals as ``frozen=0`` on every kind (closed shell, unrestricted, spin
    orbitals), and the energy PySCF gives with ``frozen=None``."""
    for mf, kw in ((water, {}), (radical, {}), (radical, {"spin_orbital": True})):
        none, zero = CCSD(mf, frozen=None, **kw), CCSD(mf, frozen=0, **kw)
        assert none.integrals.frozen == zero.integrals.frozen == ()
        assert none.integrals.extents == zero.integrals.extents
    ref = _pyscf(water, None)
    assert abs(CCSD(water, frozen=None, **TIGHT).run().e_corr - ref.e_corr) < 1e-9


def test_frozen_set_after_construction(water):
    mycc = CCSD(water, **TIGHT)
    mycc.frozen = 1
    assert mycc.nocc == 4
    assert abs(mycc.run().e_corr - _pyscf(water, 1).e_corr) < 1e-9


def test_storage_is_a_strategy(water, tmp_path):
    """``storage=OnDisk(DIR)`` is what ``integrals_on_disk=DIR`` means (oracle: the
    in-memory run, 1e-10)."""
    disk = CCSD(water, storage=OnDisk(tmp_path), **TIGHT)
    assert disk.out_of_core and disk.integrals_on_disk == tmp_path
    disk.run()
    disk.close()
    memory = CCSD(water, **TIGHT).run()
    assert abs(disk.e_corr - memory.e_corr) < 1e-10
    assert list(tmp_path.glob("integrals-*.h5"))


def test_max_memory_batches_a_residual_that_does_not_fit():
    """Without a budget, a residual whose unbatched peak exceeds ``max_memory`` (MB) runs
    batched within it, to the same energy (oracle: the unbatched run, 1e-10; water/cc-pVDZ,
    one frozen, the ladder unpacked: on 6-31G, or with the packed ladder's smaller
    intermediates, the program's own reserve is larger than the arrays); a budget
    overrides it."""
    mf = _rhf("cc-pvdz")
    plain = dict(frozen=1, packed_pairs=False)
    free = CCSD(mf, **plain, **TIGHT).run()
    top = free.report.peak_bytes
    assert not free.report.loops and free.max_memory == mf.max_memory
    small = CCSD(mf, **plain, max_memory=0.9 * top / 1e6, **TIGHT).run()
    assert small.report.loops and small.meter.peak_bytes <= 0.9 * top
    assert small.program().budget_bytes == pytest.approx(0.9 * top)
    assert abs(small.e_corr - free.e_corr) < 1e-10
    assert small.to_dict()["max_memory_mb"] == pytest.approx(0.9 * top / 1e6)
    over = CCSD(mf, **plain, max_memory=0.9 * top / 1e6, budget=2 * top)
    assert not over.evaluator().analyze().loops


def test_a_max_memory_too_small_is_refused_naming_max_memory_and_enough(water):
    """Refused when the method is built, not at the first residual (nothing run), by a
    typed error that names ``max_memory`` and a value that is enough; that value runs,
    within itself, to the unbatched energy (1e-10)."""
    with pytest.raises(InfeasibleBudget) as info:
        CCSD(water, max_memory=0.05).program()
    text = str(info.value)
    assert text.startswith("max_memory 0.05 MB") and "no budget given" in text
    enough = float(re.search(r"Raise max_memory to at least ([0-9.]+) MB", text).group(1))
    assert 0.05 < enough and enough * 1e6 >= info.value.minimum
    ours = CCSD(water, max_memory=enough, **TIGHT).run()
    assert ours.meter.peak_bytes <= enough * 1e6
    assert abs(ours.e_corr - CCSD(water, **TIGHT).run().e_corr) < 1e-10


def test_no_max_memory_below_the_named_smallest_runs(water):
    """A max_memory over the unbatched residual's arrays but under arrays plus the
    program's reserve ran unbatched, though a smaller one was refused naming a smallest
    max_memory above it (a hostile-input probe: 0.02 MB ran, 0.001 MB named 1.06 MB).
    Oracle: feasibility monotone in max_memory — the values below the named smallest are
    refused, the named one runs."""
    plain = CCSD(water, max_memory=None)
    arrays = plain.program().report().peak_bytes
    reserve = plain.evaluator().program_reserve()
    between = (arrays + 0.5 * reserve) / 1e6                  # arrays fit, program not
    with pytest.raises(InfeasibleBudget) as info:
        CCSD(water, max_memory=between).program()
    named = float(re.search(r"at least ([0-9.]+) MB", str(info.value)).group(1))
    assert named > between
    CCSD(water, max_memory=named).program()


def test_ccsdt_kernel_returns_the_triples():
    mf = _rhf("sto-3g")
    e, t1, t2, t3 = CCSDT(mf, **TIGHT).kernel()
    assert t3.shape == (10, 10, 10, 4, 4, 4) and e < 0


def test_se_chem_without_importing_it():
    """``import sequant_eval as se; se.chem.CCSD`` works (the subpackage loads lazily)."""
    import subprocess
    import sys

    code = ("import sys, sequant_eval as se; assert 'sequant_eval.chem' not in sys.modules; "
            "print(se.chem.CCSD.__name__, se.chem.RCCSD.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["CCSD", "sequant_eval.chem.rccsd"]
    assert sc.CCSD is CCSD


@pytest.mark.parametrize("bad, error", [
    (None, InputTypeError), ("t2", InputTypeError), (3.0, InputTypeError),
    ("3-d", ShapeMismatch), ("wrong shape", ShapeMismatch), ("complex", InputTypeError),
    ("bool", InputTypeError), ("object", InputTypeError)])
@pytest.mark.parametrize("spin_orbital", [False, True], ids=["closed-shell", "spin-orbital"])
def test_residual_refuses_bad_amplitudes_with_typed_errors(bad, error, spin_orbital):
    """``residual(t1, t2)`` checks each amplitude (a real numeric array of PySCF's shape)
    before anything is packed or evaluated: each was a raw TypeError or ValueError from
    deep inside (the packed ladder, ``swap_halves``, ``float(E)``)."""
    mycc = CCSD(_rhf("sto-3g"), spin_orbital=spin_orbital)
    o, v = mycc.integrals.extents["i"], mycc.integrals.extents["a"]
    shape = (o, o, v, v)
    made = {"3-d": np.zeros(shape[:3]), "wrong shape": np.zeros((o, o, v, v + 1)),
            "complex": np.full(shape, 1j), "bool": np.zeros(shape, bool),
            "object": np.zeros(shape, object)}
    t2 = made[bad] if isinstance(bad, str) and bad in made else bad
    with pytest.raises(error, match="amplitude t2"):
        mycc.residual(np.zeros((o, v)), t2)
    e, r1, r2 = mycc.residual(np.zeros((o, v), int), np.zeros(shape).transpose(1, 0, 3, 2))
    assert e == 0.0 and r2.shape == shape                 # integers and views are fine


def test_changing_packed_pairs_or_intermediates_rebuilds_the_residual():
    """``packed_pairs`` and ``intermediates`` set after a run take effect on the next one
    (the compiled residual was kept: a MissingTensor or KeyError, or silently the old
    intermediates); a value that is not a bool is refused."""
    mf = _rhf("sto-3g")
    ref = CCSD(mf, **TIGHT).run().e_corr
    for kind in ({}, {"spin_orbital": True}):
        for first in (True, False):
            mycc = CCSD(mf, packed_pairs=first, **kind, **TIGHT).run()
            mycc.packed_pairs = not first
            assert abs(mycc.run().e_corr - ref) < 1e-8
            assert ("L" in {eq.name for eq in mycc.equations}) is (not first and bool(kind))
    staged = CCSD(mf, intermediates=True, **TIGHT).run()
    staged.intermediates = False
    staged.run()
    assert not staged.staged
    with pytest.raises(InputTypeError, match="packed_pairs must be True or False"):
        CCSD(mf, packed_pairs="no").run()


def test_triples_refuse_amplitudes_that_are_not_real_numbers():
    """Boolean (it gave garbage, -0.31 Eh on H2O/STO-3G) and complex amplitudes are refused
    by every (T) kind with a typed error; the unrestricted (T) given bare arrays says it
    takes tuples."""
    mycc = CCSD(_rhf("sto-3g")).run()
    with pytest.raises(InputTypeError, match="real numeric"):
        mycc.ccsd_t(mycc.t1 > 0, mycc.t2 > 0)
    with pytest.raises(InputTypeError, match="real numeric"):
        mycc.ccsd_t(mycc.t1 + 0j, mycc.t2)
    mol = gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0)
    open_shell = CCSD(scf.UHF(mol).run()).run()
    with pytest.raises(ShapeMismatch, match="tuples"):
        open_shell.ccsd_t(open_shell.t1[0], open_shell.t2[0])
    with pytest.raises(InputTypeError, match="real numeric"):
        open_shell.ccsd_t(tuple(a + 0j for a in open_shell.t1), open_shell.t2)


def test_options_and_amplitudes_a_probe_found_failing_untyped_or_late(water, radical,
                                                                      tmp_path):
    """Each raised a raw ValueError / TypeError, or was taken and failed mid-run after the
    checkpoint was written, or silently meant something else (a hostile-input probe,
    2026-12-07). Now each is a typed refusal before any work, and no file is written."""
    from sequant_eval.errors import OptionError, UsageError

    chk = tmp_path / "run.chk"
    refused = {"verbose='abc'": dict(verbose="abc"), "verbose=[4]": dict(verbose=[4]),
               "callback=5": dict(callback=5), "chkfile=5": dict(chkfile=5),
               "restart=5": dict(restart=5), "backend='dryrun'": dict(backend="dryrun")}
    for why, options in refused.items():
        with pytest.raises(OptionError):
            CCSD(water, **{"chkfile": chk, **options}).run()
        assert not chk.exists(), why
    for value in (0, "no", "False"):         # 0 == False, but "no" turned them on
        with pytest.raises(OptionError, match="intermediates"):
            CCSD(water, intermediates=value).program()
    for folder in (None, 5):
        with pytest.raises(InputTypeError, match="folder path"):
            OnDisk(folder)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        CCSD(water, storage=OnDisk(a_file))
    no, nv = water.mol.nelectron // 2, water.mo_coeff.shape[1] - water.mol.nelectron // 2
    for t1, t2, culprit in ((np.zeros(no * nv), None, ShapeMismatch),
                            (None, np.zeros((no, no, nv)), ShapeMismatch),
                            ("x", None, InputTypeError), (object(), None, InputTypeError)):
        with pytest.raises(culprit, match="amplitude t"):
            CCSD(water).kernel(t1, t2)
    with pytest.raises(ShapeMismatch, match="amplitude t1a"):
        CCSD(radical).kernel((np.zeros(3), np.zeros(3)))


def test_a_triples_refusal_under_max_memory_names_max_memory_and_enough():
    """Under ``max_memory`` (no budget) the (T) refusal said "raise the budget" (a
    hostile-input probe, 2026-12-07); it names max_memory and a value now, and that value
    gives PySCF's (T) energy. Oracle: ``pyscf.cc.ccsd_t``."""
    from pyscf.cc import ccsd_t

    mf = _rhf("sto-3g")
    ours = CCSD(mf, **TIGHT).run()
    small = CCSD(mf, max_memory=0.001)
    with pytest.raises(InfeasibleBudget, match="max_memory 0.001 MB .* too small for the "
                                               "\\(T\\) energy") as info:
        small.ccsd_t(ours.t1, ours.t2)
    enough = float(re.search(r"at least ([0-9.]+) MB", str(info.value)).group(1))
    fitted = CCSD(mf, max_memory=enough)
    theirs = cc.CCSD(mf)
    theirs.conv_tol, theirs.conv_tol_normt = 1e-10, 1e-8
    theirs.run()
    want = ccsd_t.kernel(theirs, theirs.ao2mo(), verbose=0)
    assert abs(fitted.ccsd_t(ours.t1, ours.t2) - want) < 1e-8


def test_an_out_of_core_residual_that_cannot_fit_is_refused_before_the_integral_file(
        water, tmp_path):
    """``OnDisk`` with a budget the residual cannot meet beside what the solver holds was
    refused at ``run()``, after the constructor had written the integral file (a
    hostile-input probe, 2026-12-07): refused when the method is made, the folder empty."""
    with pytest.raises(InfeasibleBudget, match="out-of-core CCSD iteration"):
        CCSD(water, storage=OnDisk(tmp_path), budget=200_000)
    assert list(tmp_path.iterdir()) == []
