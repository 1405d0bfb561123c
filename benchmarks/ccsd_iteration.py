"""One spin-orbital CCSD residual at fixed amplitudes: sequant-eval vs PySCF vs naive opt_einsum.

Side by side in one process, for H2O/cc-pVDZ and (H2O)2/cc-pVDZ, best of ``--repeats`` runs:

* **ours** — ``se.Evaluator(ccsd_equations(), extents)`` compiled once, ``.evaluate`` timed;
* **PySCF** — ``pyscf.cc.GCCSD``: ERIs built once (``ao2mo``), ``update_amps`` timed;
* **naive** — every term of the same packaged equations as one ``opt_einsum`` expression
  (paths found up front), accumulated into E, R1, R2.

Amplitudes: the MP2 guess with ``t1 = 0.01 · uniform(-1, 1)`` (fixed seed), so every term is
nonzero. The integral transformation is excluded everywhere (blocks are warmed before timing).
Our result is checked against the naive one (max relative difference, must be ≤ 1e-10) and our
energy against PySCF's ``energy`` at the same amplitudes (a layout check of the PySCF anchor).

Run ``python benchmarks/ccsd_iteration.py [--repeats N] [--write]``; ``--write`` records the
table and the machine in ``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import opt_einsum

import sequant_eval as se
from sequant_eval.chem.equations import ccsd_equations
from sequant_eval.chem.integrals import SpinOrbitalIntegrals
from sequant_eval.chem.solver import mp2_guess
from sequant_eval.expr.index import mode_space

SYSTEMS = {"water": "H2O/cc-pVDZ", "water_dimer": "(H2O)2/cc-pVDZ"}
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
TOLERANCE = 1e-10


@dataclass(frozen=True)
class Row:
    system: str
    nocc: int
    nvir: int
    ours_s: float
    ours_flops: int
    pyscf_s: float | None
    naive_s: float
    naive_flops: int
    max_rel_diff: float
    energy_diff: float | None

    @property
    def ours_gflops(self) -> float:
        return self.ours_flops / self.ours_s / 1e9

    @property
    def naive_gflops(self) -> float:
        return self.naive_flops / self.naive_s / 1e9


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def amplitudes(ints: SpinOrbitalIntegrals, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """MP2 guess for t2, a small deterministic t1 (ours: t1[a,i], t2[a,b,i,j])."""
    guess = mp2_guess(ints)
    rng = np.random.default_rng(seed)
    t1 = 0.01 * rng.uniform(-1.0, 1.0, size=guess["t1"].shape)
    return np.ascontiguousarray(t1), guess["t2"]


class NaiveCCSD:
    """Every term of the packaged equations as one opt_einsum expression, paths found once."""

    def __init__(self, equations, blocks) -> None:
        self.terms = []      # (equation name, float coefficient, expression, operand blocks)
        self.shapes = {}
        self.flops = 0
        for eq in equations:
            result = eq.indices
            self.shapes[eq.name] = tuple(blocks.extent(mode_space(ix)) for ix in result)
            for product in eq.terms:
                labels = {}
                for ix in (*result, *(ix for t in product.factors for ix in t.slots)):
                    labels.setdefault(ix, opt_einsum.get_symbol(len(labels)))
                operands = [blocks.get(t.name, tuple(mode_space(ix) for ix in t.slots))
                            for t in product.factors]
                subscripts = (",".join("".join(labels[ix] for ix in t.slots)
                                       for t in product.factors)
                              + "->" + "".join(labels[ix] for ix in result))
                shapes = [op.shape for op in operands]
                if len(operands) > 1:
                    path, info = opt_einsum.contract_path(subscripts, *shapes, shapes=True,
                                                          optimize="optimal")
                    self.flops += int(info.opt_cost)
                else:
                    path = [(0,)]
                expr = opt_einsum.contract_expression(subscripts, *shapes, optimize=path)
                self.terms.append((eq.name, float(product.coefficient), expr, operands))

    def evaluate(self) -> dict[str, np.ndarray]:
        out = {name: np.zeros(shape) for name, shape in self.shapes.items()}
        for name, coeff, expr, operands in self.terms:
            term = expr(*operands)
            if coeff == 1.0:
                out[name] += term
            elif coeff == -1.0:
                out[name] -= term
            else:
                out[name] += coeff * term
        return out


class Blocks:
    """Leaf blocks from the same providers the evaluator reads (cached, contiguous)."""

    def __init__(self, ints: SpinOrbitalIntegrals, t1: np.ndarray, t2: np.ndarray) -> None:
        self.ints = ints
        self.amps = {"t1": {("a", "i"): t1}, "t2": {("a", "a", "i", "i"): t2}}
        self.cache: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}

    def extent(self, space: str) -> int:
        return self.ints.extents[space]

    def get(self, name: str, spaces: tuple[str, ...]) -> np.ndarray:
        key = (name, spaces)
        if key not in self.cache:
            if name in self.amps:
                block = self.amps[name][spaces]
            else:
                block = self.ints.tensors()[name](spaces)
            self.cache[key] = np.ascontiguousarray(block)
        return self.cache[key]


def pyscf_anchor(ints: SpinOrbitalIntegrals, t1: np.ndarray, t2: np.ndarray, repeats: int,
                 energy: float) -> tuple[float, float]:
    """Best time of ``GCCSD.update_amps`` and |E(PySCF) - E(ours)| at the same amplitudes."""
    from pyscf import cc

    mycc = cc.GCCSD(ints.scf)
    mycc.verbose = 0
    eris = mycc.ao2mo()
    t1p = np.ascontiguousarray(t1.T)
    t2p = np.ascontiguousarray(t2.transpose(2, 3, 0, 1))
    e_pyscf = float(mycc.energy(t1p, t2p, eris))
    mycc.update_amps(t1p, t2p, eris)  # warm-up
    return best_of(lambda: mycc.update_amps(t1p, t2p, eris), repeats), abs(e_pyscf - energy)


def max_relative_difference(ours: dict, ref: dict) -> float:
    worst = 0.0
    for name, r in ref.items():
        o = np.asarray(ours[name])
        scale = max(float(np.max(np.abs(r))), 1e-300)
        worst = max(worst, float(np.max(np.abs(o - r))) / scale)
    return worst


def run_system(molecule: str, repeats: int, with_pyscf: bool) -> Row:
    ints = SpinOrbitalIntegrals.from_molecule(molecule, "cc-pvdz")
    t1, t2 = amplitudes(ints)
    tensors = dict(ints.tensors(), t1={("a", "i"): t1}, t2={("a", "a", "i", "i"): t2})

    ev = se.Evaluator(ccsd_equations(), ints.extents)
    ours = ev.evaluate(tensors)  # warm-up: fills the integral block cache
    ours_s = best_of(lambda: ev.evaluate(tensors), repeats)
    ours_flops = ev.analyze().flops

    naive = NaiveCCSD(ccsd_equations(), Blocks(ints, t1, t2))
    ref = naive.evaluate()
    naive_s = best_of(naive.evaluate, repeats)
    diff = max_relative_difference(ours, ref)

    pyscf_s = energy_diff = None
    if with_pyscf:
        pyscf_s, energy_diff = pyscf_anchor(ints, t1, t2, repeats, float(ours["E"]))
    return Row(SYSTEMS[molecule], ints.nocc, ints.nvir, ours_s, ours_flops, pyscf_s, naive_s,
               naive.flops, diff, energy_diff)


def dgemm_rate(n: int = 2000, repeats: int = 3) -> float:
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    c = np.empty((n, n))
    return 2 * n**3 / best_of(lambda: np.matmul(a, b, out=c), repeats) / 1e9


def table(rows: list[Row], dgemm: float) -> str:
    head = ("| system | ours | GFLOP/s (% dgemm) | PySCF GCCSD | naive opt_einsum | GFLOP/s | "
            "PySCF / ours | naive / ours | max rel diff |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        py = f"{r.pyscf_s:.3f} s" if r.pyscf_s is not None else "—"
        ratio = f"{r.pyscf_s / r.ours_s:.2f}×" if r.pyscf_s is not None else "—"
        lines.append(
            f"| {r.system} ({r.nocc} occ, {r.nvir} vir) | {r.ours_s:.3f} s "
            f"({r.ours_flops / 1e9:.1f} GFLOP) | {r.ours_gflops:.1f} "
            f"({100 * r.ours_gflops / dgemm:.0f} %) | {py} | {r.naive_s:.3f} s "
            f"({r.naive_flops / 1e9:.1f} GFLOP) | {r.naive_gflops:.1f} | {ratio} | "
            f"{r.naive_s / r.ours_s:.2f}× | {r.max_rel_diff:.1e} |")
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, str]:
    blas = "unknown"
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{cfg.get('name')} {cfg.get('version')}"
        if cfg.get("openblas configuration"):
            blas += f" ({cfg['openblas configuration']})"
    except Exception:  # older numpy: no dict mode
        pass
    try:
        from threadpoolctl import threadpool_info

        blas += "; threadpoolctl: " + ", ".join(
            f"{p['internal_api']} {p['version']} {p['num_threads']} threads"
            for p in threadpool_info())
    except ImportError:
        pass
    return {
        "date": datetime.date.today().isoformat(),
        "cpus (nproc)": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                            else os.cpu_count()),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "opt_einsum": opt_einsum.__version__,
        "BLAS": blas,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
    }


def write_doc(rows: list[Row], dgemm: float, repeats: int) -> None:
    pyscf_version = "not run"
    try:
        import pyscf

        pyscf_version = pyscf.__version__
    except ImportError:
        pass
    info = machine() | {"pyscf": pyscf_version}
    text = [
        "# Benchmarks",
        "",
        "One spin-orbital CCSD residual (E, R1, R2) at fixed amplitudes (MP2 t2, t1 = 0.01 ·",
        "uniform(−1, 1) with a fixed seed), best of "
        f"{repeats} runs, integral transformation excluded. Written by",
        "`benchmarks/ccsd_iteration.py --write`; all three run side by side in one process.",
        "",
        "- **ours**: `se.Evaluator(ccsd_equations(), extents).evaluate(...)` (compiled once);",
        "  flops from `Evaluator.analyze()`.",
        "- **PySCF GCCSD**: `GCCSD(mf).update_amps(t1, t2, eris)` with `eris` built once.",
        "- **naive**: each term of the same packaged equations as one `opt_einsum` expression",
        "  (optimal path found once), accumulated; flops are opt_einsum's `opt_cost` summed.",
        "  The equations write every index permutation of a term out as its own term; naive",
        "  computes each one, ours interns them into one value read through permutations, hence",
        "  about half the flops.",
        "- max rel diff: ours vs naive, max |Δ| / max |ref| per equation (must be ≤ 1e-10).",
        "",
        table(rows, dgemm),
        "",
        f"NumPy dgemm rate on this machine (2000³ `matmul`): {dgemm:.0f} GFLOP/s.",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
        "## How to reproduce",
        "",
        "```bash",
        f"pip install '.[chem]' && python benchmarks/ccsd_iteration.py --repeats {repeats} --write",
        "```",
        "",
    ]
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text("\n".join(text) + _other_sections(), encoding="utf-8")


def _other_sections() -> str:
    """Sections other scripts wrote into the doc (kept as they are)."""
    if not DOC.exists():
        return ""
    mine = {"## Machine", "## How to reproduce"}
    kept, keep = [], False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            keep = line.strip() not in mine
        if keep:
            kept.append(line)
    return ("\n" + "\n".join(kept) + "\n") if kept else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="timed runs per method (best kept)")
    p.add_argument("--molecules", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--no-pyscf", action="store_true", help="skip the PySCF anchor")
    p.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(DOC.parents[1])}")
    args = p.parse_args(argv)

    dgemm = dgemm_rate()
    rows = []
    for molecule in args.molecules:
        row = run_system(molecule, args.repeats, not args.no_pyscf)
        rows.append(row)
        e = "" if row.energy_diff is None else f", |E(PySCF) - E(ours)| = {row.energy_diff:.1e}"
        print(f"{row.system}: max rel diff ours vs naive = {row.max_rel_diff:.2e}{e}",
              flush=True)
    print(table(rows, dgemm))
    print(f"numpy dgemm rate: {dgemm:.0f} GFLOP/s")
    if args.write:
        write_doc(rows, dgemm, args.repeats)
        print(f"wrote {DOC}")
    bad = [r.system for r in rows if not r.max_rel_diff <= TOLERANCE]
    if bad:
        print(f"ours and naive differ beyond {TOLERANCE:g} for {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
