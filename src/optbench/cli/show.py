"""`optbench show`, `optbench claims` and `optbench merge`: a run's table, its claims, and the shards of
a sharded run made one run. No torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from optbench.cli.common import EXIT_OK


def show(args: argparse.Namespace) -> int:
    from optbench.report.summary import run_summary
    from optbench.results import load

    print(run_summary(load(args.path)))
    return EXIT_OK


def claims(args: argparse.Namespace) -> int:
    from optbench.report.claims import claims_markdown
    from optbench.results import load, resolve

    text = claims_markdown(load(args.path))
    print(text, end="")
    target = resolve(args.path).parent / "claims.md"
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:  # a read-only run folder: the table was printed, say why it is not saved
        print(f"optbench: note: could not write {target}: {error.strerror}", file=sys.stderr)
    return EXIT_OK


def merge(args: argparse.Namespace) -> int:
    from optbench.report.claims import claims_markdown
    from optbench.results.merge import merge as merge_shards

    def write_claims(rows: Any, folder: Path) -> None:
        (folder / "claims.md").write_text(claims_markdown(rows), encoding="utf-8")

    written = merge_shards([Path(f) for f in args.shards], Path(args.out), write_claims)
    print(f"merged {len(args.shards)} shards into {written.parent}")
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction) -> None:
    showing = sub.add_parser("show", help="print a run's comparison table (default: results/latest)")
    showing.add_argument("path", nargs="?", default="results/latest")
    showing.set_defaults(func=show)
    claiming = sub.add_parser(
        "claims",
        help="the founding document's claims tested with a run's rows (default: results/latest); "
        "also written to the run folder as claims.md",
    )
    claiming.add_argument("path", nargs="?", default="results/latest")
    claiming.set_defaults(func=claims)
    merging = sub.add_parser(
        "merge",
        help="combine the run folders of a sharded run (pytest bench/ --shard K/N) into one run folder",
    )
    merging.add_argument("shards", nargs="+", metavar="SHARD_DIR")
    merging.add_argument(
        "--out", required=True, metavar="RUN", help="the merged run's folder (must not exist)"
    )
    merging.set_defaults(func=merge)
