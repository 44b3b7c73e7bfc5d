"""`optbench compare` and `optbench baseline save`: gate a candidate run against a baseline, and save a
run as the baseline to commit. Exit 1 on a regression. No torch."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from optbench.cli.common import EXIT_OK, EXIT_REGRESSION, write_output
from optbench.errors import UsageProblem


def compare(args: argparse.Namespace) -> int:
    from optbench.gate.config import load_gate_config
    from optbench.gate.exports import bencher_metric_format, github_action_benchmark
    from optbench.gate.render import markdown, timing_differences, verdicts_json
    from optbench.gate.verdicts import asked_for, failed, nothing_gated
    from optbench.gate.verdicts import compare as judge
    from optbench.results import load, refuse_impossible
    from optbench.results.manifest import manifest_near

    config = load_gate_config(Path(args.config) if args.config else Path("pyproject.toml"), bool(args.config))
    base = refuse_impossible(load(args.baseline), args.baseline)
    head = refuse_impossible(load(args.candidate), args.candidate)
    manifests = manifest_near(args.baseline), manifest_near(args.candidate)
    asked = asked_for(*manifests)
    verdicts = judge(base, head, config, asked)
    empty = nothing_gated(verdicts)
    if empty:
        raise UsageProblem(empty)
    text = markdown(verdicts, base, head, timing_differences(*manifests))
    print(text, end="")
    write_output(args.markdown, text)
    write_output(args.json, verdicts_json(verdicts))
    write_output(args.bencher, json.dumps(bencher_metric_format(head), indent=2) + "\n")
    write_output(args.smaller_is_better, json.dumps(github_action_benchmark(head), indent=2) + "\n")
    write_output(
        args.bigger_is_better,
        json.dumps(github_action_benchmark(head, bigger_is_better=True), indent=2) + "\n",
    )
    return EXIT_REGRESSION if failed(verdicts) else EXIT_OK


def baseline_save(args: argparse.Namespace) -> int:
    from optbench.results import load, resolve
    from optbench.results.manifest import MANIFEST, Manifest

    source = resolve(args.run).parent
    if len(args.name.encode()) > 200:  # it names a folder: file systems allow 255 bytes a name
        raise UsageProblem(f"--name is {len(args.name.encode())} bytes long; it names a folder: at most 200")
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
    for name in ("results.jsonl", "results.csv", MANIFEST, "claims.md"):
        if (source / name).exists():
            shutil.copy2(source / name, tmp / name)
    if target.exists():
        shutil.rmtree(target)  # refreshing a baseline replaces it; git keeps the old one
    tmp.rename(target)
    print(f"baseline {args.name!r} saved to {target} from {source}")
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction) -> None:
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
    comparing.set_defaults(func=compare)
    baseline = sub.add_parser(
        "baseline", help="save a run as a baseline to commit: optbench baseline save [RUN]"
    )
    baseline_sub = baseline.add_subparsers(dest="action", required=True)
    save = baseline_sub.add_parser("save", help="copy a run's results into results/baselines/NAME")
    save.add_argument("run", nargs="?", default="results/latest")
    save.add_argument("--name", default="default")
    save.add_argument("--dir", default="results/baselines")
    save.set_defaults(func=baseline_save)
