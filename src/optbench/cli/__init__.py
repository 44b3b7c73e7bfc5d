"""The `optbench` command. Reading results needs no torch; exit codes: 0 ok, 1 a regression (compare), 2 bad input."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from optbench.errors import UsageProblem

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2


def _show(args: argparse.Namespace) -> int:
    from optbench.report.summary import run_summary
    from optbench.results import load

    print(run_summary(load(args.path)))
    return EXIT_OK


def _claims(args: argparse.Namespace) -> int:
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


def _merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from optbench.report.claims import claims_markdown
    from optbench.results.merge import merge

    def claims(rows: Any, folder: Path) -> None:
        (folder / "claims.md").write_text(claims_markdown(rows), encoding="utf-8")

    written = merge([Path(f) for f in args.shards], Path(args.out), claims)
    print(f"merged {len(args.shards)} shards into {written.parent}")
    return EXIT_OK


def _write(path: str | None, text: str) -> None:
    if path:
        from pathlib import Path

        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as error:
            raise UsageProblem(f"could not write {path}: {error.strerror}") from None


def _compare(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from optbench.gate.config import load_gate_config
    from optbench.gate.exports import bencher_metric_format, github_action_benchmark
    from optbench.gate.render import markdown, verdicts_json
    from optbench.gate.verdicts import asked_for, compare, failed, nothing_gated
    from optbench.results import load
    from optbench.results.manifest import manifest_near

    config = load_gate_config(Path(args.config) if args.config else Path("pyproject.toml"), bool(args.config))
    base, head = load(args.baseline), load(args.candidate)
    asked = asked_for(manifest_near(args.baseline), manifest_near(args.candidate))
    verdicts = compare(base, head, config, asked)
    empty = nothing_gated(verdicts)
    if empty:
        raise UsageProblem(empty)
    text = markdown(verdicts, base, head)
    print(text, end="")
    _write(args.markdown, text)
    _write(args.json, verdicts_json(verdicts))
    _write(args.bencher, json.dumps(bencher_metric_format(head), indent=2) + "\n")
    _write(args.smaller_is_better, json.dumps(github_action_benchmark(head), indent=2) + "\n")
    _write(
        args.bigger_is_better,
        json.dumps(github_action_benchmark(head, bigger_is_better=True), indent=2) + "\n",
    )
    return EXIT_REGRESSION if failed(verdicts) else EXIT_OK


def _baseline_save(args: argparse.Namespace) -> int:
    import shutil
    from pathlib import Path

    from optbench.results import load, resolve
    from optbench.results.manifest import MANIFEST, Manifest

    source = resolve(args.run).parent
    if not all(c.isalnum() or c in "._-" for c in args.name) or args.name.startswith("."):
        raise UsageProblem(f"--name {args.name!r} may hold only letters, digits, '.', '_' and '-'")
    # Read it all before touching the old baseline: a truncated, corrupt or empty run replaces nothing.
    tables = [load(source / n) for n in ("results.jsonl", "results.csv") if (source / n).exists()]
    if any(rows.empty for rows in tables):
        raise UsageProblem(f"{source} holds no rows: nothing to save as a baseline")
    if (source / MANIFEST).exists():
        Manifest.read(source)
    target = Path(args.dir) / args.name
    tmp = target.with_name(f".{args.name}.saving")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("results.jsonl", "results.csv", "run.json", "claims.md"):
        if (source / name).exists():
            shutil.copy2(source / name, tmp / name)
    if target.exists():
        shutil.rmtree(target)  # refreshing a baseline replaces it; git keeps the old one
    tmp.rename(target)
    print(f"baseline {args.name!r} saved to {target} from {source}")
    return EXIT_OK


def _limits(args: argparse.Namespace):  # -> Limits; the report package is imported only when used
    from optbench.report.recommend import Limits

    floor = args.accuracy_floor
    if floor is not None and not 0 < floor <= 1:
        raise UsageProblem(f"--accuracy-floor is a fraction of fp32's top-1 in (0, 1], got {floor}")
    for name in ("max_size_mb", "max_memory_mb"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageProblem(f"--{name.replace('_', '-')} must be positive, got {value}")
    return Limits(floor, args.max_size_mb, args.max_memory_mb)


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from optbench.report.build import write_report
    from optbench.results import resolve

    if args.out:
        out = Path(args.out)
    elif len(args.runs) == 1:
        out = resolve(args.runs[0]).parent  # one run: its report lives beside its results
    else:
        out = Path("results/report")
    markdown, page = write_report(args.runs, out, _limits(args))
    print(f"wrote {markdown} and {page}")
    return EXIT_OK


def _publish(args: argparse.Namespace) -> int:
    from pathlib import Path

    from optbench.report.publish import publish

    readme = None if args.no_readme else Path(args.readme)
    written = publish(args.run, Path(args.dir), readme, _limits(args))
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


def _ab(args: argparse.Namespace) -> int:
    from pathlib import Path

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
    )
    return run_ab(options)


def _add_ab(sub: argparse._SubParsersAction) -> None:
    ab = sub.add_parser(
        "ab",
        help="A/B gate: run base ref and working tree interleaved, case by case, on this machine "
        "(exit 1 on a regression): optbench ab --base REF -- bench/ --profile smoke",
    )
    ab.add_argument(
        "--base", required=True, metavar="REF", help="the commit to compare with (e.g. origin/main)"
    )
    ab.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="sessions' passes over every case on each side (default 1; more for a base whose optbench "
        "cannot slice its timing)",
    )
    ab.add_argument(
        "--slices",
        type=int,
        default=16,
        help="alternate base and head this many times within each case's timing (default 16; 1: whole cases)",
    )
    ab.add_argument(
        "--slice-rounds",
        type=int,
        default=3,
        help="time at least this many rounds per slice (default 3: a case is timed at least 48 rounds)",
    )
    ab.add_argument("--out", metavar="DIR", help="output folder (default: results/ab/<time>)")
    ab.add_argument("--config", help="pyproject.toml with [tool.optbench.gate] (default: ./pyproject.toml)")
    ab.add_argument("--markdown", metavar="FILE", help="also write the Markdown summary here")
    ab.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON here")
    ab.add_argument(
        "--confirm-budget",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds for measuring flagged latency regressions again in fresh sessions before they fail "
        "(default 600; 0: fail without confirming)",
    )
    ab.add_argument(
        "--step-timeout",
        type=float,
        default=1800.0,
        metavar="S",
        help="seconds one case may take (default 1800)",
    )
    ab.add_argument(
        "pytest_args", nargs="*", help="after --: pytest arguments for both sides (default: bench/)"
    )
    ab.set_defaults(func=_ab)


TORCH_COMMANDS = {"selfcheck": "optbench.pytest_plugin.selfcheck", "train": "optbench.catalog.train_command"}
"""Commands that need torch live in their own layer and are imported by name when run, so that every
other command, and the import rules (.importlinter), never load torch."""


def _torch_command(args: argparse.Namespace) -> int:
    import importlib

    return importlib.import_module(TORCH_COMMANDS[args.command]).main(args.rest)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Subcommands with their own parsers get their arguments untouched (REMAINDER drops leading options).
    if argv and argv[0] in TORCH_COMMANDS:
        try:
            return _torch_command(argparse.Namespace(command=argv[0], rest=argv[1:]))
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
    comparing = sub.add_parser(
        "compare",
        help="gate a candidate run against a baseline (exit 1 on a regression): Markdown summary, "
        "JSON verdicts and dashboard exports",
    )
    comparing.add_argument("baseline", help="a baseline (results/baselines/NAME) or a run folder")
    comparing.add_argument("candidate", help="the run to judge (a run folder or results file)")
    comparing.add_argument(
        "--config", help="pyproject.toml with [tool.optbench.gate] (default: ./pyproject.toml)"
    )
    comparing.add_argument("--markdown", metavar="FILE", help="also write the Markdown summary here")
    comparing.add_argument("--json", metavar="FILE", help="write the verdicts as JSON")
    comparing.add_argument("--bencher", metavar="FILE", help="write the candidate in Bencher Metric Format")
    comparing.add_argument(
        "--smaller-is-better", metavar="FILE", help="github-action-benchmark customSmallerIsBetter (latency)"
    )
    comparing.add_argument(
        "--bigger-is-better", metavar="FILE", help="github-action-benchmark customBiggerIsBetter (speedup)"
    )
    comparing.set_defaults(func=_compare)
    baseline = sub.add_parser(
        "baseline", help="save a run as a baseline to commit: optbench baseline save [RUN]"
    )
    baseline_sub = baseline.add_subparsers(dest="action", required=True)
    save = baseline_sub.add_parser("save", help="copy a run's results into results/baselines/NAME")
    save.add_argument("run", nargs="?", default="results/latest")
    save.add_argument("--name", default="default")
    save.add_argument("--dir", default="results/baselines")
    save.set_defaults(func=_baseline_save)
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
    reporting.set_defaults(func=_report)
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
    publishing.set_defaults(func=_publish)
    _add_ab(sub)
    check = sub.add_parser(
        "selfcheck", help="compare optbench's timing with torch.utils.benchmark", add_help=False
    )
    check.add_argument("rest", nargs=argparse.REMAINDER)
    check.set_defaults(func=_torch_command)
    train = sub.add_parser(
        "train", help="train or load the zoo's checkpoints (see optbench train --help)", add_help=False
    )
    train.add_argument("rest", nargs=argparse.REMAINDER)
    train.set_defaults(func=_torch_command)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, UsageProblem) as error:
        print(f"optbench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # unreadable input or an unwritable output: bad input, not a regression
        where = f": {error.filename}" if error.filename else ""
        print(f"optbench: error: {error.strerror or error}{where}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
