"""The ``sequant-eval`` command line.

    sequant-eval ccsd [--molecule water] [--basis cc-pvdz]     CCSD with a memory report
    sequant-eval analyze FILE... --extent i=10 --extent a=38   dry run of equation files
    sequant-eval regen-equations [--check]                     re-derive the CCSD equations
    sequant-eval snapshots [--update]                          schedule snapshots (schedules/)
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import SequantEvalError

__all__ = ["main"]


def _assignments(items: Sequence[str], flag: str) -> dict[str, int]:
    """``["i=10", "a=38"]`` → ``{"i": 10, "a": 38}``; anything else names the flag."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise SequantEvalError(f"{flag} expects SPACE=N, got {item!r}")
        out[name.strip()] = int(value)
    return out


def _cmd_ccsd(args: argparse.Namespace) -> int:
    from .chem.ccsd import run_ccsd

    run = run_ccsd(args.molecule, args.basis, args.backend, max_iter=args.max_iter,
                   budget=args.budget)
    print(run.summary())
    return 0 if run.result.converged else 1


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .api import analyze
    from .expr import parse

    eqs = []
    for path in args.files:
        stem = Path(path).stem
        eqs += parse(Path(path).read_text(encoding="utf-8"), default_name=stem)
    print(analyze(eqs, _assignments(args.extent, "--extent"), budget=args.budget).dump(), end="")
    return 0


def _cmd_regen(args: argparse.Namespace) -> int:
    from .chem import derive

    text = derive.derive_ccsd_text()
    if args.check:
        same = derive.DATA_PATH.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{derive.DATA_PATH} differs from a fresh derivation")
        return 0 if same else 1
    derive.regenerate()
    print(f"wrote {derive.DATA_PATH}")
    return 0


def _spaces(text: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip()) if text else ()


def _cmd_report(args: argparse.Namespace) -> int:
    from .api import Evaluator
    from .expr import parse
    from .plan import BatchPolicy
    from .plan.regime import load_regime
    from .report.plot import plot_report
    from .report.progress import Progress

    eqs = []
    for path in args.files:
        eqs += parse(Path(path).read_text(encoding="utf-8"), default_name=Path(path).stem)
    regime = load_regime(args.regime)
    contracted, external = _spaces(args.contracted), _spaces(args.external)
    if not contracted and not external:
        contracted = external = tuple(regime.extents)
    policy = BatchPolicy(budget=args.budget, contracted=contracted, external=external,
                         block=_assignments(_spaces(args.block), "--block"))
    progress = Progress()
    try:
        rep = Evaluator(eqs, regime, policy=policy, progress=progress).analyze()
    finally:
        progress.close()
    title = f"{', '.join(Path(f).name for f in args.files)} / {regime.name or args.regime}"
    memory = rep.memory(title)
    print(memory.to_text(), end="")
    if args.json:
        Path(args.json).write_text(memory.to_json() + "\n", encoding="utf-8")
    if args.plot:
        plot_report(memory, args.plot)
    return 0


def _cmd_snapshots(args: argparse.Namespace) -> int:
    from .schedule import snapshots

    if args.update:
        for path in snapshots.update(args.dir):
            print(f"wrote {path}")
        return 0
    stale = snapshots.check(args.dir)
    print("snapshots up to date" if not stale else "stale: " + ", ".join(stale))
    return 1 if stale else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sequant-eval", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("ccsd", help="spin-orbital CCSD with a memory report")
    p.add_argument("--molecule", default="water", help="water or water_dimer")
    p.add_argument("--basis", default="cc-pvdz")
    p.add_argument("--backend", default="numpy", choices=["numpy"])
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--budget", default=None,
                   help="memory budget: bytes (25e6, 25MB, 4GiB) or a share of the unbatched "
                        "peak (25%%)")
    p.set_defaults(func=_cmd_ccsd)
    p = sub.add_parser("analyze", help="dry run: peak memory and flops of equation files")
    p.add_argument("files", nargs="+")
    p.add_argument("--extent", action="append", default=[], metavar="SPACE=N")
    p.add_argument("--budget", default=None, help="bytes, e.g. 25e9, 25GB, 4GiB")
    p.set_defaults(func=_cmd_analyze)
    p = sub.add_parser("regen-equations", help="re-derive the packaged CCSD equations")
    p.add_argument("--check", action="store_true", help="only compare, do not write")
    p.set_defaults(func=_cmd_regen)
    p = sub.add_parser("report", help="peak-memory report of equation files under a budget")
    p.add_argument("files", nargs="+")
    p.add_argument("--regime", required=True, help="size regime JSON (data/water20/regime.json)")
    p.add_argument("--budget", required=True, help="bytes: 25e9, 25GB, 4GiB")
    p.add_argument("--contracted", help="spaces batchable where summed, e.g. Κ or Κ,i")
    p.add_argument("--external", help="spaces batchable where open on a result, e.g. i")
    p.add_argument("--block", help="block sizes, e.g. Κ=256,i=16")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--plot", help="write a PNG of live memory over the schedule here")
    p.set_defaults(func=_cmd_report)
    p = sub.add_parser("snapshots", help="check (or --update) the schedule snapshots")
    p.add_argument("--update", action="store_true", help="rewrite the stored dumps")
    p.add_argument("--dir", default=None, help="snapshot folder (default: schedules/)")
    p.set_defaults(func=_cmd_snapshots)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except SequantEvalError as err:
        print(f"sequant-eval: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
