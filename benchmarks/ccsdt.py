#!/usr/bin/env python3
"""One spin-orbital CCSDT residual (E, R1, R2, R3) at fixed amplitudes: ours beside ebcc,
a naive per-term opt_einsum baseline and PySCF RCCSDT.

    python benchmarks/ccsdt.py [--systems 631g,ccpvdz] [--rounds 631g=5,ccpvdz=2]
                               [--codes ...] [--json F] [--write-docs] [--profile]

Codes (each in its own worker process, so each peak RSS is its own):

  ours          se.Evaluator(ccsdt_equations(), extents).evaluate(tensors), unbatched
  ours_min      the same under budget=se.min_budget(...) (the smallest feasible budget)
  ours_10pct    the same under 10 % of the unbatched predicted peak, R3 written batch by
                batch into an np.memmap sink (out={"R3": ...}; refused when below the
                minimum: the refusal and its named minimum are reported)
  ebcc          ebcc.codegen.GCCSDT.update_amps (ebcc's generated GCCSDT code; its return
                values are the residuals, before its division by the denominators)
  naive         wickd's CCSDT terms (tests/chem/ccsdt_oracles.py: wickd_terms), each one
                opt_einsum.contract_expression(..., optimize="optimal") built once, summed
                per residual, R2 and R3 then antisymmetrized by explicit permutations; no
                intermediate is shared between terms
  pyscf_rccsdt  pyscf.cc.rccsdt.RCCSDT.update_amps_ on the closed-shell RHF (a different,
                spin-adapted, T1-dressed code with i<=j<=k-packed T3; its own amplitudes,
                MP2 then one iteration, so it is timed only, not compared)

Inputs: H2O (the geometry below), RHF (conv_tol 1e-10), its spin orbitals (occupied first:
f[p, q], g[p, q, r, s] = <pq||rs>, from sequant_eval.chem.spin_orbital); amplitudes fixed
and random (seed 7): t1 = 0.01 N(0, 1), t2 and t3 antisymmetrized 0.01 N(0, 1), the same
arrays for ours, ebcc and naive.  Before any timing each code's first call (untimed) is
checked against ebcc's: max |dR| / max |R_ebcc| per residual.
Rounds are interleaved (one call of every code per round, the order rotated each round, a
0.5 s pause before each call); medians and min-max are reported.  Ours: the plan time
(Evaluator construction and fit, the min_budget search apart) is reported separately;
flops and peak bytes from the evaluation's Meter.  ebcc: flops of its einsum calls costed
by opt_einsum; naive: the summed opt_cost of its expressions (2 flops per multiply-add).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WATER = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"    # Angstrom
SYSTEMS = {"631g": ("H2O/6-31G", "6-31g"), "ccpvdz": ("H2O/cc-pVDZ", "cc-pvdz")}
CODES = ("ours", "ours_min", "ours_10pct", "ebcc", "naive", "pyscf_rccsdt")
ARRAYS = ("f", "g", "t1", "t2", "t3")
SETTLE_S = 0.5          # the previous code's BLAS threads go idle first (closed_shell.py)
SEED = 7


from closed_shell import _spawn, _vm  # noqa: E402  (a worker process; VmHWM / VmRSS, MiB)


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _antisymmetric(rng, shape, n: int):
    from itertools import permutations

    import numpy as np

    x = 0.01 * rng.standard_normal(shape)
    out = np.zeros_like(x)
    for pb in permutations(range(n)):
        for pk in permutations(range(n)):
            sign = _parity(pb) * _parity(pk)
            out += sign * x.transpose(list(pb) + [n + k for k in pk])
    return out


def _parity(p) -> int:
    return (-1) ** sum(1 for a in range(len(p)) for b in range(a + 1, len(p)) if p[a] > p[b])


def _mol(basis: str):
    from pyscf import gto

    return gto.M(atom=WATER, basis=basis, verbose=0, max_memory=16000)


def _prep(system: str, wd: Path) -> dict:
    """SCF, spin-orbital f and g, the fixed amplitudes, dgemm rate (in a subprocess)."""
    import numpy as np
    from pyscf import scf

    from sequant_eval.chem.integrals import full_arrays
    from sequant_eval.chem.spin_orbital import GeneralSpinOrbitalIntegrals

    mf = scf.RHF(_mol(SYSTEMS[system][1]))
    mf.conv_tol = 1e-10
    mf.chkfile = str(wd / f"{system}.chk")
    mf.kernel()
    ints = GeneralSpinOrbitalIntegrals(mf)
    no, nv = ints.nocc, ints.nvir
    f, g = full_arrays(ints)
    rng = np.random.default_rng(SEED)
    arrays = {"f": f, "g": g, "t1": 0.01 * rng.standard_normal((nv, no)),
              "t2": _antisymmetric(rng, (nv, nv, no, no), 2),
              "t3": _antisymmetric(rng, (nv,) * 3 + (no,) * 3, 3)}
    for name, arr in arrays.items():
        np.save(wd / f"{system}_{name}.npy", arr)
    a = np.random.default_rng(0).standard_normal((2000, 2000))
    a @ a
    times = []
    for _ in range(5):
        t = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - t)
    return {"nocc": no, "nvir": nv, "e_hf": float(mf.e_tot),
            "dgemm_gflops": 2 * 2000**3 / statistics.median(times) / 1e9}


# ----------------------------------------------------------------- the codes
def _setup_ours(code: str, arrays: dict, info: dict):
    import sequant_eval as se
    from sequant_eval.chem.equations import ccsdt_equations
    from sequant_eval.errors import InfeasibleBudget

    eqs = ccsdt_equations()
    ext = {"i": arrays["t1"].shape[1], "a": arrays["t1"].shape[0]}
    budget = None
    if code == "ours_min":
        t = time.perf_counter()
        budget = se.min_budget(eqs, ext)
        info["min_budget_s"] = time.perf_counter() - t
    elif code == "ours_10pct":
        budget = 0.10 * se.analyze(eqs, ext).peak_bytes
    policy, out = None, None
    if code == "ours_10pct":               # R3 (22 % of the peak alone) into a file
        import numpy as np

        folder = tempfile.mkdtemp(prefix="ccsdt-r3-")
        out = {"R3": np.memmap(os.path.join(folder, "R3.dat"), dtype="f8", mode="w+",
                               shape=arrays["t3"].shape)}
        policy = se.BatchPolicy.everything(budget, ext, sinks={"R3": "accumulate"})
    t = time.perf_counter()
    ev = se.Evaluator(eqs, ext, budget=budget, policy=policy)
    try:
        ev.batched                                  # the fit (and the program) happen here
    except InfeasibleBudget as err:
        info["refused"] = str(err)
        info["refused_budget"] = float(err.budget)
        info["refused_minimum"] = float(err.minimum)
        return None
    info["plan_s"] = time.perf_counter() - t
    rep = ev.analyze()
    info.update(budget=budget, predicted_peak=rep.peak_bytes, loops=len(rep.loops),
                recompute=rep.recompute_overhead,
                unbatched_peak=se.analyze(eqs, ext).peak_bytes)
    tensors = {name: arrays[name] for name in ARRAYS}

    def fn():
        return ev.evaluate(tensors, out=out)

    def finish(info):
        info["meter_peak"] = ev.last_meter.peak_bytes
        info["flops"] = ev.last_meter.flops

    return fn, lambda out: (out["R1"], out["R2"], out["R3"]), finish


def _ebcc_blocks(x, no: int, nv: int):
    """ebcc's ``f.ov`` / ``v.oovv`` blocks, cut once (contiguous)."""
    from itertools import product

    import numpy as np
    from ebcc.util import Namespace

    sl = {"o": slice(0, no), "v": slice(no, no + nv)}
    return Namespace(**{"".join(k): np.ascontiguousarray(x[tuple(sl[s] for s in k)])
                        for k in product("ov", repeat=x.ndim)})


def _setup_ebcc(arrays: dict, info: dict):
    import numpy as np
    from ebcc.codegen import GCCSDT

    from closed_shell import _count          # einsum calls costed by opt_einsum

    nv, no = arrays["t1"].shape
    kw = dict(f=_ebcc_blocks(arrays["f"], no, nv), v=_ebcc_blocks(arrays["g"], no, nv),
              nocc=no, nvir=nv, t1=np.ascontiguousarray(arrays["t1"].T),
              t2=np.ascontiguousarray(arrays["t2"].transpose(2, 3, 0, 1)),
              t3=np.ascontiguousarray(arrays["t3"].transpose(3, 4, 5, 0, 1, 2)))

    def fn():
        return GCCSDT.update_amps(**kw)

    def residuals(out):
        return (out["t1new"].T, out["t2new"].transpose(2, 3, 0, 1),
                out["t3new"].transpose(3, 4, 5, 0, 1, 2))

    def finish(info):
        info["flops"] = _count(fn, [(GCCSDT, "einsum")])

    return fn, residuals, finish


def _setup_naive(arrays: dict, info: dict):
    import numpy as np
    import opt_einsum

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.chem.ccsdt_oracles import antisymmetrize, wickd_terms

    nv, no = arrays["t1"].shape
    sl = {"o": slice(0, no), "v": slice(no, no + nv)}
    t = time.perf_counter()
    terms = wickd_terms()
    operands = {"T:ov": arrays["t1"].T, "T:oovv": arrays["t2"].transpose(2, 3, 0, 1),
                "T:ooovvv": arrays["t3"].transpose(3, 4, 5, 0, 1, 2)}
    rows, flops = {}, 0.0
    for name in ("R1", "R2", "R3"):
        rows[name] = []
        for coeff, subs, ops in terms[name]:
            for op in ops:                 # H^{upper}_{lower}: f.T, <pq||rs> as (r, s, p, q)
                if op not in operands:
                    kind, block = op.split(":")
                    full = arrays["f"].T if len(block) == 2 else \
                        arrays["g"].transpose(2, 3, 0, 1)
                    operands[op] = full[tuple(sl[s] for s in block)]
            shapes = [operands[op].shape for op in ops]
            flops += float(opt_einsum.contract_path(subs, *shapes, shapes=True,
                                                    optimize="optimal")[1].opt_cost)
            rows[name].append((float(coeff), opt_einsum.contract_expression(
                subs, *shapes, optimize="optimal"), ops))
    operands = {k: np.ascontiguousarray(v) for k, v in operands.items()}
    info["build_s"] = time.perf_counter() - t
    info["terms"] = {name: len(r) for name, r in rows.items()}

    def fn():
        out = {}
        for name, n in (("R1", 1), ("R2", 2), ("R3", 3)):
            total = None
            for coeff, expr, ops in rows[name]:
                x = expr(*(operands[op] for op in ops))
                if coeff != 1.0:
                    x *= coeff
                total = x if total is None else total.__iadd__(x)
            out[name] = antisymmetrize(total, n, normalized=False) if n >= 2 else total
        return out

    def residuals(out):                     # wickd: occupied first
        return tuple(out[name].transpose(list(range(n, 2 * n)) + list(range(n)))
                     for name, n in (("R1", 1), ("R2", 2), ("R3", 3)))

    def finish(info):
        info["flops"] = flops

    return fn, residuals, finish


def _setup_pyscf(system: str, wd: Path, info: dict):
    from pyscf import scf
    from pyscf.cc import rccsdt

    mf = scf.RHF(_mol(SYSTEMS[system][1]))
    mf.__dict__.update(scf.chkfile.load(str(wd / f"{system}.chk"), "scf"))
    mf.converged = True
    mf._eri = mf.mol.intor("int2e", aosym="s8")     # RCCSDT's in-core integral path
    mycc = rccsdt.RCCSDT(mf)
    mycc.verbose = 0
    mycc.max_cycle = 1
    eris = mycc.ao2mo()
    mycc.kernel(eris=eris)                 # sets up its T3 maps; MP2 then one iteration
    tamps = [t.copy() for t in mycc.tamps]
    info["nocc_spatial"], info["nvir_spatial"] = mycc.nocc, mycc.nmo - mycc.nocc

    def fn():
        return mycc.update_amps_([t.copy() for t in tamps], eris)

    def finish(info):
        info["flops"] = float("nan")

    return fn, None, finish


def _worker(code: str, system: str, wd: str, conn) -> None:
    import gc

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        wd = Path(wd)
        info: dict = {}
        if code == "pyscf_rccsdt":
            made = _setup_pyscf(system, wd, info)
        else:
            arrays = {name: np.load(wd / f"{system}_{name}.npy") for name in ARRAYS}
            made = (_setup_ours(code, arrays, info) if code.startswith("ours") else
                    _setup_ebcc(arrays, info) if code == "ebcc" else _setup_naive(arrays, info))
            del arrays
        if made is None:                   # refused budget
            conn.send(dict(info, ready=False))
            return
        fn, residuals, finish = made
        info["rss_setup_mb"] = _vm("VmHWM:")
        t = time.perf_counter()
        out = fn()
        info["first_s"] = time.perf_counter() - t
        if residuals is not None:
            for k, r in enumerate(residuals(out), start=1):
                np.save(wd / f"{system}_{code}_R{k}.npy", np.ascontiguousarray(r))
        del out
        conn.send(dict(info, ready=True))
        while conn.recv() == "go":
            gc.collect()
            t = time.perf_counter()
            fn()
            conn.send(time.perf_counter() - t)
        info = {"rss_peak_mb": _vm("VmHWM:")}
        finish(info)
        conn.send(info)
    except Exception as err:  # reported, the other codes go on
        import traceback

        conn.send({"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()})


def _prep_worker(system: str, wd: str, conn) -> None:
    conn.send(_prep(system, Path(wd)))


def _differences(system: str, codes, wd: Path) -> dict:
    """max |R_code - R_ebcc| / max |R_ebcc| per residual (one array in memory at a time)."""
    import numpy as np

    out = {}
    for code in codes:
        if code in ("ebcc", "pyscf_rccsdt"):
            continue
        diffs = []
        for k in (1, 2, 3):
            ref = np.load(wd / f"{system}_ebcc_R{k}.npy", mmap_mode="r")
            got = np.load(wd / f"{system}_{code}_R{k}.npy", mmap_mode="r")
            diffs.append(float(np.abs(got - ref).max() / np.abs(ref).max()))
        out[code] = diffs
    return out


def run_system(system: str, codes, rounds: int, wd: Path) -> dict:
    info = {"load_before": _load()}
    proc, conn = _spawn(_prep_worker, system, str(wd))
    info.update(conn.recv())
    proc.join()
    workers, setups = {}, {}
    for code in codes:                     # set up one after another (each checks once)
        p, c = _spawn(_worker, code, system, str(wd))
        msg = c.recv()
        setups[code] = msg
        print(f"  {system} {code}: "
              + (msg.get("error") or msg.get("refused") or
                 f"first call {msg['first_s']:.2f} s"), flush=True)
        if msg.get("ready"):
            workers[code] = (p, c)
        else:
            p.join()
    if "ebcc" in workers:
        info["rel_diff_vs_ebcc"] = _differences(system, [c for c in workers], wd)
        for code, d in info["rel_diff_vs_ebcc"].items():
            print(f"  {system} {code} vs ebcc: max rel diff R1 {d[0]:.1e} R2 {d[1]:.1e} "
                  f"R3 {d[2]:.1e}", flush=True)
    info["load_start"] = _load()
    samples = {code: [] for code in workers}
    order = list(workers)
    for r in range(rounds):
        for code in order[r % len(order):] + order[:r % len(order)]:
            time.sleep(SETTLE_S)
            workers[code][1].send("go")
            samples[code].append(workers[code][1].recv())
        print(f"  {system} round {r + 1}: "
              + ", ".join(f"{c} {samples[c][-1]:.2f}" for c in order), flush=True)
    info["load_after"] = _load()
    results = {}
    for code, msg in setups.items():
        results[code] = dict(msg)
        if code in workers:
            p, c = workers[code]
            c.send("stop")
            results[code].update(c.recv(), samples=samples[code])
            p.join()
    info["results"] = results
    for k in wd.glob(f"{system}_*.npy"):
        k.unlink()
    return info


# ----------------------------------------------------------------- report
def _med(xs) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def table(system: str, info: dict, rounds: int) -> str:
    res = info["results"]
    base = {k: statistics.median(res[k]["samples"]) for k in ("ebcc", "naive")
            if res.get(k, {}).get("samples")}
    name = SYSTEMS[system][0]
    lines = [f"**{name}** (spin orbitals: {info['nocc']} occ / {info['nvir']} vir; "
             f"{rounds} timed round{'s' if rounds != 1 else ''} after the checked first call; "
             f"dgemm {info['dgemm_gflops']:.0f} GFLOP/s as measured under that load)", "",
             "| code | median s (min–max) | first call s | ÷ ebcc | ÷ naive | GFLOP | "
             "GFLOP/s | plan s | metered peak MiB | peak RSS MiB | "
             "max rel diff R1 / R2 / R3 vs ebcc |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    empty = " |" * 9
    diffs = info.get("rel_diff_vs_ebcc", {})
    for code in CODES:
        if code not in res:
            continue
        r = res[code]
        if "error" in r:
            lines.append(f"| {code} | error: {r['error']} |" + empty)
            continue
        if "refused" in r:
            lines.append(f"| {code} | refused: budget {r['refused_budget'] / 2**20:.0f} MiB, "
                         f"minimum {r['refused_minimum'] / 2**20:.0f} MiB "
                         f"({r['refused_minimum'] / _unbatched(res):.0%} of the unbatched "
                         f"peak) |" + empty)
            continue
        med = statistics.median(r["samples"])
        gf = r["flops"] / 1e9
        label = code
        if "budget" in r and r["budget"] is not None:
            label += (f" (budget {r['budget'] / 2**20:.0f} MiB = "
                      f"{r['budget'] / r['unbatched_peak']:.0%}, {r['loops']} loops, "
                      f"recompute {r['recompute']:.3f}×)")
        plan = f"{r['plan_s']:.2f}" if "plan_s" in r else \
            (f"{r['build_s']:.2f} (build)" if "build_s" in r else "–")
        if "min_budget_s" in r:
            plan += f" + {r['min_budget_s']:.1f} min_budget"
        d = diffs.get(code)
        cells = [label, _med(r["samples"]), f"{r['first_s']:.2f}",
                 f"{med / base['ebcc']:.2f}" if "ebcc" in base else "–",
                 f"{med / base['naive']:.2f}" if "naive" in base else "–",
                 f"{gf:.1f}" if gf == gf else "n/a", f"{gf / med:.1f}" if gf == gf else "n/a",
                 plan, f"{r['meter_peak'] / 2**20:.0f}" if "meter_peak" in r else "–",
                 f"{r['rss_peak_mb']:.0f}",
                 " / ".join(f"{x:.1e}" for x in d) if d else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"load before: `{info['load_before']}`; after: `{info['load_after']}`"]
    return "\n".join(lines) + "\n"


def _unbatched(res: dict) -> float:
    for r in res.values():
        if "unbatched_peak" in r:
            return r["unbatched_peak"]
    return float("nan")


def _profile(wd: Path) -> str:
    """cProfile of one unbatched 6-31G residual of ours (after a warm-up call)."""
    import cProfile
    import io
    import pstats

    import numpy as np

    proc, conn = _spawn(_prep_worker, "631g", str(wd))
    conn.recv()
    proc.join()
    arrays = {name: np.load(wd / f"631g_{name}.npy") for name in ARRAYS}
    made = _setup_ours("ours", arrays, {})
    fn = made[0]
    fn()
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
    return buf.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="631g,ccpvdz")
    ap.add_argument("--codes", default=",".join(CODES))
    ap.add_argument("--rounds", default="631g=5,ccpvdz=2",
                    help="timed rounds per system, e.g. 631g=5,ccpvdz=2 (or one number)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile one unbatched 6-31G residual of ours")
    ap.add_argument("--docs-from", default=None, metavar="JSON",
                    help="run nothing: write the docs section from a --json file of a run "
                         "made with the same --systems and --rounds")
    args = ap.parse_args(argv)
    rounds = ({k: int(v) for k, v in (x.split("=") for x in args.rounds.split(","))}
              if "=" in args.rounds else {s: int(args.rounds) for s in SYSTEMS})
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                           "OMP_NUM_THREADS")}
    print(f"environment as found: {env}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    if args.docs_from:
        saved = json.loads(Path(args.docs_from).read_text())
        _write_docs(args, saved["environment"],
                    [table(s, info, rounds[s]) for s, info in saved["systems"].items()],
                    saved.get("profile"))
        return 0
    out = {"environment": env, "systems": {}}
    texts = []
    with tempfile.TemporaryDirectory() as wd:
        for system in args.systems.split(","):
            info = run_system(system, args.codes.split(","), rounds[system], Path(wd))
            out["systems"][system] = info
            texts.append(table(system, info, rounds[system]))
            print(texts[-1], flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
        if args.profile:
            out["profile"] = _profile(Path(wd))
            print(out["profile"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    if args.write_docs:
        _write_docs(args, env, texts, out.get("profile"))
    return 0


def _write_docs(args, env, texts, profile: str | None = None) -> None:
    from doc_section import write_section

    tail = ""
    if profile:                            # pstats' header and its first 12 rows
        rows = [x for x in profile.splitlines() if x.strip()]
        start = next(k for k, x in enumerate(rows) if x.lstrip().startswith("ncalls"))
        tail = ("\nWhere ours spends one unbatched H2O/6-31G residual (`--profile`: "
                "cProfile, by own time):\n\n```\n" + rows[0].strip() + "\n"
                + "\n".join(rows[start:start + 13]) + "\n```\n\n"
                "`backends.py: accumulate_` is `target += alpha * src`; at 6-31G nearly all "
                "its time goes to R3-sized adds of a permuted (transposed, strided) `src` "
                "with alpha != ±1 (the antisymmetrizer's permutations added into R3); "
                "`_run` is the contractions (GEMMs and their operand transposes).\n")
    write_section("## CCSDT residual", "## CCSDT residual\n\n" + _preamble(args, env)
                  + "\n".join(texts) + tail)


def _preamble(args, env) -> str:
    return (
        "One spin-orbital CCSDT residual (E, R1, R2, R3) on H2O (RHF spin orbitals, "
        "occupied first) at fixed random antisymmetric amplitudes (seed 7, 0.01·N(0, 1); the "
        "same arrays for every code but PySCF). Written by `python benchmarks/ccsdt.py "
        f"--systems {args.systems} --rounds {args.rounds} --profile --write-docs`; every "
        "code in its "
        "own worker process, rounds interleaved (order rotated, 0.5 s pause before each "
        "call) after one untimed checked call; median (min–max) s.\n\n"
        "- **ours**: `se.Evaluator(ccsdt_equations(), extents)` built once, "
        "`evaluate(tensors)` timed; **plan s** is the construction and fit (the "
        "`se.min_budget` search apart); GFLOP and metered peak from the evaluation's `Meter`. "
        "**ours_min**: under `budget=se.min_budget(...)`; **ours_10pct**: under 10 % of the "
        "unbatched predicted peak with R3 written batch by batch into an `np.memmap` sink "
        "(`out={\"R3\": ...}`: R3 is never held), refused when below the minimum (the "
        "minimum it names is shown).\n"
        "- **ebcc**: `ebcc.codegen.GCCSDT.update_amps` (ebcc's generated GCCSDT code) on the "
        "same f, <pq||rs> blocks (cut once) and amplitudes; its einsum calls costed by "
        "opt_einsum.\n"
        "- **naive**: wickd's terms, each one `opt_einsum.contract_expression(..., "
        "optimize=\"optimal\")` built once, no shared intermediates, summed, R2/R3 then "
        "antisymmetrized by explicit permutations (tests/chem/ccsdt_oracles.py); **plan s** "
        "is the wickd derivation and the expression build.\n"
        "- **pyscf_rccsdt**: `pyscf.cc.rccsdt.RCCSDT.update_amps_` on the closed-shell RHF: "
        "a different, spin-adapted, T1-dressed code (spatial orbitals, i≤j≤k-packed T3) at "
        "its own amplitudes (MP2, then one iteration), timed only.\n"
        "- **÷ ebcc**, **÷ naive**: median over that code's median; **first call s**: the "
        "checked call before the timed rounds (not in the median).\n"
        "- **max rel diff**: max |R − R_ebcc| / max |R_ebcc| of the first (untimed) call.\n"
        f"- environment as found: {env}; 2 CPUs shared with other work (load shown).\n\n")


if __name__ == "__main__":
    sys.exit(main())
