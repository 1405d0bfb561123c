"""CuPy on the GPU: the array-API backend (``backends.ArrayApiBackend``) on one stream per
evaluation, host and device meeting only at copy nodes and leaf reads.

``gpu_available`` asks whether CuPy sees a device; ``gpu_backends`` makes the backends of
a two-device run (NumPy on the host, CuPy on the GPU), or refuses clearly where there is
no GPU.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ...errors import SequantEvalError
from ..backends import ArrayApiBackend, NumpyBackend, index_slices
from ..graph import Device
from ..sources import LeafReader

__all__ = ["CupyBackend", "gpu_available", "gpu_backends"]


class CupyBackend(ArrayApiBackend):
    """CuPy on the GPU: one stream per evaluation (``session``); host↔device only at copy
    nodes and leaf reads, both ordered on that stream; the memory pool limited to
    ``pool_limit`` bytes (beyond what it already holds) during an evaluation."""

    def __init__(self) -> None:
        import cupy

        super().__init__(cupy, "cupy")
        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self.pool_limit = float("inf")

    @contextmanager
    def session(self):
        """The evaluation's stream, current for this thread while it runs; the caller's
        current stream (and the pool's limit) are restored afterwards, the stream drained."""
        old_limit = self.pool.get_limit()
        if self.pool_limit != float("inf"):
            self.pool.set_limit(size=self.pool.used_bytes() + int(self.pool_limit))
        stream = self.cupy.cuda.Stream(non_blocking=True)
        try:
            with stream:                       # restores the previous current stream
                try:
                    yield stream
                finally:
                    stream.synchronize()
        finally:
            self.pool.set_limit(size=old_limit)

    def take(self, block, index, shape):
        if isinstance(block, self.cupy.ndarray):
            return block[index_slices(index, block.ndim)].copy()
        part = block.read(index) if isinstance(block, LeafReader) else \
            block[index_slices(index, len(block.shape))]
        return self.from_host(part)

    def to_host(self, x):
        """Device → host on the current stream, waited for (the host reads it next)."""
        stream = self.cupy.cuda.get_current_stream()
        out = x.get(stream=stream)
        stream.synchronize()
        return out

    def from_host(self, x):
        """Host → device, ordered on the current stream (not the legacy default one, which
        a non-blocking stream does not wait for)."""
        x = np.asarray(x, order="C")
        out = self.cupy.empty(x.shape, x.dtype)
        out.set(x, stream=self.cupy.cuda.get_current_stream())
        return out

    def nbytes(self, x) -> int:
        return int(x.nbytes)

    def pool_bytes(self) -> int:
        """Bytes the CuPy memory pool holds (used and cached)."""
        return int(self.pool.total_bytes())

    def release(self) -> None:
        """Hand the pool's unused blocks back to the device."""
        self.pool.free_all_blocks()


def gpu_available() -> bool:
    """Whether CuPy is importable and sees a device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:          # no CuPy, no driver, no device: all mean "no GPU"
        return False


def gpu_backends() -> dict:
    """The backends of a run on the host and the GPU: NumPy and CuPy (a GPU needed)."""
    if not gpu_available():
        raise SequantEvalError("backend 'cupy' needs CuPy and a GPU; none is available "
                               "here (use 'auto' to fall back to NumPy)")
    return {Device.CPU: NumpyBackend(), Device.GPU: CupyBackend()}
