"""`optbench report` and `optbench publish`: Markdown and a self-contained HTML report from run
folders, and the committed report with the README's block refreshed. No torch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from optbench.cli.common import EXIT_OK
from optbench.errors import UsageProblem


def limits(args: argparse.Namespace) -> Any:  # -> Limits; the report package is imported only when used
    """The deployment limits of --accuracy-floor, --max-size-mb and --max-memory-mb, checked."""
    from optbench.report.recommend import Limits

    floor = args.accuracy_floor
    if floor is not None and not 0 < floor <= 1:
        raise UsageProblem(f"--accuracy-floor is a fraction of fp32's top-1 in (0, 1], got {floor}")
    for name in ("max_size_mb", "max_memory_mb"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageProblem(f"--{name.replace('_', '-')} must be positive, got {value}")
    return Limits(floor, args.max_size_mb, args.max_memory_mb)


def report(args: argparse.Namespace) -> int:
    from optbench.report.build import write_report
    from optbench.results import resolve

    if args.out:
        out = Path(args.out)
    elif len(args.runs) == 1:
        out = resolve(args.runs[0]).parent  # one run: its report lives beside its results
    else:
        out = Path("results/report")
    markdown, page = write_report(args.runs, out, limits(args))
    print(f"wrote {markdown} and {page}")
    return EXIT_OK


def publish(args: argparse.Namespace) -> int:
    from optbench.report.publish import publish as publish_run

    readme = None if args.no_readme else Path(args.readme)
    written = publish_run(args.run, Path(args.dir), readme, limits(args))
    print("published: " + ", ".join(str(p) for p in written))
    return EXIT_OK


def _limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--accuracy-floor",
        type=float,
        metavar="F",
        help="recommend only techniques whose top-1 is at least F of fp32's (default: each row's own "
        "floor, 0.99 unless the run set another)",
    )
    parser.add_argument(
        "--max-size-mb",
        type=float,
        metavar="MIB",
        help="recommend only models whose file is at most this (zlib-compressed)",
    )
    parser.add_argument(
        "--max-memory-mb",
        type=float,
        metavar="MIB",
        help="recommend only cases whose peak memory is at most this",
    )


def add_commands(sub: argparse._SubParsersAction) -> None:
    reporting = sub.add_parser(
        "report",
        help="Markdown and a self-contained HTML report (plots, recommendation per model and device, "
        "comparison across runs) from one or more run folders",
    )
    reporting.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folders (results/latest, results/runs/ID)"
    )
    reporting.add_argument(
        "--out",
        metavar="DIR",
        help="where report.md and report.html go (default: the run's folder; several runs: results/report)",
    )
    _limit_options(reporting)
    reporting.set_defaults(func=report)
    publishing = sub.add_parser(
        "publish", help="refresh results/published/ and the README's published block from a run"
    )
    publishing.add_argument("run", nargs="?", default="results/latest")
    publishing.add_argument("--dir", default="results/published", help="the committed report's folder")
    publishing.add_argument(
        "--readme", default="README.md", help="the README whose published block is refreshed"
    )
    publishing.add_argument("--no-readme", action="store_true", help="leave the README alone")
    _limit_options(publishing)
    publishing.set_defaults(func=publish)
