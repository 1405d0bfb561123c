"""The ``sequant-eval`` command line.

    sequant-eval ccsd [--atom "O 0 0 0.117; ..." | --xyz F] [--basis cc-pvdz] [--frozen N]
                      [--charge Q --spin 2S] [--method ccsd|ccsd(t)|ccsdt]
                                                               CC with a memory report
    sequant-eval analyze FILE... --extent i=10 --extent a=38   dry run of equation files
    sequant-eval report FILE... --regime R.json --budget 25GB  peak-memory report
    sequant-eval regen-equations [--check]                     re-derive the CC equations
    sequant-eval snapshots [--update]                          schedule snapshots (schedules/)
    sequant-eval clean DIR [--all] [--dry-run]                 remove stale scratch files

Every mistake (a missing file, a malformed budget, bad equation text) is one line on
stderr and exit status 2; no traceback. Exit statuses (``EXIT_CODES``):

    0  done (ccsd: converged)
    1  ccsd: not converged within --max-iter; regen-equations --check, snapshots: stale
    2  a usage mistake or a refused input (bad flag, file, molecule, budget, option)
    3  an I/O failure: a file the run writes could not be written (disk full, a
       read-only folder for --integrals-on-disk, --chkfile or --json)

A run stopped by SIGTERM exits with status 143 (Ctrl-C: 130) after removing its scratch
files; what a run killed with SIGKILL left is removed by the next run in the folder, or by
``sequant-eval clean DIR``.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from importlib import import_module
from dataclasses import replace
from pathlib import Path

from ..errors import InfeasibleBudget, SequantEvalError, StorageError, UsageError
from .inputs import (_assignments, _flag_budget, _frozen, _output, _policy,
                     _read_equations, _regime, _write)

__all__ = ["main", "EXIT_CODES"]

#: The exit statuses of ``sequant-eval`` (also in ``--help``).
EXIT_CODES = {0: "done (ccsd: converged)",
              1: "ccsd: not converged; regen-equations --check, snapshots: stale",
              2: "usage mistake or refused input",
              3: "I/O failure (disk full, read-only folder)"}
EXIT_USAGE, EXIT_IO = 2, 3
_EPILOG = "exit status: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (and exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _check_ccsd_flags(args: argparse.Namespace) -> None:
    if args.max_iter < 1 or not 0 < args.conv_tol < math.inf or not (
            0 < args.conv_tol_normt < math.inf):
        raise UsageError("--max-iter must be >= 1, and --conv-tol and --conv-tol-normt "
                         "positive finite numbers")
    if sum(x is not None for x in (args.molecule, args.atom, args.xyz)) > 1:
        raise UsageError("give one of --molecule, --atom and --xyz")
    if args.method != "ccsd" and args.integrals_on_disk is not None:
        raise UsageError(f"--integrals-on-disk is for --method ccsd; {args.method} keeps its "
                         "integrals in memory (drop it, or give a --budget)")
    if args.integrals_on_disk is not None and not Path(args.integrals_on_disk).is_dir():
        raise UsageError(f"--integrals-on-disk {args.integrals_on_disk}: no such folder; "
                         "create it first")
    for flag, path in (("--chkfile", args.chkfile), ("--restart", args.restart)):
        _output(path, flag)


@contextmanager
def _log_to_stdout():
    """The package's log records (one line per CC iteration, the final energies) printed
    on stdout while the command runs."""
    logger = logging.getLogger("sequant_eval")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def _method(args: argparse.Namespace, mf):
    """The CC method object the ``ccsd`` flags ask for."""
    from ..chem import CCSD, CCSDT

    options = dict(frozen=_frozen(args.frozen), budget=_flag_budget(args.budget),
                   backend=args.backend, conv_tol=args.conv_tol,
                   conv_tol_normt=args.conv_tol_normt, max_cycle=args.max_iter,
                   chkfile=args.chkfile or args.restart, restart=args.restart or False)
    if args.max_memory is not None:
        options["max_memory"] = args.max_memory
    if args.method == "ccsdt":
        return CCSDT(mf, intermediates=args.intermediates, **options)
    return CCSD(mf, spin_orbital=True if args.spin_orbital else None,
                integrals_on_disk=args.integrals_on_disk,
                intermediates=args.intermediates, **options)


def _cmd_ccsd(args: argparse.Namespace) -> int:
    """CCSD (``--method ccsd(t)``: then the (T); ``--method ccsdt``: spin-orbital
    CCSDT) on a molecule (closed-shell
    CCSD equations for a closed-shell RHF, unrestricted ones for an open shell's UHF), one
    line per iteration, then energies and the memory report; ``--json`` writes them as
    JSON."""
    from ..chem import molecules
    from ..chem.process_memory import RSSWatch
    from ..units import format_bytes

    _output(args.json, "--json")
    _check_ccsd_flags(args)
    _frozen(args.frozen)
    _flag_budget(args.budget)
    if args.atom is not None or args.xyz is not None:
        atom = args.atom if args.atom is not None else molecules.read_xyz(args.xyz)
    else:
        atom = molecules.geometry(args.molecule or "water").replace("\n", "; ")
    mol = molecules.molecule_from_atoms(atom, args.basis, args.charge, args.spin)
    mf = molecules.mean_field(mol)
    if args.integrals_on_disk is not None or args.chkfile or args.restart:
        import_module("h5py")     # imported before the baseline: it is not the run's memory
    rss = RSSWatch.start()              # baseline: imports and SCF done
    print(f"{type(mf).__name__} E = {mf.e_tot:.10f} Eh ({molecules.chemical_formula(mol)}, "
          f"{mol.nao} basis functions, {mol.nelectron} electrons)")
    with _log_to_stdout():
        mycc = _method(args, mf).run()
        if args.method == "ccsd(t)" and mycc.converged:
            mycc.ccsd_t()                     # its energies join the summary
    print(mycc.summary())
    growth = rss.growth()
    if growth is not None:
        print(f"  peak RSS growth since SCF  {format_bytes(growth)} ({growth} B)")
    if args.json:
        data = dict(mycc.to_dict(), atom=atom, charge=args.charge, spin=mol.spin,
                    peak_rss_growth_bytes=growth)
        _write(args.json, "--json", json.dumps(data, indent=1) + "\n")
    return 0 if mycc.converged else 1


def _cmd_analyze(args: argparse.Namespace) -> int:
    from ..api import Evaluator
    from ..plan.regime import Regime

    _output(args.json, "--json")
    extents = _assignments(args.extent, "--extent")
    if args.regime:
        regime = _regime(args.regime)
        extents = Regime(dict(regime.extents, **extents), regime.moments, regime.name)
    elif not extents:
        raise UsageError("analyze needs the extents: --extent SPACE=N (once per space) or "
                         "--regime REGIME.json")
    eqs = _read_equations(args.files)
    if args.min_budget:
        from ..api import min_budget
        from ..plan import BatchPolicy
        from ..report.text import format_bytes

        policy = _policy(args, eqs, extents)
        if policy is None:
            known = getattr(extents, "extents", extents)
            policy = BatchPolicy.everything(None, known)
        need = min_budget(eqs, extents, replace(policy, budget=None))
        print(f"smallest feasible budget {format_bytes(need)} ({need} B)")
        return 0
    rep = Evaluator(eqs, extents, policy=_policy(args, eqs, extents)).analyze()
    print(rep.dump(), end="")
    if args.json:
        data = {"files": list(args.files),
                "extents": dict(getattr(extents, "extents", extents)),
                "peak_bytes": rep.peak_bytes, "binding_point": rep.binding_point,
                "flops": rep.flops, "unbatched_flops": rep.unbatched_flops,
                "recompute_overhead": rep.recompute_overhead,
                "loops": [str(lp) for lp in rep.loops]}
        if rep.schedule is not None:
            data["memory"] = json.loads(rep.memory(", ".join(args.files)).to_json())
        _write(args.json, "--json", json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return 0


def _cmd_regen(args: argparse.Namespace) -> int:
    from ..chem import derive, triples

    text = derive.derive_ccsd_text()
    made = {derive.DATA_PATH.with_name(name): triples.triples_text(kind)
            for kind, name in triples.TRIPLES_FILES.items()}
    made.update({derive.DATA_PATH.with_name(name): triples.factored_text(kind)
                 for kind, name in triples.FACTORED_FILES.items()})
    made.update({derive.DATA_PATH.with_name(name): triples.symmetric_text(kind)
                 for kind, name in triples.SYMMETRIC_FILES.items()})
    if args.check:
        closed = derive.closed_shell_text(text)
        fresh = {derive.DATA_PATH: text, derive.CLOSED_SHELL_PATH: closed,
                 derive.FOLDED_PATH: derive.folded_text(closed),
                 derive.UNRESTRICTED_PATH: derive.unrestricted_text(text),
                 derive.CCSDT_PATH: derive.derive_ccsdt_text(), **made}
        stale = [p for p, t in fresh.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != t]
        for path in stale:
            print(f"{path} differs from a fresh derivation")
        if not stale:
            print("up to date")
        return 1 if stale else 0
    derive.regenerate()
    derive.regenerate_ccsdt()
    for path, text in made.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {derive.DATA_PATH}, {derive.CLOSED_SHELL_PATH}, {derive.FOLDED_PATH}, "
          f"{derive.UNRESTRICTED_PATH}, "
          f"{derive.CCSDT_PATH} and the (T) energies {', '.join(p.name for p in made)}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from ..api import Evaluator
    from ..report.plot import plot_report, require_matplotlib
    from ..report.progress import Progress

    _output(args.json, "--json")
    _output(args.plot, "--plot")
    if args.plot:
        require_matplotlib()
    regime = _regime(args.regime)
    eqs = _read_equations(args.files)
    policy = _policy(args, eqs, regime)
    progress = Progress()
    try:
        rep = Evaluator(eqs, regime, policy=policy, progress=progress).analyze()
    finally:
        progress.close()
    title = f"{', '.join(Path(f).name for f in args.files)} / {regime.name or args.regime}"
    memory = rep.memory(title)
    print(memory.to_text(), end="")
    if args.json:
        _write(args.json, "--json", memory.to_json() + "\n")
    if args.plot:
        try:
            plot_report(memory, args.plot)
        except OSError as err:
            from ..chem.files import storage_error

            raise storage_error("--plot", args.plot, err) \
                from err
    return 0


def _cmd_snapshots(args: argparse.Namespace) -> int:
    from ..checkout import load_tool

    snapshots = load_tool("snapshots")           # tools/snapshots.py of the checkout

    if args.update:
        for path in snapshots.update(args.dir):
            print(f"wrote {path}")
        return 0
    stale = snapshots.check(args.dir)
    print("snapshots up to date" if not stale else "stale: " + ", ".join(stale))
    return 1 if stale else 0


def _cmd_clean(args: argparse.Namespace) -> int:
    """Remove what runs that are gone left in DIR (scratch files, integral files that can
    never be reused; with ``--all`` every integral file), printing each file."""
    from ..chem.scratch import clean
    from ..units import format_bytes

    folder = Path(args.dir)
    if not folder.is_dir():
        raise UsageError(f"clean {args.dir}: no such folder")
    done = clean(folder, everything=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for item in done:
        if item.kept:
            print(f"kept {item.path}: {item.why}")
        else:
            print(f"{verb} {item.path} ({format_bytes(item.size)}): {item.why}")
    gone = [r for r in done if not r.kept]
    if gone:
        print(f"{verb} {len(gone)} files ({format_bytes(sum(r.size for r in gone))}) from "
              f"{folder}")
    else:
        print(f"nothing to remove in {folder}")
    return 0


def _policy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contracted", help="spaces batchable where summed, e.g. Κ or Κ,i")
    p.add_argument("--external", help="spaces batchable where open on a result, e.g. i")
    p.add_argument("--block", help="block sizes, e.g. Κ=256,i=16")
    p.add_argument("--arrays-only", action="store_true",
                   help="the budget is for the arrays only (by default it also covers the "
                        "program itself: its ops, tables and kernel plans)")
    p.add_argument("--json", help="write the report as JSON here")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sequant-eval")
    except PackageNotFoundError:
        from . import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """The ``sequant-eval`` command: parse ``argv`` and run a subcommand; returns the exit
    status."""
    parser = _Parser(prog="sequant-eval", description=__doc__.split("\n")[0], epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=f"sequant-eval {_version()}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("ccsd", help="CCSD (or --method ccsdt) of a molecule with a memory "
                                    "report", epilog=_EPILOG)
    p.add_argument("--method", default="ccsd", choices=["ccsd", "ccsd(t)", "ccsdt"],
                   help="ccsd (default), ccsd(t) (the (T) step after CCSD, under the same "
                        "--budget: closed-shell, unrestricted for an open shell, or "
                        "spin-orbital with --spin-orbital) or "
                        "ccsdt (spin-orbital equations on any reference)")
    p.add_argument("--molecule", default=None,
                   help="a named molecule: water (default) or water_dimer")
    p.add_argument("--atom", help='atoms in Angstrom: "O 0 0 0.117; H 0 0.757 -0.469; ..."')
    p.add_argument("--xyz", help="an XYZ file (Angstrom)")
    p.add_argument("--basis", default="cc-pvdz")
    p.add_argument("--charge", type=int, default=0)
    p.add_argument("--spin", type=int, default=None, metavar="2S",
                   help="unpaired electrons, PySCF's convention (default: 0 or 1 by the "
                        "electron count); open shells run UCCSD on a UHF")
    p.add_argument("--frozen", default="0", metavar="N|LIST",
                   help="PySCF's frozen: leave the N lowest spatial orbitals uncorrelated "
                        "(of each spin for UHF/ROHF, as pyscf.cc.UCCSD(frozen=N)), or the "
                        "spatial orbitals listed (0,1,12)")
    p.add_argument("--conv-tol", type=float, default=1e-7,
                   help="energy change threshold (PySCF's default, 1e-7)")
    p.add_argument("--conv-tol-normt", type=float, default=1e-5,
                   help="amplitude change threshold, PySCF's conv_tol_normt (default 1e-5)")
    p.add_argument("--max-iter", type=int, default=50)
    p.add_argument("--spin-orbital", action="store_true",
                   help="spin-orbital equations (GCCSD) instead of the closed-shell (RHF) "
                        "or unrestricted (UHF) ones")
    found = p.add_mutually_exclusive_group()
    found.add_argument("--intermediates", dest="intermediates", action="store_const",
                       const=True, default=None,
                       help="closed shell and unrestricted: evaluate with common-factor "
                            "intermediates (the closed shell's default finds them from 1e8 "
                            "flops of the vvvv ladder up)")
    found.add_argument("--no-intermediates", dest="intermediates", action="store_const",
                       const=False,
                       help="closed shell and unrestricted: evaluate the plain equations "
                            "in one program instead of with common-factor intermediates "
                            "(more flops, less held memory)")
    p.add_argument("--backend", default="numpy", choices=["numpy"])
    p.add_argument("--budget", default=None,
                   help="memory budget: bytes (25e6, 25MB, 4GiB) or a share of the unbatched "
                        "peak (25%%)")
    p.add_argument("--max-memory", type=float, default=None, metavar="MB",
                   help="PySCF's max_memory (MB; default: the SCF's, 4000): without --budget, "
                        "a residual that does not fit in it unbatched runs batched within it")
    p.add_argument("--chkfile", default=None, metavar="CHK",
                   help="write an HDF5 checkpoint here after every iteration")
    p.add_argument("--restart", default=None, metavar="CHK",
                   help="continue from this checkpoint (and keep writing it unless "
                        "--chkfile names another)")
    p.add_argument("--integrals-on-disk", metavar="DIR", default=None,
                   help="write the integral blocks once to an HDF5 file in DIR and read them "
                        "per batch; the budget then bounds the whole iteration")
    p.add_argument("--json", help="write energies, iterations and memory as JSON here")
    p.set_defaults(func=_cmd_ccsd)
    p = sub.add_parser("analyze", help="dry run: peak memory and flops of equation files")
    p.add_argument("files", nargs="+")
    p.add_argument("--extent", action="append", default=[], metavar="SPACE=N")
    p.add_argument("--regime", help="size regime JSON (extents; --extent entries override)")
    p.add_argument("--budget", default=None,
                   help="bytes (25e9, 25GB, 4GiB) or a share of the unbatched peak (25%%)")
    p.add_argument("--min-budget", action="store_true",
                   help="print the smallest feasible budget (for the batchable spaces and "
                        "blocks given) instead of the dry run")
    _policy_arguments(p)
    p.set_defaults(func=_cmd_analyze)
    p = sub.add_parser("regen-equations",
                       help="re-derive the packaged CCSD and CCSDT equations")
    p.add_argument("--check", action="store_true", help="only compare, do not write")
    p.set_defaults(func=_cmd_regen)
    p = sub.add_parser("report", help="peak-memory report of equation files under a budget")
    p.add_argument("files", nargs="+")
    p.add_argument("--regime", required=True, help="size regime JSON (data/water20/regime.json)")
    p.add_argument("--budget", required=True,
                   help="bytes (25e9, 25GB, 4GiB) or a share of the unbatched peak (25%%)")
    _policy_arguments(p)
    p.add_argument("--plot", help="write a PNG of live memory over the schedule here "
                                  "(needs matplotlib: pip install 'sequant-eval[plot]')")
    p.set_defaults(func=_cmd_report)
    p = sub.add_parser("snapshots", help="check (or --update) the schedule snapshots")
    p.add_argument("--update", action="store_true", help="rewrite the stored dumps")
    p.add_argument("--dir", default=None, help="snapshot folder (default: schedules/)")
    p.set_defaults(func=_cmd_snapshots)
    p = sub.add_parser("clean", help="remove the scratch files runs that are gone left in "
                                     "DIR (and, with --all, the integral files)",
                       epilog=_EPILOG)
    p.add_argument("dir", metavar="DIR", help="a folder given to --integrals-on-disk (or "
                                              "holding a --chkfile)")
    p.add_argument("--all", action="store_true",
                   help="also remove every integral file the package wrote there (never a "
                        "live run's scratch, never a checkpoint)")
    p.add_argument("--dry-run", action="store_true", help="only print what would go")
    p.set_defaults(func=_cmd_clean)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with _terminated_as_exit():
            return args.func(args)
    except KeyboardInterrupt:
        print("sequant-eval: interrupted", file=sys.stderr)
        return 130
    except InfeasibleBudget as err:
        print(f"sequant-eval: error: {_infeasible(err, args)}", file=sys.stderr)
        return EXIT_USAGE
    except StorageError as err:
        print(f"sequant-eval: error: {_first_line(err)}", file=sys.stderr)
        return EXIT_IO
    except SequantEvalError as err:
        print(f"sequant-eval: error: {_first_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:                     # an I/O failure no layer named: still one line
        print(f"sequant-eval: error: I/O failure: {_first_line(err)}", file=sys.stderr)
        return EXIT_IO


@contextmanager
def _terminated_as_exit():
    """While the command runs, SIGTERM (``kill PID``) is an ordinary exit (status 143):
    the ``finally`` blocks run and the run's scratch files are removed. (SIGKILL cannot
    be caught: the next run in the folder, or ``sequant-eval clean``, removes them.)"""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _infeasible(err: InfeasibleBudget, args: argparse.Namespace) -> str:
    """An infeasible budget as a command-line user acts on it: the numbers and the flags."""
    from ..units import format_bytes

    need = int(math.ceil(err.minimum))
    if getattr(args, "budget", None) is not None:
        given = f"--budget {args.budget}"
    else:
        given = f"--max-memory {args.max_memory or 'of the SCF'} (no --budget given)"
    def shown(n: float) -> str:
        text = format_bytes(n)
        return text if text.endswith(" B") else f"{text} ({int(n)} B)"

    text = (f"{given}: {shown(err.budget)} is below the smallest budget that works, "
            f"{shown(need)}; give --budget {need} or more")
    if args.command in ("analyze", "report"):
        text += ", or allow finer blocks (--block SPACE=N)"
    return text

