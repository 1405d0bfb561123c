"""A CC method's run-time options: their checks before a run does any work, and
``verbose``'s effect (PySCF's levels, through the ``sequant_eval.chem`` logger).

Options can be set on the method object after it is made (as in PySCF), so they are
checked when a run starts, before the checkpoint or any other file is written: a value a
solve cannot honour is an :class:`~sequant_eval.errors.OptionError` naming the option and
what to give instead.
"""
from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import OptionError

__all__ = ["check_run_options", "verbosity", "NOTE", "log"]

#: The logger of the chemistry front end.
log = logging.getLogger("sequant_eval.chem")
#: PySCF's NOTE level (between INFO and WARNING): the final energies.
NOTE = 25
logging.addLevelName(NOTE, "NOTE")


def check_run_options(cc: Any) -> None:
    """Refuse (OptionError) options a solve cannot honour: ``conv_tol`` and
    ``conv_tol_normt`` must be positive finite numbers, ``max_cycle`` an integer >= 1
    (0 would return the guess, unconverged), ``diis_space`` an integer >= 0; ``verbose``
    an integer or bool, ``callback`` callable, ``chkfile`` a path, ``restart`` a bool or a
    path, ``backend`` one a CC method runs on."""
    for name in ("conv_tol", "conv_tol_normt"):
        value = getattr(cc, name)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                             np.integer)) \
                or not 0 < float(value) < float("inf"):
            raise OptionError(f"{name}={value!r}: give a positive finite number (PySCF's "
                              f"default {getattr(type(cc), name)})")
    for name, least in (("max_cycle", 1), ("diis_space", 0)):
        value = getattr(cc, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise OptionError(f"{name}={value!r}: give an integer >= {least} (PySCF's "
                              f"default {getattr(type(cc), name)})")
    # unchecked, these raised untyped errors, or failed after the first checkpoint
    if cc.verbose is not None and not isinstance(cc.verbose, (bool, int, np.integer)):
        raise OptionError(f"verbose={cc.verbose!r}: give an integer (PySCF's levels: 3 the "
                          f"energies, 4 every iteration, 5 debug) or True")
    if cc.callback is not None and not callable(cc.callback):
        raise OptionError(f"callback={cc.callback!r}: give a function callback(record, "
                          f"seconds, peak_bytes), called after every iteration, or None")
    if cc.chkfile is not None and not isinstance(cc.chkfile, (str, os.PathLike)):
        raise OptionError(f"chkfile={cc.chkfile!r}: give a file path (str or pathlib.Path)")
    if not isinstance(cc.restart, (bool, str, os.PathLike)):
        raise OptionError(f"restart={cc.restart!r}: give True (from chkfile), False, or the "
                          f"path of the checkpoint to continue from")
    if cc.backend not in ("numpy", "cupy", "auto"):
        raise OptionError(f"backend={cc.backend!r}: a CC method runs on 'numpy', 'cupy' or "
                          f"'auto' (a dry run of its residual: se.analyze on its equations)")


@contextmanager
def verbosity(verbose: Any):
    """While the block runs, print the ``sequant_eval.chem`` records of PySCF level
    ``verbose`` and above to stdout (3: NOTE, 4: INFO, 5: DEBUG; ``True`` is 4; below 3:
    nothing is added)."""
    level = 4 if verbose is True else int(verbose or 0)
    if level < 3:
        yield
        return
    threshold = logging.DEBUG if level >= 5 else logging.INFO if level == 4 else NOTE
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(threshold)
    old = log.level
    if log.getEffectiveLevel() > threshold:
        log.setLevel(threshold)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
