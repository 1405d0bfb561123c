"""Random spin-orbital CCSD inputs at H2O/cc-pVDZ extents (10 occupied, 38 virtual spin
orbitals), shared by the memory and cluster tests: the values do not matter there, only
the shapes and that every code sees the same arrays."""
from __future__ import annotations

import numpy as np

EXT = {"i": 10, "a": 38}          # H2O/cc-pVDZ spin-orbital extents
N = sum(EXT.values())


def random_arrays(seed: int) -> dict[str, np.ndarray]:
    """``f``, ``g`` over all orbitals, ``t1``, ``t2`` (virtual first), from ``seed``."""
    rng = np.random.default_rng(seed)
    return {"f": rng.standard_normal((N, N)), "g": rng.standard_normal((N, N, N, N)),
            "t1": 0.1 * rng.standard_normal((38, 10)),
            "t2": 0.1 * rng.standard_normal((38, 38, 10, 10))}
