"""A strict stand-in for a GPU, for CPU tests of the two-device path.

``StrictDevice`` keeps its arrays as ``DeviceArray``s: a distinct type that refuses every
implicit conversion to a host array (``__array__`` raises, NumPy ufuncs refuse it) and
records the device and the stream it was written on. Each of its ops checks that every
operand is a ``DeviceArray`` of its own device, written on the evaluation's stream (or on
one that has since been drained), and runs inside an evaluation session. ``StrictHost`` is
the NumPy backend refusing anything but host arrays. So a result left on the "device", an
op reading across devices without a copy node, a device op outside the evaluation's
stream or a caller's stream not restored all fail a CPU test. The arithmetic is NumPy's
own (the same kernels), so results equal a NumPy run. The device also measures its own
memory: every buffer it makes is counted from its making until the last array on it (the
buffer or a view of it) is gone, so ``live_bytes`` and ``peak_bytes`` are what the
"device" really held, independent of the executor's accounting.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import numpy as np

from sequant_eval.runtime import NumpyBackend
from sequant_eval.runtime.sources import LeafReader


class DeviceMix(AssertionError):
    """An op touched an array of another device (no copy node), or ran off its stream."""


class DeviceArray:
    """An array resident on a stand-in device: shape, dtype and size, but no host view."""

    __array_ufunc__ = None              # NumPy operators refuse it instead of converting
    __slots__ = ("data", "device", "stream")

    def __init__(self, data: np.ndarray, device: str, stream: str) -> None:
        self.data, self.device, self.stream = data, device, stream

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)
    itemsize = property(lambda self: self.data.itemsize)
    nbytes = property(lambda self: self.data.nbytes)

    def __array__(self, *args, **kwargs):
        raise TypeError(f"implicit conversion of a {self.device} array to a host array: "
                        f"a copy node is missing")

    def __float__(self):
        raise TypeError("implicit conversion of a device scalar to a host float")

    def __repr__(self) -> str:
        return f"DeviceArray({self.shape}, device={self.device}, stream={self.stream})"


class StrictHost(NumpyBackend):
    """The NumPy backend refusing device arrays in every op."""

    name = "numpy"

    def __getattribute__(self, attr):
        fn = super().__getattribute__(attr)
        if attr in _OPS and callable(fn):
            def checked(*args):
                for x in args:
                    if isinstance(x, DeviceArray):
                        raise DeviceMix(f"host op {attr} got {x!r}: a copy node is missing")
                return fn(*args)
            return checked
        return fn


_OPS = {"take", "contract", "scale_", "permute", "reshape", "accumulate_", "scatter_",
        "add_into_", "init", "to_host", "from_host", "nbytes"}


class StrictDevice:
    """A device backend over NumPy whose arrays never pass for host arrays."""

    symbolic = False

    def __init__(self, device: str = "gpu") -> None:
        self.name = f"strict-{device}"
        self.device = device
        self.host = NumpyBackend()          # the arithmetic: NumPy's own kernels
        self.caller = "caller's stream"
        self.current = self.caller           # the thread's current stream
        self.streams: list[str] = []         # streams made, one per evaluation
        self.drained: set[str] = set()
        self.buffers = 0                     # device buffers made
        self.live_bytes = 0                  # bytes of device buffers still referenced
        self.peak_bytes = 0                  # the most live_bytes ever was

    @property
    def dtype(self):
        return self.host.dtype

    @dtype.setter
    def dtype(self, value) -> None:
        self.host.dtype = value

    @contextmanager
    def session(self):
        stream = f"stream {len(self.streams)}"
        self.streams.append(stream)
        previous, self.current = self.current, stream
        try:
            yield stream
        finally:
            self.drained.add(stream)
            self.current = previous

    def _on(self, *xs) -> list[np.ndarray]:
        if self.current == self.caller:
            raise DeviceMix("a device op outside the evaluation's stream")
        for x in xs:
            if not isinstance(x, DeviceArray) or x.device != self.device:
                raise DeviceMix(f"{self.device} op got {type(x).__name__} "
                                f"{getattr(x, 'shape', '')}: a copy node is missing")
            if x.stream != self.current and x.stream not in self.drained:
                raise DeviceMix(f"{x!r} read on {self.current} without a synchronisation")
        return [x.data for x in xs]

    def _new(self, data: np.ndarray) -> DeviceArray:
        if data.base is not None:            # a buffer of its own, as on a real device
            data = data.copy()
        self.buffers += 1
        self.live_bytes += data.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(data, self._freed, data.nbytes)   # when its last view is gone
        return DeviceArray(data, self.device, self.current)

    def _freed(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    def _wrote(self, x: DeviceArray) -> DeviceArray:
        x.stream = self.current
        return x

    def take(self, block, index, shape):
        if isinstance(block, LeafReader):            # a leaf batch read onto the device
            return self._new(self.host.take(block, index, shape))
        if isinstance(block, np.ndarray):            # a kept host array, read as a binding
            return self._new(self.host.take(block, index, shape))
        (data,) = self._on(block)
        return self._new(self.host.take(data, index, shape))

    def zeros(self, shape):
        self._on()
        return self._new(self.host.zeros(shape))

    def contract(self, values, vid, a, b, out_shape, layout=None):
        x, y = self._on(a, b)
        return self._new(self.host.contract(values, vid, x, y, out_shape, layout))

    def scale_(self, x, alpha):
        self.host.scale_(*self._on(x), alpha)
        return self._wrote(x)

    def permute(self, x, perm):
        (data,) = self._on(x)
        return DeviceArray(data.transpose(perm), self.device, self.current)    # a view

    def reshape(self, x, shape):
        (data,) = self._on(x)
        return DeviceArray(data.reshape(shape), self.device, self.current)

    def accumulate_(self, target, src, alpha):
        t, s = self._on(target, src)
        self.host.accumulate_(t, s, alpha)
        return self._wrote(target)

    def scatter_(self, target, src, index):
        t, s = self._on(target, src)
        self.host.scatter_(t, s, index)
        return self._wrote(target)

    def add_into_(self, target, src, index, perm, alpha):
        t, s = self._on(target, src)
        self.host.add_into_(t, s, index, perm, alpha)
        return self._wrote(target)

    def init(self, src, alpha):
        (s,) = self._on(src)
        return self._new(self.host.init(s, alpha))

    def to_host(self, x):
        (data,) = self._on(x)
        return data.copy()

    def from_host(self, x):
        if not isinstance(x, np.ndarray):
            raise DeviceMix(f"from_host got {type(x).__name__}, not a host array")
        self._on()
        return self._new(np.array(x, copy=True))

    def nbytes(self, x) -> int:
        if not isinstance(x, DeviceArray):
            raise DeviceMix(f"{self.device} backend asked the size of a host array")
        return x.nbytes
