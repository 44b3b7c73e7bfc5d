"""`optbench ab`: its arguments and the call into the A/B driver (optbench.ab), which runs the base ref
and the working tree interleaved, case by case, on this machine. Exit 1 on a regression. No torch."""

from __future__ import annotations

import argparse
from pathlib import Path


def ab(args: argparse.Namespace) -> int:
    from optbench.ab.driver import AbOptions, run_ab

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    options = AbOptions(
        base=args.base,
        rounds=args.rounds,
        slices=args.slices,
        slice_rounds=args.slice_rounds,
        out=path(args.out),
        config=path(args.config),
        markdown=path(args.markdown),
        json=path(args.json),
        pytest_args=args.pytest_args,
        step_timeout=args.step_timeout,
        confirm_budget=args.confirm_budget,
        malloc=args.malloc,
    )
    return run_ab(options)


def add_commands(sub: argparse._SubParsersAction) -> None:
    from optbench.ab.allocator import MODES
    from optbench.ab.options import AbOptions  # its defaults are the options' (no torch)

    parser = sub.add_parser(
        "ab",
        help="A/B gate: run base ref and working tree interleaved, case by case, on this machine "
        "(exit 1 on a regression): optbench ab --base REF -- bench/ --profile gate",
    )
    parser.add_argument(
        "--base", required=True, metavar="REF", help="the commit to compare with (e.g. origin/main)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=AbOptions.rounds,
        help=f"sessions' passes over every case on each side (default {AbOptions.rounds}; more for a base whose optbench "
        "cannot slice its timing)",
    )
    parser.add_argument(
        "--slices",
        type=int,
        default=AbOptions.slices,
        help="alternate base and head this many times within each case's timing "
        f"(default {AbOptions.slices}; 1: whole cases)",
    )
    parser.add_argument(
        "--slice-rounds",
        type=int,
        default=AbOptions.slice_rounds,
        help=f"time at least this many rounds per slice, or fewer where fewer cover 0.1 s (default "
        f"{AbOptions.slice_rounds}: a fast case is timed at least {AbOptions.slices * AbOptions.slice_rounds} "
        "rounds, a 150 ms training step one a slice)",
    )
    parser.add_argument("--out", metavar="DIR", help="output folder (default: results/ab/<time>)")
    parser.add_argument(
        "--config", help="pyproject.toml with [tool.optbench.gate] (default: ./pyproject.toml)"
    )
    parser.add_argument("--markdown", metavar="FILE", help="also write the Markdown summary here")
    parser.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON here")
    parser.add_argument(
        "--confirm-budget",
        type=float,
        default=AbOptions.confirm_budget,
        metavar="S",
        help="seconds for measuring flagged latency regressions (then cases significant before correction "
        f"only) again in fresh sessions (default {AbOptions.confirm_budget:g}; 0: regressions fail "
        "without confirming)",
    )
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=AbOptions.step_timeout,
        metavar="S",
        help=f"seconds one case may take (default {AbOptions.step_timeout:g})",
    )
    parser.add_argument(
        "--malloc",
        choices=MODES,
        default=AbOptions.malloc,
        help="the allocator both sessions start with: fixed (glibc malloc's mmap and trim thresholds at "
        "1 GiB, 32 MiB before glibc 2.35, so no session settles into a slow regime of its own; the "
        "default) or inherit (as this process has it: glibc's adaptive thresholds unless set). "
        "Thresholds already in the environment and a preloaded allocator are kept either way",
    )
    parser.add_argument(
        "pytest_args", nargs="*", help="after --: pytest arguments for both sides (default: bench/)"
    )
    parser.set_defaults(func=ab)
