"""Run a partitioned schedule on a Dask cluster (``distributed.Client``).

The client runs the work outside the outermost batch loops (``partition.py``); every batch
of a distributed outer block is one Dask task running the core's graph executor
(``runtime/engine.py``) on that batch's graph. Values computed before a block and read
inside it are scattered once to every worker (broadcast) and handed to the tasks as
dependencies; inputs travel as a way to read them (``shipping.py``), so each worker reads
its own batch slices. Results are gathered as each task finishes and applied on the client
in batch order (sums, scatters and the additions into equation sums, in the single-process
order: bitwise the same result); one task is in flight per worker thread, and at most
``window`` results are held ahead of the batch being applied, which bounds what the client
buffers (``plan.py``).

Dask itself is imported only here, and only when a cluster run is asked for.
"""
from __future__ import annotations

import threading
import time
import tracemalloc
import uuid
from collections import deque
from dataclasses import dataclass

import numpy as np

from ...errors import DistributedError, TaskFailed
from ...forest.values import Forest
from ...units import format_bytes
from ..backends import NumpyBackend
from ..engine import run_graph
from ..graph import Device
from ..sources import TensorSource
from .partition import Block, Partition, Segment, Task
from .plan import ClusterPlan, plan_cluster
from .shipping import open_inputs, ship_inputs

__all__ = ["INSTALL", "import_distributed", "cluster_shape", "run_on_cluster", "run_task",
           "TaskRecord", "ClusterMeter"]

INSTALL = "pip install 'sequant-eval[dist]'"


def import_distributed():
    """``distributed``, or a DistributedError saying how to install it."""
    try:
        import distributed
    except ImportError as err:
        raise DistributedError(
            f"client= runs the evaluation on a Dask cluster, which needs dask.distributed "
            f"(not installed here: {err}); install it with {INSTALL}, or evaluate without "
            f"client=") from err
    return distributed


def cluster_shape(client) -> tuple[int, int]:
    """(workers, threads per worker) of a ``distributed.Client``; anything else is refused."""
    distributed = import_distributed()
    if not isinstance(client, distributed.Client):
        raise DistributedError(f"client must be a distributed.Client, got "
                               f"{type(client).__name__} {client!r}")
    if getattr(client, "status", "running") != "running":
        raise DistributedError(f"the client {client!r} is {client.status}: connect a new "
                               f"distributed.Client, or evaluate without client=")
    try:
        nthreads = client.nthreads()
    except Exception as err:            # a client whose scheduler is gone
        raise DistributedError(f"cannot reach the cluster of {client!r} "
                               f"({type(err).__name__}: {err}); connect a new "
                               f"distributed.Client, or evaluate without client=") from err
    if not nthreads:
        raise DistributedError(f"the cluster of {client!r} has no workers: start some (e.g. "
                               f"distributed.LocalCluster(n_workers=2, threads_per_worker=1))")
    return len(nthreads), max(nthreads.values())


@dataclass(frozen=True)
class TaskRecord:
    """What one task measured on its worker."""

    block: int                      # index in ``Partition.blocks``
    loop: int
    batch: int
    worker: str
    peak_bytes: int                 # the executor's metered peak
    traced_bytes: int | None        # tracemalloc's peak inside the task (when traced)
    seconds: float
    flops: float = 0.0


@dataclass(frozen=True)
class ClusterMeter:
    """What a cluster run measured, beside what was predicted (``plan``)."""

    plan: ClusterPlan
    tasks: tuple[TaskRecord, ...]
    client_peak_bytes: int          # metered: a client step's peak plus what it holds across
    flops: float
    seconds: float

    @property
    def task_peak_bytes(self) -> int:
        """The largest metered peak of one task (0 with no tasks)."""
        return max((t.peak_bytes for t in self.tasks), default=0)

    @property
    def peak_bytes(self) -> int:
        """The larger of the client's and the largest task's metered peak."""
        return max(self.client_peak_bytes, self.task_peak_bytes)

    def dump(self) -> str:
        """One line: task count, metered task and client peaks beside their predictions, wall
        time."""
        return (f"cluster meter: {len(self.tasks)} tasks; task peak "
                f"{format_bytes(self.task_peak_bytes)} (predicted per worker "
                f"{format_bytes(self.plan.worker_peak_bytes)}); client peak "
                f"{format_bytes(self.client_peak_bytes)} (predicted "
                f"{format_bytes(self.plan.client_peak_bytes)}); {self.seconds:.3f} s\n")


@dataclass(frozen=True)
class _Shared:
    """Scattered once per run: what every task needs besides its own graph."""

    forest: Forest
    extents: dict
    dtype: np.dtype
    program: str                    # the partition's token: kernel plans are per program


_LOCAL = threading.local()


class _QuietLoop:
    """The worker's event loop held still while a traced task runs.

    tracemalloc counts the allocations of every thread in the process, and a worker's
    event loop thread keeps allocating while a task runs: every message it sends
    (heartbeats, task states, the previous result) packs through msgpack, whose packer
    takes a 256 KiB buffer. How many of those overlap the task's own peak depends on how
    long the task takes, so on the machine's load, not on the task. Parked on a callback
    it runs before the trace starts and leaves after the trace stops, the loop does none
    of that in between; what is traced is the task. The worker sends nothing while it is
    parked (a traced task longer than the scheduler's ``worker-ttl`` would be taken for
    dead), and a task that needs the loop itself (a provider calling back into Dask) must
    not be traced. Outside a worker, or on the loop's own thread, nothing is parked."""

    def __init__(self) -> None:
        self._parked, self._leave = threading.Event(), threading.Event()
        self._loop = None
        try:
            from distributed import get_worker

            loop = get_worker().loop
        except (ImportError, ValueError, AttributeError):
            return
        owner = getattr(getattr(loop, "asyncio_loop", None), "_thread_id", None)
        if owner != threading.get_ident():
            self._loop = loop

    def _hold(self) -> None:
        self._parked.set()
        self._leave.wait()

    def park(self, timeout: float = 60.0) -> None:
        """Return once the loop has finished what it was doing and waits in ``_hold``
        (after ``timeout`` seconds without that, go on unparked: the trace may then
        include the loop's allocations)."""
        if self._loop is not None:
            self._loop.add_callback(self._hold)
            self._parked.wait(timeout)

    def release(self) -> None:
        """Let the loop go on (it leaves ``_hold`` at once, or never waits in it)."""
        self._leave.set()


def run_task(shared: _Shared, segment: Segment, bundle: dict, stored: dict, trace: bool):
    """On a worker: one batch's graph by the one executor; its results by global node, and
    (metered peak, traced peak or None, seconds, worker address)."""
    source = TensorSource(shared.forest, open_inputs(bundle), shared.extents)
    # one backend per worker thread and program: its kernel plans are keyed by value ids,
    # which mean another contraction in another forest
    if getattr(_LOCAL, "program", None) != shared.program:
        _LOCAL.program, _LOCAL.backend = shared.program, NumpyBackend()
    be = _LOCAL.backend
    be.dtype = shared.dtype
    start = time.perf_counter()
    quiet = _QuietLoop() if trace else None
    if trace:
        quiet.park()                  # tracemalloc counts every thread: the task's alone
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    try:
        out, meter = run_graph(segment.graph, segment.roots, shared.forest,
                               {Device.CPU: be}, source, stored)
        traced = tracemalloc.get_traced_memory()[1] - base if trace else None
    finally:
        if trace:
            tracemalloc.stop()
            quiet.release()
    try:
        from distributed import get_worker

        where = get_worker().address
    except (ImportError, ValueError):
        where = "?"
    results = {g: out[r] for g, r in zip(segment.gives, segment.roots)}
    return results, (meter.peak_bytes, traced, time.perf_counter() - start, where,
                     meter.flops)


def run_on_cluster(part: Partition, client, tensors, source: TensorSource,
                   budget: float = float("inf"), progress=None, trace: bool = False):
    """Evaluate ``part`` with ``client``: ``({equation: array}, ClusterMeter)``. Refuses,
    before any work, a cluster whose per-worker peak would exceed ``budget`` (bytes)."""
    workers, threads = cluster_shape(client)
    plan = plan_cluster(part, workers, threads, budget)
    if plan.worker_peak_bytes > plan.budget_bytes:
        k = int(np.argmax(plan.task_peaks))
        t = part.tasks[k]
        way = (f"start the workers with one thread each (threads_per_worker=1, dask worker "
               f"--nthreads 1), or plan for a budget {threads}x smaller" if threads > 1 else
               f"raise the budget to at least {int(plan.worker_peak_bytes)} B (a task holds "
               f"its batch's inputs, results and the values shared with it, which near the "
               f"single-process minimum can exceed it; se.analyze(..., workers=N) shows the "
               f"per-worker peak), or evaluate without client=")
        raise DistributedError(
            f"on workers of {threads} threads the per-worker peak would be "
            f"{format_bytes(plan.worker_peak_bytes)}, over the budget "
            f"{format_bytes(plan.budget_bytes)} (the largest task, batch {t.batch} of "
            f"{part.blocks[t.block].describe()}, holds {format_bytes(plan.task_peaks[k])}); "
            + way)
    return _Run(part, client, source, progress, trace, plan).go(tensors)


class _Run:
    """One evaluation on the cluster: the client's held values and what it measured."""

    def __init__(self, part: Partition, client, source, progress, trace, plan) -> None:
        self.part, self.client, self.source = part, client, source
        self.progress, self.trace, self.plan = progress, trace, plan
        self.distributed = import_distributed()
        self.held: dict[int, object] = {}
        self.early: dict[int, dict] = {}          # results come back before their turn
        self.records: list[TaskRecord] = []
        self.client_peak = 0
        self.flops = 0.0
        self.be = NumpyBackend()
        self.be.dtype = source.dtype()
        self.token = uuid.uuid4().hex[:8]

    def go(self, tensors):
        start = time.perf_counter()
        self.tensors = tensors
        self.inputs = self.send_inputs()
        self.local(self.part.pre)
        for block in self.part.blocks:
            self.block(block)
        results = {name: self.held[g] for name, g in self.part.results.items()}
        meter = ClusterMeter(self.plan, tuple(self.records), self.client_peak, self.flops,
                             time.perf_counter() - start)
        return results, meter

    def send_inputs(self) -> tuple:
        """The forest and the inputs, broadcast to the workers: ``(shared, bundle)``."""
        c = self.client
        try:
            shared = c.scatter(_Shared(self.part.forest, dict(self.source.extents),
                                       self.source.dtype(), self.part.token),
                               broadcast=True, hash=False)
            bundle = ship_inputs(self.tensors,
                                 lambda a: c.scatter(a, broadcast=True, hash=False))
        except DistributedError:
            raise
        except Exception as err:
            raise DistributedError(
                f"could not send the inputs to the workers ({type(err).__name__}: {err}); "
                f"give tensors the workers can read: NumPy arrays, h5py datasets, np.memmap, "
                f"zarr arrays or a picklable provider(spaces, ranges)") from err
        return shared, bundle

    def local(self, seg: Segment) -> None:
        """A client step; then drop what no later step reads."""
        if not seg.empty:
            out, meter = run_graph(seg.graph, seg.roots, self.part.forest,
                                   {Device.CPU: self.be}, self.source,
                                   {g: self.held[g] for g in seg.stored})
            self.held.update((g, out[r]) for g, r in zip(seg.gives, seg.roots))
            mine = set(seg.stored) | set(seg.gives)
            carried = sum(x.nbytes for g, x in self.held.items() if g not in mine)
            carried += sum(x.nbytes for res in self.early.values() for x in res.values())
            self.client_peak = max(self.client_peak, meter.peak_bytes + carried)
            self.flops += meter.flops
        last = self.part.last_use
        for g in [g for g in self.held if last.get(g, -1) <= seg.step]:
            del self.held[g]

    def block(self, block: Block) -> None:
        c, ac = self.client, self.distributed.as_completed()
        hoisted = block.hoisted

        def send_hoisted() -> dict:
            return dict(zip(hoisted, c.scatter([self.held[g] for g in hoisted],
                                               broadcast=True, hash=False))) if hoisted else {}

        scattered = send_hoisted()
        pending, running = deque(block.tasks), {}
        applied, sent, resent = 0, 0, 0           # inputs sent again after a loss: ``sent``

        def submit() -> None:
            t = pending.popleft()
            key = f"sequant-eval-L{block.loop.id}-b{t.batch}-{self.token}-{sent}"
            shared, bundle = self.inputs
            f = c.submit(run_task, shared, t.segment, bundle,
                         {g: scattered[g] for g in t.segment.stored}, self.trace,
                         key=key, pure=False)
            running[f.key] = (t, sent)
            ac.add(f)

        while self._room(block, pending, running, applied):
            submit()
        for f in ac:
            t, generation = running.pop(f.key)
            try:
                out, (peak, traced, seconds, where, flops) = f.result()
            except Exception as err:
                # a worker died holding data the client sent: the scheduler forgets a
                # scattered value whose holders are gone and cancels what reads it. Send
                # the inputs again (once per loss) and rerun the tasks that failed so.
                again = _cancelled(err) and (
                    generation < sent or (resent < LOST_INPUT_RETRIES
                                          and _lost(self.inputs, scattered)))
                if again:
                    if generation == sent:
                        self.inputs, scattered = self.send_inputs(), send_hoisted()
                        sent, resent = sent + 1, resent + 1
                    pending.appendleft(t)
                    while self._room(block, pending, running, applied):
                        submit()
                    continue
                for other in list(running):
                    c.cancel(other)
                raise _failed(block, t, err) from err
            f.release()
            self.records.append(TaskRecord(t.block, block.loop.id, t.batch, where, peak,
                                           traced, seconds, flops))
            self.flops += flops
            self.early[t.batch] = {g: x if x.flags.writeable else np.array(x)   # the client
                                   for g, x in out.items()}                   # may add into it
            while applied in self.early:
                self.held.update(self.early.pop(applied))
                self.local(block.applies[applied])
                applied += 1
            if self.progress is not None:
                self.progress("cluster tasks", len(self.records), len(self.part.tasks))
            while self._room(block, pending, running, applied):
                submit()
        scattered.clear()             # the futures released: the workers may drop them

    def _room(self, block: Block, pending, running, applied: int) -> bool:
        """Whether to submit the next task: one task in flight per worker thread (none
        queued behind a running one, so a worker sends its result before it starts the
        next), and at most ``window`` results held ahead of the batch being applied."""
        window = self.plan.window
        ahead = len(block.tasks) - len(pending) - applied
        return bool(pending) and len(running) < window and ahead <= window


#: How often one block sends its inputs again after workers lost them (each loss once).
LOST_INPUT_RETRIES = 3


def _cancelled(err: BaseException) -> bool:
    """Whether a task's future was cancelled (by the scheduler or by someone else)."""
    return type(err).__name__ in ("FutureCancelledError", "CancelledError")


def _lost(inputs: tuple, hoisted: dict) -> bool:
    """Whether any future the run scattered is no longer held by the cluster (a task
    cancelled while they all are was cancelled by someone: not retried)."""
    from distributed import Future

    shared, bundle = inputs
    sent = [shared, *hoisted.values()]
    for given in bundle.values():             # a tensor, or a mapping of its blocks
        sent.extend(given.values() if isinstance(given, dict) else (given,))
    return any(f.status != "finished" for f in sent if isinstance(f, Future))


def _failed(block: Block, t: Task, err: BaseException) -> TaskFailed:
    lo, hi = t.span
    what = (f"batch {t.batch} [{lo}:{hi}] of {block.describe()}")
    if type(err).__name__ == "KilledWorker":
        way = ("its workers kept dying (distributed.scheduler.allowed-failures); check the "
               "worker logs (a memory limit?), or evaluate without client= in one process")
    else:
        way = ("fix the cause and rerun; evaluate(..., client=None) runs the same schedule "
               "in one process")
    return TaskFailed(f"the task for {what} failed: {type(err).__name__}: {err}; {way}",
                      block.loop.id, t.batch, block.equations, err)
