"""What a cluster run holds, predicted before it runs: per task, per worker, on the client.

Every figure is a dry run of the partition's own segments (``partition.py``) — the same
walk, on shapes, that a NumPy run meters — so a task's metered peak equals its prediction
to the byte. A task's peak counts what it holds: the values it reads from before its block
(shared, held for the whole task), its batch's input slices, its temporaries and the
partial results it returns.

- *Per worker*: one task in flight per worker thread, so ``threads_per_worker`` times the
  largest task; a task's results leave the worker when the client gathers them (at once),
  and the next task is submitted only then (none waits queued on a worker).
- *On the client*: per client step, its own metered peak plus every value the client holds
  across it (results of earlier steps still to be read, values scattered to a block's
  tasks, kept until the block is done), plus, while a block's results are applied, the
  partial results of the later batches that came back early (up to ``window`` of them,
  and none at a block's last batch): results are applied in batch order, the
  single-process order, so the sums are bitwise the same. An upper bound, not a sweep.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...plan.regime import footprint_bytes
from ..dryrun import DryArray, DryRunBackend, ShapeSource
from ..engine import run_graph
from ..graph import Device
from .partition import Partition, Segment

__all__ = ["ClusterPlan", "plan_cluster", "segment_peak"]


@dataclass(frozen=True)
class ClusterPlan:
    """The predicted memory of a cluster run (bytes)."""

    workers: int
    threads_per_worker: int
    window: int                      # tasks in flight; results held ahead of their turn
    blocks: tuple[str, ...]          # the distributed outer blocks, described
    task_peaks: tuple[int, ...]      # every task's predicted peak, in submission order
    worker_peak_bytes: int           # threads_per_worker x the largest task
    client_peak_bytes: int
    budget_bytes: float
    client_loops: tuple[int, ...]    # outer loops run on the client (batches not independent)

    @property
    def tasks(self) -> int:
        """Number of distributed tasks."""
        return len(self.task_peaks)

    @property
    def task_peak_bytes(self) -> int:
        """The largest predicted peak of one task (0 with no tasks)."""
        return max(self.task_peaks, default=0)

    def dump(self) -> str:
        """Stable text: workers and threads, per-worker and client peaks, then the distributed
        blocks and any outer loops kept on the client."""
        from ...units import format_bytes

        budget = (f" (budget {format_bytes(self.budget_bytes)})"
                  if self.budget_bytes != float("inf") else "")
        lines = [f"cluster: {self.workers} workers x {self.threads_per_worker} threads; "
                 f"{self.tasks} tasks in {len(self.blocks)} outer blocks",
                 f"  per-worker peak {format_bytes(self.worker_peak_bytes)} "
                 f"({self.worker_peak_bytes} B){budget}",
                 f"  client peak {format_bytes(self.client_peak_bytes)} "
                 f"({self.client_peak_bytes} B), window {self.window}"]
        lines += [f"  tasks over {b}" for b in self.blocks]
        if self.client_loops:
            lines.append("  on the client (batches not independent): " +
                         ", ".join(f"L{l}" for l in self.client_loops))
        return "\n".join(lines) + "\n"


def segment_peak(part: Partition, seg: Segment) -> int:
    """A segment's peak (bytes) by a dry run of its graph; its stored inputs count."""
    if seg.empty:
        return 0
    itemsize = part.analysis.plan.policy.itemsize
    be = DryRunBackend(itemsize)
    store = {i: DryArray(tuple(part.graph.nodes[i].shape), itemsize) for i in seg.stored}
    _, meter = run_graph(seg.graph, seg.roots, part.forest, {Device.CPU: be},
                         ShapeSource(part.analysis.shapes), store)
    return meter.peak_bytes


def plan_cluster(part: Partition, workers: int, threads_per_worker: int = 1,
                 budget: float = float("inf"), window: int | None = None) -> ClusterPlan:
    """Predict a run of ``part`` on ``workers`` workers of ``threads_per_worker`` threads
    under ``budget`` (bytes; the budget the schedule was fitted to); ``window`` (default:
    the threads) bounds the tasks in flight and the results held ahead of their turn."""
    window = window or workers * threads_per_worker
    itemsize = part.analysis.plan.policy.itemsize
    size = lambda gid: footprint_bytes(part.graph.nodes[gid].shape, itemsize)  # noqa: E731
    task_peaks = tuple(segment_peak(part, t.segment) for t in part.tasks)
    steps = part.steps
    avail: dict[int, int] = {}
    for s in steps:
        avail.update((g, s.step) for g in s.gives)
    early: dict[int, int] = {}                       # apply step → results held early
    for b in part.blocks:
        parts = max(sum(size(g) for g in t.segment.gives) for t in b.tasks)
        for k, (t, ap) in enumerate(zip(b.tasks, b.applies)):
            avail.update((g, ap.step) for g in t.segment.gives)
            early[ap.step] = min(window, len(b.tasks) - 1 - k) * parts
    client = 0
    for s in steps:
        mine = set(s.stored) | set(s.gives)
        carried = sum(size(g) for g, at in avail.items()
                      if at <= s.step <= part.last_use.get(g, -1) and g not in mine)
        client = max(client, segment_peak(part, s) + carried + early.get(s.step, 0))
    return ClusterPlan(workers, threads_per_worker, window,
                       tuple(b.describe() for b in part.blocks), task_peaks,
                       threads_per_worker * max(task_peaks, default=0), client,
                       float(budget), part.client_loops)
