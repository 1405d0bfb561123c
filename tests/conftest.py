"""Every test starts with nothing remembered (``memo.py``) and no cache folder, whatever the
environment says: a test that plans sees its own planning, never an earlier test's.

The suite runs on two workers (``-n 2`` in pyproject.toml), each with one BLAS thread unless
the environment sets one: two workers with two spinning OpenBLAS threads each on two cores
ran the suite slower than one worker alone. Set before NumPy is first imported."""
from __future__ import annotations

import os

for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

import pytest  # noqa: E402

from sequant_eval import memo  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_memo():
    memo.clear()
    memo.set_folder(None)
    yield
    memo.reset()
