"""One fitted program, one process against a 2-worker Dask LocalCluster: times and peaks.

Shared by ``cluster_dimer.py`` and ``distributed_out_of_core.py``: a warm-up on each side,
``rounds`` interleaved rounds (one process, cluster, ...), then a cluster run that traces
every task's allocations (tracemalloc inside the task) against the predicted per-worker
peak; results compared with the single-process ones.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np


def side_by_side(ev, tensors, rounds: int) -> dict:
    """The figures of ``ev`` evaluated on ``tensors`` both ways (see the module docstring)."""
    import distributed

    load_before = os.getloadavg()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        rep = ev.analyze(client=client)
        print(rep.cluster.dump(), flush=True)
        ref = ev.evaluate(tensors)                               # warm-up, both sides
        out = ev.evaluate(tensors, client=client)
        diff = max(float(np.abs(out[k] - ref[k]).max() / max(1.0, np.abs(ref[k]).max()))
                   for k in ref)
        bitwise = all(np.array_equal(out[k], ref[k]) for k in ref)
        one, many = [], []
        for r in range(rounds):
            t0 = time.perf_counter()
            ev.evaluate(tensors)
            one.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ev.evaluate(tensors, client=client)
            many.append(time.perf_counter() - t0)
            print(f"round {r}: one process {one[-1]:.2f} s, cluster {many[-1]:.2f} s",
                  flush=True)
        _, meter = ev.evaluate(tensors, client=client, return_meter=True, trace_tasks=True)
    plan = meter.plan
    traced = max((t.traced_bytes for t in meter.tasks), default=0)
    return {
        "budget_bytes": plan.budget_bytes, "single_peak_bytes": rep.peak_bytes,
        "loops": len(rep.loops), "rounds": rounds, "one_process_s": one, "cluster_s": many,
        "tasks": plan.tasks, "blocks": len(plan.blocks),
        "predicted_worker_peak_bytes": plan.worker_peak_bytes,
        "max_task_metered_bytes": meter.task_peak_bytes,
        "max_task_traced_bytes": traced,
        "traced_over_predicted": traced / plan.worker_peak_bytes if plan.worker_peak_bytes
        else None,
        "predicted_client_peak_bytes": plan.client_peak_bytes,
        "client_metered_bytes": meter.client_peak_bytes,
        "task_seconds": sum(t.seconds for t in meter.tasks),
        "task_flops_share": sum(t.flops for t in meter.tasks) / meter.flops,
        "max_rel_diff": diff, "bitwise": bitwise,
        "load_before": load_before, "load_after": os.getloadavg(),
    }
