"""The Dask layer: a fitted schedule cut into client work and one task per outer batch
(``partition``), its memory predicted per task, worker and client (``plan``), the inputs
sent as ways to read them (``shipping``) and the run on a ``distributed.Client`` (``run``).
It imports the CPU core; the core never imports it. Dask is imported only when a cluster
run is asked for.
"""
from __future__ import annotations

from .partition import Partition, partition_schedule
from .plan import ClusterPlan, plan_cluster
from .run import ClusterMeter, cluster_shape, run_on_cluster

__all__ = ["Partition", "partition_schedule", "ClusterPlan", "plan_cluster", "ClusterMeter",
           "cluster_shape", "run_on_cluster"]
