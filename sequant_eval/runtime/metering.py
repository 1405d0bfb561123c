"""Memory and flop accounting of one run of the op graph.

``Accounting`` is what the executor tells about every op: a buffer made (its bytes, on
which device), a temporary held during the op, a buffer released after its last read. It
keeps live bytes per buffer and per device and takes the peak after every allocation,
including the op's temporary — the static sweep's rule, so a dry run meters exactly the
predicted peak. ``Meter`` is its frozen result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .graph import Op

__all__ = ["Meter", "Accounting", "COUNTED"]

COUNTED = {Op.CONTRACT, Op.ACCUMULATE, Op.INIT, Op.SCALE, Op.ADD_INTO}   # carry flops


@dataclass(frozen=True)
class Meter:
    """What one evaluation measured: the peak of accounted bytes (and the step and the
    buffers live there), flops, how often each form was built, per-device peaks and the
    CuPy pool's bytes after the run."""

    backend: str
    peak_bytes: int
    peak_step: int
    live_at_peak: tuple[int, ...]          # buffers (owner node ids) live at the peak
    flops: float
    builds: dict[int, int] = field(default_factory=dict, compare=False)  # form → times made
    device_peaks: dict[str, int] = field(default_factory=dict, compare=False)
    pool_peak: int = 0                      # CuPy memory-pool bytes after the run

    def dump(self) -> str:
        """One line: backend, peak bytes and the step it occurred at, flops."""
        return (f"meter[{self.backend}]: peak {self.peak_bytes} B at step {self.peak_step}; "
                f"flops {self.flops:.6g}\n")


class Accounting:
    """Live bytes of every accounted buffer (by owner node) and device; the peak; flops;
    builds per form (``form_of``: producing node → form)."""

    def __init__(self, form_of=None) -> None:
        self.form_of = form_of
        self.size: dict[int, int] = {}          # owner → bytes, while live
        self.device: dict[int, str] = {}        # owner → device it was charged to
        self.dev_live: dict[str, int] = {}
        self.dev_peak: dict[str, int] = {}
        self.live = self.peak = self.step = 0
        self.snapshot: tuple[int, ...] = ()
        self.flops = 0.0
        self.builds: dict[int, int] = {}

    def op(self, step: int, n: int, node, nbytes: int | None, device: str,
           transient: int = 0) -> None:
        """Node ``n`` ran at ``step``: ``nbytes`` is its new buffer (``None``: a view, an
        in-place update or a reader, nothing new); ``transient`` bytes were held during it."""
        if node.op in COUNTED and len(node.params) > 1:
            self.flops += float(node.params[-1])
        if self.form_of is not None and n in self.form_of:
            form = self.form_of[n]
            self.builds[form] = self.builds.get(form, 0) + 1
        if nbytes is not None:
            self.size[n] = nbytes
            self.device[n] = device
            self.live += nbytes
            self.dev_live[device] = self.dev_live.get(device, 0) + nbytes
            self.dev_peak[device] = max(self.dev_peak.get(device, 0), self.dev_live[device])
        if self.live + transient > self.peak:
            self.peak, self.step = self.live + transient, step
            self.snapshot = tuple(sorted(self.size))

    def holds(self, owner: int) -> bool:
        """Whether ``owner``'s buffer is live (accounted and not yet released)."""
        return owner in self.size

    def release(self, owner: int) -> None:
        """``owner``'s buffer is freed: its bytes leave the live total and its device's."""
        nbytes = self.size.pop(owner)
        dev = self.device.pop(owner)
        self.live -= nbytes
        self.dev_live[dev] -= nbytes

    def meter(self, backend: str, pool_peak: int = 0) -> Meter:
        """The run's accounting as a Meter (``pool_peak``: a GPU pool's high-water mark)."""
        return Meter(backend, self.peak, self.step, self.snapshot, self.flops, self.builds,
                     self.dev_peak, pool_peak)
