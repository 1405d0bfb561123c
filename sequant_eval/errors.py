"""The package's exceptions: one root, one leaf per kind of refusal.

Every message names the culprit (the term, the index, the tensor, the budget) and, where
there is one, the way out.
"""
from __future__ import annotations

__all__ = [
    "SequantEvalError",
    "ParseError",
    "ExpressionError",
    "MissingTensor",
    "ShapeMismatch",
    "UnknownSpace",
    "InfeasibleBudget",
    "ScheduleError",
    "UnsupportedFeature",
    "InputTypeError",
    "PolicyError",
    "UsageError",
    "StaleInput",
    "DistributedError",
    "TaskFailed",
    "BudgetError",
    "CheckpointError",
    "CheckpointMismatch",
    "TruncatedInput",
    "StorageError",
    "OptionError",
    "ClosedError",
    "FileMismatch",
]


class SequantEvalError(Exception):
    """Root of every error this package raises on purpose."""


class ParseError(SequantEvalError):
    """Malformed equation text; carries the 1-based line and column and the offending text."""

    def __init__(self, message: str, line: int, column: int, text: str = "") -> None:
        self.line = line
        self.column = column
        self.text = text
        where = f"line {line}, column {column}"
        snippet = ""
        if text:
            lo = max(0, column - 40)
            window = text[lo : column + 40]
            snippet = f"\n    {window}\n    {' ' * (column - 1 - lo)}^"
        super().__init__(f"{where}: {message}{snippet}")


class ExpressionError(SequantEvalError):
    """Well-formed text that does not describe a valid equation (e.g. mismatched free indices)."""


class MissingTensor(SequantEvalError):
    """A tensor (or one block of it) that an equation reads was not supplied."""


class ShapeMismatch(SequantEvalError):
    """A supplied array's shape disagrees with the extents of the slots that read it."""


class UnknownSpace(SequantEvalError):
    """An index space used by an equation has no extent."""


class InfeasibleBudget(SequantEvalError):
    """No plan meets the memory budget; ``minimum`` is the smallest budget that works.

    ``minimum`` may be handed over as a function: a hopeless budget is refused at once and
    the (slower) search for the minimum runs only when ``minimum`` is read."""

    def __init__(self, message: str, budget: float, minimum) -> None:
        self.budget = budget
        self._minimum = minimum
        super().__init__(message)

    @property
    def searched(self) -> bool:
        """Whether ``minimum`` is known already (reading it then costs nothing)."""
        return not callable(self._minimum)

    @property
    def minimum(self) -> float:
        """The smallest feasible budget in bytes (searched for on first read when handed over
        as a function)."""
        if callable(self._minimum):
            self._minimum = self._minimum()
        return self._minimum


class ScheduleError(SequantEvalError):
    """A schedule or cell table that violates a well-formedness rule; ``loops``: the loops
    the violated rule is about, where the sequencer knows them (the fuser reads them to
    find the fusion to blame)."""

    def __init__(self, message: str, loops: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.loops = tuple(loops)


class UnsupportedFeature(SequantEvalError):
    """Input that is valid but not (yet) evaluable, e.g. numerical composite indices."""


class InputTypeError(SequantEvalError, TypeError):
    """An argument of the wrong type, e.g. bytes or None where equation text is expected."""


class PolicyError(SequantEvalError, ValueError):
    """A budget or batch policy that cannot be read: a malformed byte count, a block size
    that is not a positive integer, a space the extents do not know."""


class UsageError(SequantEvalError):
    """A command-line or environment mistake: a missing or unreadable file, an output folder
    that does not exist, a missing optional dependency, a development command run outside a
    source checkout."""


class StaleInput(SequantEvalError):
    """A persisted evaluation's kept intermediates no longer match its inputs."""


class DistributedError(SequantEvalError):
    """A run on a Dask cluster that cannot go ahead: dask.distributed not installed, a client
    that is not a ``distributed.Client``, an option a cluster run does not support, inputs
    the workers cannot read, a per-worker peak over the budget."""


class TaskFailed(DistributedError):
    """A task of a cluster run failed on its worker (or its workers kept dying). Names the
    equations, the loop and the batch; ``cause`` is the worker's exception."""

    def __init__(self, message: str, loop: int, batch: int, equations: tuple[str, ...],
                 cause: BaseException | None = None) -> None:
        self.loop = loop
        self.batch = batch
        self.equations = equations
        self.cause = cause
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (str(self), self.loop, self.batch, self.equations, None))


class SinkError(SequantEvalError):
    """A result sink (``out=``) that cannot take its result: an unknown result name, a
    destination of the wrong shape, dtype or kind, a read-only one, or a write-once callable
    given a result that is accumulated over several writes. Raised before any work."""


class BudgetError(PolicyError):
    """A memory budget that cannot be read (``sequant_eval.budget.Budget.parse``): not a
    positive byte count, a text such as ``'25GB'``, a share such as ``'25%'`` or None.
    ``value`` is what was given."""

    def __init__(self, message: str, value=None) -> None:
        self.value = value
        super().__init__(message)


class CheckpointError(SequantEvalError):
    """A checkpoint file that cannot be used: missing, unreadable, or of another format."""


class CheckpointMismatch(CheckpointError):
    """A checkpoint of another system (molecule, basis, orbitals, frozen core or equations);
    ``differences`` names each part that differs."""

    def __init__(self, message: str, differences: tuple[str, ...] = ()) -> None:
        self.differences = tuple(differences)
        super().__init__(message)


class TruncatedInput(MissingTensor):
    """A file-backed input (an HDF5 dataset, a memory map) whose file on disk no longer
    holds all of its data: the file was truncated after it was opened, so a read would
    return zeros (HDF5) or kill the process (a memory map). Names the tensor and the file."""


class StorageError(SequantEvalError):
    """A file the package writes or reads on the user's behalf (an integral file, the
    amplitudes and DIIS vectors out of core, a checkpoint) could not be: the disk is full
    (``ENOSPC``), the folder is read-only, the file vanished. ``path`` names the file (or
    folder), ``errno`` the operating system's error number (None when unknown). The command
    line exits with status 3 for it (an I/O failure, not a usage mistake)."""

    def __init__(self, message: str, path=None, errno: int | None = None) -> None:
        self.path = path
        self.errno = errno
        super().__init__(message)


class OptionError(SequantEvalError, ValueError):
    """A method option with a value it cannot take (``conv_tol=inf``, ``max_cycle=0``,
    ``diis_space=-1``, a ``beam`` width that is not a positive integer). Names the option,
    the value and what it may be."""


class ClosedError(SequantEvalError):
    """An object used after its ``close()``: its files are closed; make a new one."""


class FileMismatch(SequantEvalError):
    """A file the package wrote earlier (an integral file, a checkpoint) that does not hold
    what its header says: a block whose checksum differs (the file was changed after it
    was written), a header of another format or of another system, a missing block.
    ``path`` names the file, ``reasons`` each thing that differs. Such a file is never
    used: an integral file is rewritten, a checkpoint refused."""

    def __init__(self, message: str, path=None, reasons: tuple[str, ...] = ()) -> None:
        self.path = path
        self.reasons = tuple(reasons)
        super().__init__(message)
