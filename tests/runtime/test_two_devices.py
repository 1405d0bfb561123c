"""Two devices without a GPU: the strict device stand-in (``strict_device.py``: arrays of
their own type that refuse host conversion, ops that refuse another device's arrays or a
foreign stream) runs the placed graph, so copies, device seams, branches, the route
picker and the evaluation's stream execute, and any missing copy fails.

Oracle: tests/oracles/direct.py. CuPy itself is exercised only on a GPU machine
(benchmarks/gpu_check.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.runtime import TensorSource
from sequant_eval.runtime.engine import run_graph
from sequant_eval.runtime.gpu.placed import Placed, RoutePicker
from sequant_eval.runtime.gpu.placement import CostModel, Machine
from sequant_eval.runtime.gpu.runs import extract_runs
from sequant_eval.runtime.graph import Device, Op

from tests.oracles.direct import direct_evaluate
from tests.runtime.strict_device import DeviceArray, DeviceMix, StrictDevice, StrictHost

pytest.importorskip("pyscf")


def _fast_gpu() -> CostModel:
    base = CostModel()
    return CostModel(rate=base.rate | {Device.GPU: 1e15}, bandwidth=base.bandwidth,
                     launch={Device.CPU: 1e-6, Device.GPU: 1e-7}, link=1e12, latency=1e-7)


def _water():
    from sequant_eval.chem.integrals import SpinOrbitalIntegrals

    ints = SpinOrbitalIntegrals.from_molecule("water", "6-31g")
    rng = np.random.default_rng(2)
    o, v = ints.nocc, ints.nvir
    tensors = dict(ints.tensors(), t1={("a", "i"): 0.1 * rng.standard_normal((v, o))},
                   t2={("a", "a", "i", "i"): 0.1 * rng.standard_normal((v, v, o, o))})
    return ints, tensors


def _placed(ints):
    ev = se.Evaluator(ccsd_equations(), ints.extents)
    low, roots = Placed(ev.batched).lowered(False, Machine(gpu=True, cost=_fast_gpu()))
    return ev, low, roots


def _run_strict(ev, low, roots, tensors, ints, gpu=True):
    source = TensorSource(ev.forest, tensors, ints.extents)
    device = StrictDevice()
    backends = {Device.CPU: StrictHost(), Device.GPU: device}
    picker = RoutePicker(low.graph, gpu=gpu)                # no GPU: every CPU arm
    out, meter = run_graph(low.graph, roots, ev.forest, backends, source, order=picker.route)
    return source, device, out, meter


@pytest.mark.parametrize("tolerance_fork", [False, True])
def test_placed_ccsd_runs_on_the_strict_device(tolerance_fork):
    """Oracle: the direct (einsum) evaluation of the same forest; the results must come
    back as host NumPy arrays through explicit copy nodes, on one stream."""
    ints, tensors = _water()
    ev, low, roots = _placed(ints)
    g = low.graph
    order = g.order(roots)
    assert Device.GPU in {g.device.get(n) for n in order if g.nodes[n].op is Op.CONTRACT}
    assert any(r.device is Device.GPU for r in extract_runs(g, roots))
    for name, node in low.roots.items():                   # each result: a copy to the host
        assert g.nodes[node].op is Op.COPY and g.device[node] is Device.CPU, name
    source, device, out, meter = _run_strict(ev, low, roots, tensors, ints,
                                             gpu=not tolerance_fork)
    ref = direct_evaluate(ev.forest, source)
    for name, node in low.roots.items():
        got = out[node]
        assert type(got) is np.ndarray, (name, type(got))
        assert np.abs(got - ref[name]).max() <= 1e-12 * max(1.0, np.abs(ref[name]).max())
    assert device.buffers > 0                                # work ran on the "device"
    assert device.streams == ["stream 0"]                    # one stream per evaluation
    assert device.current == device.caller                   # the caller's stream is back
    assert set(meter.device_peaks) >= {"cpu", "gpu"}


def test_strict_device_catches_a_result_left_on_the_device(monkeypatch):
    """Without the root copies (the pass made an identity) a result stays a DeviceArray:
    the host-results assertion of the test above would fail, and so does Placed.run."""
    import sequant_eval.runtime.gpu.placed as placed

    monkeypatch.setattr(placed, "copy_roots_to_host", lambda g, roots: list(roots))
    ints, tensors = _water()
    ev, low, roots = _placed(ints)
    _, _, out, _ = _run_strict(ev, low, roots, tensors, ints)
    left = [name for name, node in low.roots.items() if isinstance(out[node], DeviceArray)]
    assert left                                # e.g. R2 computed on the "device"
    with pytest.raises(TypeError, match="copy node is missing"):
        np.asarray(out[low.roots[left[0]]])


def test_strict_device_catches_a_missing_copy_node():
    """An op reading a value of the other device directly (a copy node bypassed) fails."""
    ints, tensors = _water()
    ev, low, roots = _placed(ints)
    g = low.graph
    order = g.order(roots)
    users = g.consumers(roots)
    copy = next(n for n in order if g.nodes[n].op is Op.COPY and n not in roots
                and g.nodes[g.nodes[n].inputs[0]].op is not Op.INPUT)
    for u in users[copy]:
        g.rewrite_input(u, copy, g.nodes[copy].inputs[0])
    with pytest.raises(DeviceMix, match="copy node is missing"):
        _run_strict(ev, low, roots, tensors, ints)
