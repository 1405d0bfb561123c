"""One solve of a CC method: starting amplitudes, the solver, checkpoints, the records.

:class:`Solve` is what ``kernel()`` runs: it opens the storage's session (where the
amplitudes and DIIS vectors live during the solve), starts from the given amplitudes,
the checkpoint (``restart``) or the MP2 guess, runs :func:`~sequant_eval.chem.solver.solve_cc`
on the method's residual, and after every iteration writes the checkpoint (``chkfile``),
logs the iteration and calls the method's ``callback``.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import UsageError
from ..expr import to_text
from .checkpoint import (Fingerprint, open_checkpoint, refuse_foreign,
                         remove_stale_temporaries, write_checkpoint)
from .process_memory import release_free_memory
from .solver import IterationRecord, SolverState, from_pyscf, solve_cc

__all__ = ["Solve", "fingerprint"]

log = logging.getLogger("sequant_eval.chem")


def fingerprint(cc: Any) -> Fingerprint:
    """What ``cc``'s amplitudes belong to: its mean field, frozen orbitals and equations."""
    text = to_text(cc.plain_equations())
    return Fingerprint.of(cc.mf, cc.integrals, f"{cc.method} ({cc.label})", text)


class Solve:
    """``cc``'s solve from ``given`` amplitudes (PySCF layout, by name; may be empty)."""

    def __init__(self, cc: Any, given: dict[str, Any]) -> None:
        if given and cc.restart:
            raise UsageError(f"{cc.method}: give starting amplitudes or restart=True, not both")
        unknown = sorted(set(given) - set(cc.amplitudes))
        if unknown:
            raise UsageError(f"{cc.method} has no amplitude {unknown[0]!r}")
        self.cc, self.given = cc, given
        self.meters: list = []
        self.fingerprint = fingerprint(cc) if (cc.chkfile or cc.restart) else None
        if cc.chkfile:
            if cc.restart is not True:                # read first when restarted from it
                refuse_foreign(cc.chkfile)            # an SCF chkfile is not written over
            remove_stale_temporaries(cc.chkfile)      # of a run killed while writing it
        self.clock = time.perf_counter()
        self.start_iteration = 0

    def run(self) -> None:
        cc = self.cc
        program, ints = cc.program(), cc.integrals
        session = cc.storage.session(ints, cc.diis_space, triples="t3" in cc.amplitudes,
                                     exchange=cc.exchange, layout=cc.layout)
        started = time.perf_counter()
        try:
            t_init, history = self._start(session)
            self.start_iteration = len(history)
            residual, energy = cc.solver_functions(self.meters, session)
            result = solve_cc(residual, t_init, session.denominators(),
                              callback=self._on_iteration, diis=session.diis, history=history,
                              energy=energy, **self._options(session))
            result = type(result)(result.e_corr, session.finish(result.t), result.iterations,
                                  result.converged, result.history)
        finally:
            session.close()
        ran = result.iterations - self.start_iteration
        cc._record(result, program.report(), self.meters[-1] if self.meters else None, ran,
                   time.perf_counter() - started)

    def _options(self, session: Any) -> dict[str, Any]:
        cc = self.cc
        return dict(conv_energy=cc.conv_tol, conv_residual=cc.conv_tol_normt,
                    max_iter=cc.max_cycle, diis_space=cc.diis_space, **session.options)

    def _start(self, session: Any):
        """``(t_init, history)``: from the checkpoint, the given amplitudes or the guess."""
        cc = self.cc
        if cc.restart:
            source = cc.chkfile if cc.restart is True else cc.restart
            if not source:
                raise UsageError(f"{cc.method}: restart=True needs chkfile=PATH, the "
                                 "checkpoint to continue from (or restart=PATH)")
            with open_checkpoint(source) as ck:
                ck.check(self.fingerprint)
                spaces = {} if cc.layout is None else cc.layout.spaces
                layout = [(k, ck.amplitudes[k].shape, *([spaces[k]] if k in spaces else []))
                          for k in cc.amplitudes]
                phases = ck.fingerprint.phases(self.fingerprint, layout)
                t = session.restore(ck.amplitudes, phases)
                if session.diis is not None and ck.diis is not None:
                    session.diis.restore(ck.diis, None if phases is None else phases.flat)
                log.info("restart from %s at iteration %d", source, len(ck.history))
                return t, list(ck.history)
        t = session.guess()
        if self.given:                      # checked against the guess's shapes first
            t = session.restore({k: session.adopt(from_pyscf(k, self.given[k],
                                                             tuple(v.shape)), k)
                                 if k in self.given else v for k, v in t.items()})
        return t, []

    def _on_iteration(self, record: IterationRecord, state: SolverState) -> None:
        cc = self.cc
        if cc.out_of_core:                  # the residual's freed batches back to the system
            release_free_memory()
        if cc.chkfile and not state.done:
            write_checkpoint(cc.chkfile, self.fingerprint, state)
        now = time.perf_counter()
        seconds, self.clock = now - self.clock, now
        peak = self.meters[-1].peak_bytes if self.meters else 0
        log.info("%s", cc.cycle_line(record, seconds, peak))
        if cc.callback is not None:
            cc.callback(record, seconds, peak)
