"""Every test starts with nothing remembered (``memo.py``) and no cache folder, whatever the
environment says: a test that plans sees its own planning, never an earlier test's."""
from __future__ import annotations

import pytest

from sequant_eval import memo


@pytest.fixture(autouse=True)
def _fresh_memo():
    memo.clear()
    memo.set_folder(None)
    yield
    memo.reset()
