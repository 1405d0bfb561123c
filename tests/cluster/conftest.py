"""The Dask cluster the tests in this folder share: started once per module."""
from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="module")
def client():
    """A ``distributed.LocalCluster`` of 2 single-threaded worker processes and its client
    (the dashboard on a free port: None would mean the default 8787, which another test
    worker may hold)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.CRITICAL) as cl, \
            distributed.Client(cl) as c:
        yield c
