"""The `optbench` command: the parser and the dispatch. One module per command group, each adding its
subcommands (`add_commands`): show (show, claims, merge), compare (compare, baseline save), report
(report, publish), ab (ab). Commands that need torch (selfcheck, train) are imported by module name
when run. Reading results needs no torch; exit codes: 0 ok, 1 a regression (compare, ab), 2 bad input."""

from __future__ import annotations

import argparse
import importlib
import sys

from optbench.cli import ab, compare, report, show
from optbench.cli.common import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from optbench.errors import UsageProblem

__all__ = ["EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "TORCH_COMMANDS", "build_parser", "main"]

COMMAND_GROUPS = (show, compare, report, ab)
"""The modules whose subcommands the parser has, in the order `optbench --help` lists them."""

TORCH_COMMANDS = {"selfcheck": "optbench.pytest_plugin.selfcheck", "train": "optbench.catalog.train_command"}
"""Commands that need torch live in their own layer and are imported by name when run, so that every
other command, and the import rules (.importlinter), never load torch."""


def _torch_command(args: argparse.Namespace) -> int:
    return importlib.import_module(TORCH_COMMANDS[args.command]).main(args.rest)


def _add_torch_commands(sub: argparse._SubParsersAction) -> None:
    """Listed in the help; their own parsers read their arguments (see main)."""
    helps = {
        "selfcheck": "compare optbench's timing with torch.utils.benchmark",
        "train": "train or load the zoo's checkpoints (see optbench train --help)",
    }
    for name in TORCH_COMMANDS:
        command = sub.add_parser(name, help=helps[name], add_help=False)
        command.add_argument("rest", nargs=argparse.REMAINDER)
        command.set_defaults(func=_torch_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="optbench", description="optbench results and checks")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    _add_torch_commands(sub)
    return parser


def _usage_error(message: object) -> int:
    print(f"optbench: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Subcommands with their own parsers get their arguments untouched (REMAINDER drops leading options).
    if argv and argv[0] in TORCH_COMMANDS:
        try:
            return _torch_command(argparse.Namespace(command=argv[0], rest=argv[1:]))
        except (FileNotFoundError, UsageProblem) as error:
            return _usage_error(error)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, UsageProblem) as error:
        return _usage_error(error)
    except OSError as error:  # unreadable input or an unwritable output: bad input, not a regression
        where = f": {error.filename}" if error.filename else ""
        return _usage_error(f"{error.strerror or error}{where}")


if __name__ == "__main__":
    sys.exit(main())
