"""The shared solver of the CC methods, shaped like PySCF's ``cc`` classes.

:class:`CoupledCluster` holds what every method has: the options as attributes (PySCF's
names and defaults), ``kernel()`` / ``run()``, the results (``e_hf``, ``e_corr``,
``e_tot``, ``converged``, the amplitudes in PySCF's layouts), per-iteration logging,
checkpoints and restart, and the memory report. A method is a small subclass that says
what is its own: its equations (packaged text files, ``chem/data/``), its integrals, the
tensors its residual reads and its amplitudes (:mod:`~sequant_eval.chem.rccsd`,
:mod:`~sequant_eval.chem.gccsd`, :mod:`~sequant_eval.chem.ccsdt`). Where the integrals and
amplitudes live is a storage strategy (:mod:`~sequant_eval.chem.storage`); what bounds the
residual is a :class:`~sequant_eval.chem.program.MemoryLimit`.

Logging: every iteration is one record on the ``sequant_eval.chem`` logger at INFO
(``cycle = 3  E_corr(CCSD) = ...  dE = ...  norm(t1,t2) = ...``), the final energies one at
NOTE (25). Nothing is printed unless ``verbose`` asks for it (PySCF's levels: 3 the final
energies, 4 every iteration too) or the application configured a handler (the command
line does).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from ..budget import Budget
from ..errors import (ClosedError, InputTypeError, OptionError, SequantEvalError,
                      StorageError, UnsupportedFeature, UsageError)
from ..units import format_bytes
from .program import MemoryLimit, ResidualProgram, infeasible_iteration
from .options import NOTE, check_run_options, log, verbosity
from .solve import Solve
from .solver import CCResult, IterationRecord, from_pyscf, swap_halves
from .storage import InMemory, OnDisk
from .summary import summary_dict, summary_text

__all__ = ["CoupledCluster", "NOTE", "log"]


def require_mean_field(mf: Any) -> None:
    """Refuse (InputTypeError) an ``mf`` that is not a PySCF SCF object (a dict, None, a
    molecule): it has no ``istype`` method and no ``mol``."""
    if not callable(getattr(mf, "istype", None)) or getattr(mf, "mol", None) is None:
        raise InputTypeError(
            f"mf must be a PySCF SCF object (e.g. pyscf.scf.RHF(mol).run()), got "
            f"{type(mf).__name__}: it is not a PySCF SCF object")


class CoupledCluster:
    """A CC method on a converged PySCF mean field (the shared part; see the subclasses).

    Parameters
    ----------
    mf
        A converged PySCF SCF object.
    frozen
        PySCF's ``frozen``: the number of lowest orbitals left uncorrelated, or a list of
        orbital indices (occupied or virtual). Spatial orbitals for an RHF, UHF or ROHF,
        per spin for the open shells (``frozen=N``: the N lowest of each spin, as
        ``pyscf.cc.UCCSD(frozen=N)``; ``[alpha, beta]`` lists also accepted); spin
        orbitals for a GHF (as ``pyscf.cc.GCCSD``). ``None``, PySCF's default: none.
    budget
        ``None``, bytes, a text (``"25MB"``) or a share of the unbatched peak (``"25%"``):
        every residual is planned within it (see :class:`~sequant_eval.budget.Budget`).
        It bounds one residual evaluation (its arrays and its program; out of core the
        whole iteration); the integrals and amplitudes held in memory between residuals
        are inputs, not counted.
    max_memory
        PySCF's memory knob in MB (10**6 bytes), by default ``mf.max_memory``. It matters
        only when no ``budget`` is given: a residual whose unbatched peak (plus, out of
        core, what the solver holds) fits in ``max_memory`` runs unbatched, a larger one
        is batched within ``max_memory``. A ``budget`` overrides it.
    storage
        :class:`~sequant_eval.chem.storage.InMemory` (default) or
        :class:`~sequant_eval.chem.storage.OnDisk`; ``integrals_on_disk=DIR`` (and
        ``slab_bytes``) is a short form of ``storage=OnDisk(DIR, slab_bytes)``.
    options
        Any of the attributes below, by name.

    Attributes (options, read when the method runs)
    -----------------------------------------------
    conv_tol, conv_tol_normt, max_cycle
        PySCF's test and defaults (1e-7, 1e-5, 50): converged when, after an iteration's
        step, the energy at the new amplitudes differs from the last by less than
        ``conv_tol`` and the step (the amplitude change before DIIS) has a norm below
        ``conv_tol_normt``, within ``max_cycle`` iterations — so the iteration counts are
        PySCF's. (Where the energy cannot be evaluated alone within the budget, the
        residual norm at evaluated amplitudes is tested instead, one iteration later.)
    diis_space
        DIIS vectors kept (PySCF's default, 6).
    verbose
        PySCF's levels: 0 (default) silent, 3 the final energies, 4 every iteration.
    chkfile, restart
        ``chkfile``: an HDF5 checkpoint written atomically after every iteration
        (:mod:`~sequant_eval.chem.checkpoint`); ``restart=True`` continues from it (to
        the same energy as the run that wrote it), refusing a checkpoint of another system;
        ``restart=PATH`` continues from the checkpoint at ``PATH`` instead (``chkfile``,
        when given, is written from then on).
    backend
        The evaluator's backend, ``"numpy"``.
    callback
        ``callback(record, seconds, peak_bytes)`` after every iteration.
    packed_pairs
        ``RCCSD``, ``GCCSD``: the particle–particle ladder over packed pairs of virtuals in
        memory (the default; :mod:`~sequant_eval.chem.pairs`), or as written (``False``).
    """

    #: The method's name in summaries, logs and JSON.
    method = "CCSD"
    #: Whether the equations are over spin orbitals (else closed-shell spatial orbitals).
    spin_orbital = True
    #: The equations, in summaries and JSON; the orbitals in the summary.
    label, orbital_kind = "spin-orbital", "spin-orbitals"
    #: Which (T) energy ``ccsd_t`` evaluates (a kind of ``triples.TRIPLES_FILES``; None: none).
    triples: str | None = None
    #: The amplitudes, in order (``kernel``'s arguments and results).
    amplitudes = ("t1", "t2")
    #: The integral tensors written to disk out of core.
    disk_tensors: tuple[str, ...] = ("g",)
    #: Whether the residual reads the exchange amplitude ``u2 = 2 t2 - t2~``.
    exchange = False
    #: The amplitude blocks when they are not ``t1``, ``t2`` over ``i``/``a``
    #: (:class:`~sequant_eval.chem.solver.AmplitudeLayout`; the unrestricted method's).
    layout = None
    #: The method's ladder over packed pairs (a ``chem.pairs.Ladder`` class; None: as
    #: written), used while ``packed_pairs`` (an option of the methods that have one).
    ladder, packed_pairs = None, False

    conv_tol, conv_tol_normt = 1e-7, 1e-5
    max_cycle, diis_space = 50, 6
    verbose = 0
    chkfile, restart = None, False
    backend = "numpy"
    callback = None
    intermediates: bool | None = None

    _OPTIONS = frozenset({"conv_tol", "conv_tol_normt", "max_cycle", "diis_space", "verbose",
                          "chkfile", "restart", "backend", "callback", "intermediates"})

    def __init__(self, mf: Any, frozen: Any = 0, *, budget: Any = None,
                 max_memory: float | None = None, storage: Any = None, **options: Any) -> None:
        require_mean_field(mf)
        self._integrals = self._program = None
        self._mf = mf
        self._program_options: tuple | None = None   # what the program was built with
        self._closed = False
        self._frozen = frozen
        self.budget = budget
        self.max_memory = getattr(mf, "max_memory", None) if max_memory is None else max_memory
        self.storage = self._storage_of(storage, options)
        self._set_options(options)
        self._check_options()
        self.e_corr: float | None = None
        self.converged = False
        self.iterations = self.iterations_run = 0
        self.result: CCResult | None = None
        self.report = self.meter = None
        self.e_t: float | None = None
        self.triples_result = None          # the latest ccsd_t()'s TriplesResult
        self.seconds_per_iteration = float("nan")
        for name in self.amplitudes:
            setattr(self, name, None)
        self.integrals            # built now: an out-of-core refusal comes before any write

    # ------------------------------------------------------------------ options
    def _storage_of(self, storage: Any, options: dict[str, Any]):
        folder, slab = options.pop("integrals_on_disk", None), options.pop("slab_bytes", None)
        if folder is not None and storage is not None:
            raise UsageError("give storage=OnDisk(DIR) or integrals_on_disk=DIR, not both")
        if folder is not None:
            return OnDisk(folder, slab)
        if storage is not None and not isinstance(storage, (InMemory, OnDisk)):
            raise InputTypeError(f"storage must be InMemory() or OnDisk(DIR), got "
                                 f"{type(storage).__name__} {storage!r}")
        return storage or InMemory()

    def _set_options(self, options: dict[str, Any]) -> None:
        spin = options.pop("spin_orbital", None)
        if spin is not None and bool(spin) != self.spin_orbital:
            raise UnsupportedFeature(
                f"{type(self).__name__} runs the {self.label} equations; drop "
                f"spin_orbital={spin!r} (sequant_eval.chem.CCSD(mf, spin_orbital=...) picks "
                "the class by it)")
        unknown = sorted(set(options) - self._OPTIONS)
        if unknown:
            raise InputTypeError(f"{type(self).__name__} has no option {unknown[0]!r}; the "
                                 f"options are {', '.join(sorted(self._OPTIONS))}")
        for name, value in options.items():
            setattr(self, name, value)

    def _check_options(self) -> None:
        """Refuse what this method cannot do (a subclass adds its own refusals)."""

    def _invalidate(self, integrals: bool = True) -> None:
        self._program = None
        if integrals and self._integrals is not None:
            if hasattr(self._integrals, "close"):        # an integral file: opened again
                self._integrals.close()
            self._integrals = None

    @property
    def mf(self) -> Any:
        """The mean field (set another to run on it: the integrals are made again)."""
        return self._mf

    @mf.setter
    def mf(self, value: Any) -> None:
        require_mean_field(value)
        self._mf = value
        self._invalidate()

    @property
    def frozen(self) -> Any:
        """PySCF's ``frozen`` (set it to change the active orbitals before the run)."""
        return self._frozen

    @frozen.setter
    def frozen(self, value: Any) -> None:
        self._frozen = value
        self._invalidate()

    @property
    def budget(self) -> Budget:
        """The memory budget (:class:`~sequant_eval.budget.Budget`; set bytes, a text or a
        share, read once)."""
        return self._budget

    @budget.setter
    def budget(self, value: Any) -> None:
        self._budget = Budget.parse(value)
        self._invalidate(integrals=self._integrals is not None and self.out_of_core)

    @property
    def max_memory(self) -> float | None:
        """PySCF's ``max_memory`` in MB (see the class docstring for how it meets ``budget``)."""
        return self._max_memory

    @max_memory.setter
    def max_memory(self, value: float | None) -> None:
        Budget.megabytes(value)                               # refuses a bad value now
        self._max_memory = value
        self._program = None

    @property
    def storage(self):
        """The storage strategy (``InMemory()`` or ``OnDisk(DIR)``)."""
        return self._storage

    @storage.setter
    def storage(self, value) -> None:
        self._storage = value
        self._invalidate()

    @property
    def out_of_core(self) -> bool:
        """Whether the integrals are read from disk (and the solver runs lean)."""
        return self.storage.out_of_core

    @property
    def integrals_on_disk(self):
        """The folder of the on-disk integrals (None in memory)."""
        return getattr(self.storage, "directory", None)

    # ------------------------------------------------------------------ what a method says
    def plain_equations(self):
        """The method's equations (a subclass reads them from its data file)."""
        raise NotImplementedError

    def factored_equations(self, plain, extents):
        """The same equations with intermediates, or None (the default: none)."""
        return None

    def mean_field_integrals(self):
        """The in-memory integral object of ``mf`` with ``frozen`` (a subclass's)."""
        raise NotImplementedError

    def base_tensors(self) -> dict[str, Any]:
        """What the residual reads besides the amplitudes."""
        return self.integrals.tensors()

    def pairs(self):
        """The residual's ladder over packed pairs of virtuals (an instance of the
        method's ``ladder``, made once per integrals), in memory with ``packed_pairs``;
        else None."""
        if not isinstance(self.packed_pairs, (bool, np.bool_)):
            raise InputTypeError(f"packed_pairs must be True or False, got {self.packed_pairs!r}")
        if (self.ladder is None or not self.packed_pairs or self.out_of_core
                or not self.ladder.applies(self.integrals)):
            return None
        made = getattr(self, "_pairs", None)
        if made is None or made.ints is not self.integrals:
            self._pairs = made = self.ladder(self.integrals)
        return made

    def amplitude_tensors(self, t: dict[str, Any], session: Any = None) -> dict[str, Any]:
        """The amplitudes as the residual reads them (block ``a..a i..i``)."""
        return {k: {("a",) * (np.ndim(v) // 2) + ("i",) * (np.ndim(v) // 2): v}
                for k, v in t.items()}

    # ------------------------------------------------------------------ integrals, program
    @property
    def integrals(self):
        """The integral blocks the residual reads (in memory, or an ``IntegralFile``)."""
        if self._integrals is None:
            with self._io_faults():
                self._integrals = self._integrals_of(self.mean_field_integrals())
        return self._integrals

    def _integrals_of(self, ints):
        """``ints`` where the storage puts them (out of core: written to, or reused from, a
        file)."""
        if not self.out_of_core:
            return ints
        limit = self._limit(ints)
        total = limit.iteration_bytes(self.plain_equations(), ints.extents)
        if total is not None and total <= limit.held:      # refused before any write
            raise infeasible_iteration(self.plain_equations(), ints.extents, total, 0.0,
                                       limit.held)
        # planned before the file is written (from the same extents), so a residual that
        # cannot fit is refused with nothing on disk
        self._program, self._program_options = self._compile(ints), self._options()
        return self.storage.integrals(ints, self.plain_equations(), self.disk_tensors, total)

    def _intermediates(self) -> bool | None:
        if not (self.intermediates is None or isinstance(self.intermediates, bool)):
            raise OptionError(f"intermediates={self.intermediates!r}: give True, False or "
                              f"None (the default: found where they pay)")
        return self.intermediates

    def _limit(self, ints) -> MemoryLimit:
        return MemoryLimit(self.budget, Budget.megabytes(self.max_memory),
                           self.storage.held_bytes(ints, self.layout))

    def program(self) -> ResidualProgram:
        """The compiled residual (planned under the budget on first use, and again when
        ``packed_pairs`` or ``intermediates`` has changed since)."""
        options = self._options()
        if self._program is None or self._program_options != options:
            self._program, self._program_options = self._compile(self.integrals), options
        return self._program

    def _options(self) -> tuple:
        """What the program is built with, besides the integrals and the limit."""
        return self.packed_pairs, self._intermediates()

    def _compile(self, ints) -> ResidualProgram:
        """The residual at the extents of ``ints`` under the method's limit (out of core:
        no pairs and no intermediates, so ``ints`` may be the ones not yet written)."""
        plain, extents, pairs = self.plain_equations(), ints.extents, self.pairs()
        if pairs is not None:                     # the ladder over packed pairs
            plain, extents = pairs.equations(plain), pairs.extents(extents)
        factored = None if self.out_of_core else self.factored_equations(plain, extents)
        return ResidualProgram(plain, factored, extents, self._limit(ints),
                               self._intermediates())

    def evaluator(self):
        """The residual's evaluator (an ``Evaluator``, or a ``StagedEvaluator``)."""
        return self.program().evaluator

    @property
    def equations(self):
        """The equations the residual evaluates (with intermediates when staged)."""
        return self.program().equations

    @property
    def staged(self) -> bool:
        """Whether the residual runs with intermediates (two or more stages)."""
        return self.program().staged

    @property
    def budget_bytes(self) -> float | None:
        """The bytes each residual is planned under (None: unbatched)."""
        return self.program().budget_bytes

    @property
    def iteration_budget_bytes(self) -> float | None:
        """Out of core, the whole iteration's budget: the residual's plus what the solver
        holds (None in memory or unbatched)."""
        budget = self.budget_bytes
        return None if not self.out_of_core or budget is None else budget + self.held_bytes

    @property
    def held_bytes(self) -> int:
        """Bytes the lean (out-of-core) solver holds beside one evaluation, charged to the
        budget first: ``t1`` and two slab buffers (0 in memory)."""
        return self.storage.held_bytes(self.integrals, self.layout)

    # ------------------------------------------------------------------ residual
    def residual_function(self, meters: list | None = None, session: Any = None):
        """``residual(t) -> (E, {"t1": R1, ...})`` in the solver's layouts."""
        return self.solver_functions(meters, session)[0]

    def solver_functions(self, meters: list | None = None, session: Any = None):
        """``(residual, energy)``: the residual function and ``energy(t) -> E`` alone
        (None when the energy cannot be had alone; the solver then tests the residual),
        reading the same integral blocks."""
        program, base = self.program(), self.base_tensors()
        backend, pairs = self.backend, self.pairs()
        if pairs is not None:
            base = dict(base, **pairs.base_tensors())

        def residual(t):
            tensors = dict(base, **self.amplitude_tensors(t, session))
            if pairs is not None:
                tensors.update(pairs.amplitude_tensors(t))
            out, meter = program.evaluate(tensors, backend)
            if meters is not None:
                meters.append(meter)
            r = {k: np.asarray(out["R" + k[1:]]) for k in t}
            if pairs is not None:
                pairs.unpack(r["t2"], out)
            return float(out["E"]), r

        def energy(t):
            return program.energy(dict(base, **self.amplitude_tensors(t, session)), backend)

        return residual, (energy if program.has_energy() else None)

    def residual(self, *amplitudes: np.ndarray):
        """``(E, R1, R2, ...)`` at amplitudes in PySCF layout (``t1[i, a]``,
        ``t2[i, j, a, b]``, ...), the residuals in PySCF layout too."""
        if len(amplitudes) != len(self.amplitudes):
            raise InputTypeError(f"{self.method} residual takes {', '.join(self.amplitudes)}; "
                                 f"got {len(amplitudes)} arrays")
        # out of core the solve is in the integral file's orbitals (signs may differ)
        spaces = {} if self.layout is None else self.layout.spaces
        flip = getattr(self.integrals, "flip", None)

        def flipped(x, name):
            return np.array(x) if flip is None else flip(x, spaces.get(name))

        ext = self.integrals.extents
        shapes = self.layout.shapes(ext) if self.layout is not None else {
            k: (ext["a"],) * int(k[1]) + (ext["i"],) * int(k[1]) for k in self.amplitudes}
        t = {k: np.ascontiguousarray(flipped(from_pyscf(k, x, shapes[k]), k))
             for k, x in zip(self.amplitudes, amplitudes)}
        e, r = self.residual_function()(t)
        return (e, *(swap_halves(flipped(r[k], k)) for k in self.amplitudes))

    # ------------------------------------------------------------------ solving
    def kernel(self, t1: np.ndarray | None = None, t2: np.ndarray | None = None):
        """PySCF's ``kernel(t1, t2)``: solve from the given amplitudes (PySCF layout; the
        MP2 guess for those not given, or the checkpoint with ``restart``); returns
        ``(e_corr, t1, t2)``."""
        self._solve({"t1": t1, "t2": t2})
        return (self.e_corr, *(getattr(self, k) for k in self.amplitudes))

    def run(self, *args: Any, **kwargs: Any) -> "CoupledCluster":
        """``kernel(*args, **kwargs)``; returns ``self``."""
        self.kernel(*args, **kwargs)
        return self

    def _solve(self, given: dict[str, Any]) -> None:
        if self._closed:
            raise ClosedError(f"{type(self).__name__} was closed (close() closed its integral "
                              f"file {getattr(self._integrals, 'path', '')}); make a new "
                              f"{type(self).__name__}(mf, ...) to run again (the file is "
                              "reused)")
        check_run_options(self)
        with verbosity(self.verbose), self._io_faults():
            Solve(self, {k: v for k, v in given.items() if v is not None}).run()

    @contextmanager
    def _io_faults(self):
        """An ``OSError`` while the method's files are written or read (disk full, a
        read-only folder) as a :class:`~sequant_eval.errors.StorageError` naming the file."""
        from .files import storage_error

        try:
            yield
        except StorageError:
            raise
        except OSError as err:
            where = getattr(err, "filename", None) or self.chkfile or self.integrals_on_disk
            raise storage_error(f"{self.method}", where or "(unknown file)", err) from err

    # ------------------------------------------------------------------ results
    @property
    def e_hf(self) -> float:
        """The reference energy (``mf.e_tot``)."""
        return self.integrals.e_hf

    def ccsd_t(self, t1: np.ndarray | None = None, t2: np.ndarray | None = None,
               eris: Any = None) -> float:
        """PySCF's ``ccsd_t()``: the (T) correction at ``t1``, ``t2`` (default: this run's
        amplitudes), evaluated under the same ``budget`` (or ``max_memory``) as the CCSD
        (:func:`~sequant_eval.chem.triples.ccsd_t_energy`; closed-shell, spin-orbital and
        unrestricted CCSD, ``t1``/``t2`` in the method's layout); ``eris`` is accepted for PySCF's signature and not read. Also kept:
        ``e_t`` and ``triples_result`` (with the predicted and metered peak)."""
        from .triples import ccsd_t_energy

        if self.triples is None:
            raise UnsupportedFeature(
                f"ccsd_t() is implemented for closed-shell, spin-orbital and unrestricted "
                f"CCSD; this is "
                f"{self.label} {self.method}: run CCSD(mf, spin_orbital=True) for the "
                f"spin-orbital (T), or use pyscf.cc")
        if t1 is None or t2 is None:
            if self.e_corr is None:
                raise SequantEvalError("ccsd_t() needs the CCSD amplitudes: call .run() "
                                       "first, or pass t1 and t2")
            t1 = self.t1 if t1 is None else t1
            t2 = self.t2 if t2 is None else t2
        if self.out_of_core:
            raise UnsupportedFeature("ccsd_t() reads the integrals in memory; run the CCSD "
                                     "without integrals_on_disk (a budget still batches it)")
        result = ccsd_t_energy(self.integrals, t1, t2, budget=self.budget,
                               max_memory=self.max_memory, backend=self.backend,
                               kind=self.triples)
        self.e_t, self.triples_result = result.e_t, result
        log.log(NOTE, "CCSD(T) correction = %.15g  (predicted peak %s, metered %s)",
                result.e_t, format_bytes(result.report.peak_bytes),
                format_bytes(result.meter.peak_bytes))
        return result.e_t

    @property
    def e_tot(self) -> float:
        """``e_hf + e_corr`` (Hartree)."""
        if self.e_corr is None:
            raise SequantEvalError(f"{self.method} has not run yet: call .run() first")
        return self.e_hf + self.e_corr

    @property
    def nocc(self) -> int:
        """Correlated occupied orbitals (spin orbitals for the spin-orbital methods)."""
        return self.integrals.nocc

    @property
    def nvir(self) -> int:
        """Correlated virtual orbitals (spin orbitals for the spin-orbital methods)."""
        return self.integrals.nvir

    def _norm_name(self) -> str:
        """What an iteration's norm measures: PySCF's amplitude change ``norm(t1,t2)`` when
        the energy can be had alone (PySCF's test), else the residual's ``norm(R)``."""
        return "norm(t1,t2)" if self.program().has_energy() else "norm(R)"

    def cycle_line(self, record: IterationRecord, seconds: float, peak: int) -> str:
        """The log line of one iteration, in PySCF's shape."""
        return (f"cycle = {record.iteration}  E_corr({self.method}) = {record.e_corr:.15g}  "
                f"dE = {record.delta_e:.9g}  {self._norm_name()} = {record.residual_norm:.6g}  "
                f"({seconds:.2f} s, peak {format_bytes(peak)})")

    def memory(self, title: str = ""):
        """The peak-memory report object (text/JSON/plot) of the residual program; needs a
        budget (the planned schedule)."""
        return self.evaluator().analyze().memory(title)

    def summary(self) -> str:
        """Energies, convergence and the memory report (prediction vs measurement)."""
        return summary_text(self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: energies, convergence, iteration history, memory."""
        return summary_dict(self)

    def close(self) -> None:
        """Close the integral file (out of core); the file stays for a later run."""
        if self.out_of_core and self._integrals is not None:
            self._integrals.close()
            self._closed = True

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({type(self.mf).__name__}, frozen={self.frozen!r}, "
                f"budget={str(self.budget)!r}, storage={self.storage!r})")

    def _record(self, result: CCResult, report: Any, meter: Any, ran: int,
                seconds: float) -> None:
        """Keep a solve's results (amplitudes in PySCF layout)."""
        self.result = replace(result, t=dict(result.t))
        self.e_corr, self.converged = result.e_corr, result.converged
        for name in self.amplitudes:
            setattr(self, name, np.ascontiguousarray(swap_halves(result.t[name])))
        self.iterations, self.iterations_run = result.iterations, ran
        self.report, self.meter = report, meter
        self.e_t = self.triples_result = None       # of other amplitudes
        self.seconds_per_iteration = seconds / max(1, ran)
        log.log(NOTE, "%s %s", self.method, "converged" if self.converged else "not converged")
        log.log(NOTE, "E(%s) = %.16g  E_corr = %.16g", self.method, self.e_tot, self.e_corr)
