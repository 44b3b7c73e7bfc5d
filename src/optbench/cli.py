"""The `optbench` command. Reading results needs no torch; exit codes: 0 ok, 2 bad input."""

from __future__ import annotations

import argparse
import sys

from optbench.registry import UsageProblem

EXIT_OK = 0
EXIT_USAGE = 2


def _show(args: argparse.Namespace) -> int:
    from optbench.results import load
    from optbench.summary import run_summary

    print(run_summary(load(args.path)))
    return EXIT_OK


def _claims(args: argparse.Namespace) -> int:
    from optbench.claims import claims_markdown
    from optbench.results import load, resolve

    text = claims_markdown(load(args.path))
    print(text, end="")
    target = resolve(args.path).parent / "claims.md"
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:  # a read-only run folder: the table was printed, say why it is not saved
        print(f"optbench: note: could not write {target}: {error.strerror}", file=sys.stderr)
    return EXIT_OK


def _merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from optbench.merge import merge

    written = merge([Path(f) for f in args.shards], Path(args.out))
    print(f"merged {len(args.shards)} shards into {written.parent}")
    return EXIT_OK


def _selfcheck(args: argparse.Namespace) -> int:
    from optbench.selfcheck import main as selfcheck_main

    return selfcheck_main(args.rest)


def _train(args: argparse.Namespace) -> int:
    from optbench.train_cli import main as train_main

    return train_main(args.rest)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Subcommands with their own parsers get their arguments untouched (REMAINDER drops leading options).
    passthrough = {"selfcheck": _selfcheck, "train": _train}
    if argv and argv[0] in passthrough:
        try:
            return passthrough[argv[0]](argparse.Namespace(rest=argv[1:]))
        except (FileNotFoundError, UsageProblem) as error:
            print(f"optbench: error: {error}", file=sys.stderr)
            return EXIT_USAGE
    parser = argparse.ArgumentParser(prog="optbench", description="optbench results and checks")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a run's comparison table (default: results/latest)")
    show.add_argument("path", nargs="?", default="results/latest")
    show.set_defaults(func=_show)
    claims = sub.add_parser(
        "claims",
        help="the founding document's claims tested with a run's rows (default: results/latest); "
        "also written to the run folder as claims.md",
    )
    claims.add_argument("path", nargs="?", default="results/latest")
    claims.set_defaults(func=_claims)
    merging = sub.add_parser(
        "merge",
        help="combine the run folders of a sharded run (pytest bench/ --shard K/N) into one run folder",
    )
    merging.add_argument("shards", nargs="+", metavar="SHARD_DIR")
    merging.add_argument(
        "--out", required=True, metavar="RUN", help="the merged run's folder (must not exist)"
    )
    merging.set_defaults(func=_merge)
    check = sub.add_parser(
        "selfcheck", help="compare optbench's timing with torch.utils.benchmark", add_help=False
    )
    check.add_argument("rest", nargs=argparse.REMAINDER)
    check.set_defaults(func=_selfcheck)
    train = sub.add_parser(
        "train", help="train or load the zoo's checkpoints (see optbench train --help)", add_help=False
    )
    train.add_argument("rest", nargs=argparse.REMAINDER)
    train.set_defaults(func=_train)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, UsageProblem) as error:
        print(f"optbench: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
