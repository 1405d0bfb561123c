"""Schedule snapshots: a fresh dump of every named configuration equals the stored one.

Update deliberately with ``sequant-eval snapshots --update`` and review the diff.
"""
from __future__ import annotations

import pytest

from sequant_eval.checkout import load_tool
from sequant_eval.schedule.peak import peak_profile_replay

snapshots = load_tool("snapshots")       # tools/snapshots.py


@pytest.mark.parametrize("name", snapshots.names())
def test_snapshot_is_current(name):
    path = snapshots._dir(None) / f"{name}.txt"
    assert path.exists(), f"missing snapshot {path}; run `sequant-eval snapshots --update`"
    fresh = snapshots.render(name)
    assert fresh == path.read_text(encoding="utf-8"), (
        f"schedule {name} changed; review and run `sequant-eval snapshots --update`")
    assert fresh == snapshots.render(name)              # deterministic, byte for byte


@pytest.mark.parametrize("name", sorted(snapshots.CONFIGS))
def test_snapshot_peaks_agree_with_replay(name):
    a = snapshots.CONFIGS[name]()
    assert a.peak_bytes == peak_profile_replay(a.ordered, a.forest, a.shapes, scratch=a.scratch).peak_bytes
