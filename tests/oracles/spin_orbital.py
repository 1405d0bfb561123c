"""Random spin-orbital CCSD inputs at H2O/cc-pVDZ extents (10 occupied, 38 virtual spin
orbitals), shared by the memory and cluster tests: the values do not matter there, only
the shapes and that every code sees the same arrays."""
from __future__ import annotations

import tracemalloc

import numpy as np

EXT = {"i": 10, "a": 38}          # H2O/cc-pVDZ spin-orbital extents
N = sum(EXT.values())


def random_arrays(seed: int) -> dict[str, np.ndarray]:
    """``f``, ``g`` over all orbitals, ``t1``, ``t2`` (virtual first), from ``seed``."""
    rng = np.random.default_rng(seed)
    return {"f": rng.standard_normal((N, N)), "g": rng.standard_normal((N, N, N, N)),
            "t1": 0.1 * rng.standard_normal((38, 10)),
            "t2": 0.1 * rng.standard_normal((38, 38, 10, 10))}


def block_mappings(arrays: dict[str, np.ndarray], forest) -> dict:
    """The same inputs as mappings from space tuples to blocks: each block of ``f`` and
    ``g`` that ``forest`` reads, cut from the full arrays (occupied first)."""
    off = {"i": slice(0, EXT["i"]), "a": slice(EXT["i"], N)}
    out: dict = {"t1": {("a", "i"): arrays["t1"]}, "t2": {("a", "a", "i", "i"): arrays["t2"]}}
    for v in forest.values:
        if v.tensor in ("f", "g"):
            out.setdefault(v.tensor, {})[v.spaces] = np.ascontiguousarray(
                arrays[v.tensor][tuple(off[s] for s in v.spaces)])
    return out


def traced_peak(call) -> tuple[object, int]:
    """``call()``'s result and the most bytes tracemalloc saw held during it beyond what was
    held when it began (the tuple free lists refilled first: ``refill_tuple_cache``)."""
    refill_tuple_cache()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        out = call()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak


def refill_tuple_cache() -> None:
    """Refill CPython's tuple free lists (up to 2000 of each length below 20), which a full
    ``gc.collect`` empties: an evaluation's small index tuples would otherwise refill them
    inside a tracemalloc trace (~0.3 MB of the interpreter's cache, not the evaluation's)."""
    cache = [[tuple(range(k)) for _ in range(2000)] for k in range(1, 20)]
    del cache
