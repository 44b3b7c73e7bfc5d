"""How good is the gate? False alarms on identical code (A/A) and detection of injected slowdowns and
accuracy drops, all through `optbench ab` (A/B mode), on this machine. Prints the figures; asserts
nothing.

In a scratch clone of this repository's HEAD it commits tests/gate_quality/gate_injected.py as a
technique (eager plus a change read from techniques/gate_injection.json, zero in the commit), then
for each trial edits that JSON in the working tree and runs `optbench ab --base HEAD`, so base and
head differ only by the injected change:

    python scripts/gate_quality.py --aa 20 --slowdowns 0.05:10,0.10:20,0.25:8 --accuracy 4 \\
        -- bench/ --profile gate --devices cpu

The pytest arguments default to the gated selection (the gate profile, on the CPU), to which the
injected technique is added. `--injected-only` times only the injected cases and the inference
eager cases in the injected runs (A/A runs always time the whole selection). `--training` injects
the slowdowns into the gated training cases too, calibrated on training steps (injected runs only).
`--ledger FILE` appends every trial, with the commit, the gate's rule and the CPU, to a ledger that
scripts/gate_quality_tally.py pools over sittings (results/gate-quality/ledger.jsonl is the project's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gate_quality_tally as tally

from optbench.ab.worktree import MEMO_TREE_ENV

ROOT = Path(__file__).resolve().parents[1]
INJECTED = ROOT / "tests" / "gate_quality" / "gate_injected.py"
CASE_TECHNIQUE = tally.CASE_TECHNIQUE
INJECTED_ONLY = f"{CASE_TECHNIQUE} or (eager and not training and not data)"
"""--injected-only's pytest -k: the injected cases and the eager inference cases beside them."""
INJECTED_ONLY_TRAINING = f"{CASE_TECHNIQUE} or (eager and not data)"
"""... with --training: the injected training cases and the eager training cases too."""


def _git(args: list[str], cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def scratch_clone(work: Path, extra: dict | None = None) -> Path:
    """A clone of HEAD with the injected technique committed, at zero plus `extra` (the settings
    every trial shares, such as joining the training cases: in base and head alike)."""
    repo = work / "repo"
    _git(["clone", "--quiet", "--local", str(ROOT), str(repo)], work)
    (repo / "techniques").mkdir(exist_ok=True)
    shutil.copyfile(INJECTED, repo / "techniques" / INJECTED.name)
    zero = {"slowdown": 0, "flip_every": 0, **(extra or {})}
    (repo / "techniques" / "gate_injection.json").write_text(json.dumps(zero))
    _git(["add", "techniques"], repo)
    _git(["-c", "user.name=gate-quality", "-c", "user.email=gq@localhost", "commit", "-qm", "base"], repo)
    return repo


def isolated_python(repo: Path, work: Path) -> str:
    """A Python that imports optbench from the scratch clone (so the clone's zoo is the zoo and head
    runs the clone's code) and everything else from this interpreter's environment: a venv whose
    site-packages point at ours by a .pth line (ours' own .pth files, this checkout's editable
    optbench among them, are not processed there; pip and setuptools come from ours too), plus the
    clone installed editable."""
    import site
    import sysconfig

    venv = work / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    ours = [p for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"]) if Path(p).is_dir()]
    (Path(purelib) / "optbench_gate_quality.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", str(repo)],
        check=True, capture_output=True,
    )  # fmt: skip
    found = subprocess.run(
        [python, "-c", "import optbench; print(optbench.__file__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"scratch clone {repo}: optbench from {found}")
    return python


def _injected(out: Path) -> tuple[float | None, float | None]:
    """The slowdown the injection reached when it was calibrated (head's row), and the median paired
    ratio the gate measured for that case."""
    reached = paired = None
    results = out / "head" / "results.jsonl"
    for line in results.read_text().splitlines() if results.exists() else []:
        row = json.loads(line)
        if row.get("technique") == CASE_TECHNIQUE and row.get("technique_notes"):
            reached = json.loads(row["technique_notes"]).get("injected_ratio")
            ratios = json.loads((out / "gate.json").read_text())["ab"]["paired_ratios"].get(row["case_id"])
            paired = statistics.median(ratios) if ratios else None
    return reached, paired


def own_techniques(pytest_args: list[str]) -> bool:
    """Whether the selection's profile names its own techniques (the gate's): the injected technique
    then joins its inference cases (gate_injected.py), so exactly the gated cases are timed, with the
    injected case beside them. Otherwise the script names eager, channels_last and the injected one."""
    from optbench.matrix.profiles import PROFILES

    named = pytest_args[pytest_args.index("--profile") + 1] if "--profile" in pytest_args else "default"
    return named in PROFILES and PROFILES[named].techniques is not None


def trial(
    repo: Path,
    out: Path,
    settings: dict,
    rounds: int,
    slices: int,
    pytest_args: list[str],
    python: str,
    env: dict,
) -> dict:
    (repo / "techniques" / "gate_injection.json").write_text(json.dumps(settings))
    command = [python, "-m", "optbench.cli", "ab", "--base", "HEAD", "--rounds", str(rounds)]
    command += ["--slices", str(slices)]
    command += ["--out", str(out), "--", *pytest_args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env)
    if out.is_dir():
        (out / "ab.stderr").write_text(done.stderr)
    wall = time.perf_counter() - start
    result = {"settings": settings, "exit": done.returncode, "wall_s": wall, "flagged": [], "error": ""}
    gate = out / "gate.json"
    if done.returncode not in (0, 1) or not gate.exists():
        result["error"] = (done.stderr.strip().splitlines() or ["?"])[-1]
        return result
    result.update(tally.outcome(json.loads(gate.read_text())))
    result["injected_ratio"], result["paired_median"] = _injected(out)
    return result


def redecide(kept: Path) -> int:
    """Judge a kept measurement's recorded first-pass pairs (and, where one ran, the confirmation's)
    again with this checkout's rule (optbench/gate/paired.py), and print what changes: a new decision
    rule checked on the same data. A case that now needs a confirmation the recorded run did not
    measure is counted apart: its outcome is unknown."""
    from optbench.ab import confirmation as ab_confirm
    from optbench.gate import paired
    from optbench.gate.config import GateConfig
    from optbench.gate.verdicts import REGRESSED, UNCHANGED, Verdict

    config = GateConfig()

    def as_pairs(found: dict[str, list[float]]) -> dict[str, list[paired.Pair]]:
        return {c: [([1.0], [r]) for r in ratios] for c, ratios in found.items()}

    def first_pass(found: dict[str, list[float]]) -> list[Verdict]:
        """The verdicts the first pass sends to the confirmation: regressions and screened cases."""
        verdicts = [Verdict(c, "latency_ms", UNCHANGED) for c in found]
        paired.decide(verdicts, as_pairs(found), config.correction, config.for_case, screen=True)
        return [v for v in verdicts if v.verdict == REGRESSED or v.screened]

    def confirmed_of(
        first: dict[str, list[float]], flagged: list[Verdict], second: dict[str, list[float]]
    ) -> set[str]:
        """The flagged cases the confirmation (as recorded) confirms."""
        cases = [v.case_id for v in flagged if v.case_id in second]
        if cases:
            ab_confirm.judge(flagged, cases, as_pairs(first), as_pairs(second), config)
        return {v.case_id for v in flagged if v.confirmed}

    listed = kept / "trials.json"
    if listed.exists():
        trials = json.loads(listed.read_text())
    else:  # a sitting stopped before it wrote its list: each kept gate.json, its kind unrecorded
        found = sorted((kept / "runs").glob("*/gate.json"))
        if not found:
            print(f"gate_quality: nothing to redecide in {kept} (no trials.json, no runs/*/gate.json)")
            return 2
        trials = [{"error": "", "kind": "unrecorded", "gate": f} for f in found]
    counts_of: dict[str, dict[str, int]] = {}
    for number, t in enumerate(trials):
        gate = t.get("gate") or kept / "runs" / f"{number:03d}" / "gate.json"
        if t["error"] or not gate.exists():
            continue
        data = json.loads(gate.read_text())
        first = data["ab"]["paired_ratios"]
        verdicts = first_pass(first)
        flagged = {v.case_id for v in verdicts}
        record = data["ab"].get("confirmation") or {}
        measured = record.get("paired_ratios") or {}
        confirmed = confirmed_of(first, verdicts, measured)
        unknown = flagged - set(measured)
        other = [v for v in data["verdicts"] if v["metric"] != "latency_ms" and v["verdict"] == REGRESSED]
        caught = any(CASE_TECHNIQUE in c for c in confirmed) or any(
            CASE_TECHNIQUE in v["case_id"] for v in other
        )
        counts = counts_of.setdefault(t["kind"], {"runs": 0, "failing": 0, "caught": 0, "unknown": 0})
        counts["runs"] += 1
        counts["failing"] += bool(confirmed or other)
        counts["caught"] += caught
        counts["unknown"] += bool(unknown) and not caught
        was = "fail" if t.get("exit", int(data["failed"])) == 1 else "pass"
        now = (
            "fail"
            if (confirmed or other)
            else ("unknown (a confirmation not measured)" if unknown else "pass")
        )
        if was != now.split()[0] or unknown:
            print(f"{number:3d} {t['kind']:14s} recorded {was}, now {now}: flagged {sorted(flagged) or '-'}")
    for kind, c in counts_of.items():
        print(
            f"{kind}: {c['runs']} runs, {c['failing']} failing, injected change caught in {c['caught']}, "
            f"{c['unknown']} unknown (flagged now, confirmation not measured)"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=10, help="A/A runs (identical code)")
    parser.add_argument(
        "--slowdowns",
        default="0.05,0.10,0.25",
        help="injected slowdowns, fractions; SIZE:N runs that size N times instead of --trials",
    )
    parser.add_argument("--trials", type=int, default=5, help="runs per slowdown")
    parser.add_argument("--accuracy", type=int, default=3, help="runs with a 1-point top-1 drop")
    parser.add_argument("--rounds", type=int, default=1, help="optbench ab --rounds")
    parser.add_argument("--slices", type=int, default=16, help="optbench ab --slices")
    parser.add_argument("--keep", metavar="DIR", help="keep every run's folder and a trials.json here")
    parser.add_argument(
        "--redecide",
        metavar="KEPT",
        help="measure nothing: judge the pairs recorded in a --keep folder again with this checkout's rule",
    )
    parser.add_argument(
        "--injected-only",
        action="store_true",
        help="injected runs time only the injected cases and the inference eager cases (A/A: all)",
    )
    parser.add_argument(
        "--training",
        action="store_true",
        help="slowdowns are injected into the training cases too (calibrated on training steps); "
        "injected runs only",
    )
    parser.add_argument("--plain-every", type=int, default=1, help="a plain run after every N-th A/A run")
    parser.add_argument("--ledger", metavar="FILE", help="append every trial to this ledger (JSON lines)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    if args.redecide:
        return redecide(Path(args.redecide))
    # What the ledger says these trials ran: the committed HEAD the scratch clone is made from.
    commit, rule_hash = tally.rule() if args.ledger else ("", "")
    pytest_args = args.pytest_args or ["bench/", "--profile", "gate", "--devices", "cpu"]
    if args.training and (args.aa or args.accuracy):
        # Its selection has two more cases than the gated one: A/A runs and the whole selection's
        # correction must come from the gated selection alone.
        print(
            "gate_quality: --training is for injected slowdowns; run --aa and --accuracy without it",
            file=sys.stderr,
        )
        return 2
    if args.injected_only and "-k" in pytest_args:
        print("gate_quality: --injected-only makes its own -k selection; drop -k", file=sys.stderr)
        return 2
    if "--techniques" not in pytest_args and not own_techniques(pytest_args):
        pytest_args = [*pytest_args, "--techniques", f"eager,channels_last,{CASE_TECHNIQUE}"]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="optbench-gate-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    extra = {"training": True} if args.training else {}
    repo, cache = scratch_clone(work, extra), work / "cache"
    only = INJECTED_ONLY_TRAINING if args.training else INJECTED_ONLY
    label = " (training too)" if args.training else ""
    python = isolated_python(repo, work)
    env = {**os.environ, "OPTBENCH_CACHE": str(cache)}
    plan = [("A/A", {"slowdown": 0, "flip_every": 0})] * args.aa
    for item in (s for s in args.slowdowns.split(",") if s):
        size, _, count = item.partition(":")
        runs = int(count) if count else args.trials
        plan += [
            (f"slowdown {float(size):.0%}{label}", {"slowdown": float(size), "flip_every": 0, **extra})
        ] * runs
    plan += [("top-1 -1 pt", {"slowdown": 0, "flip_every": 100})] * args.accuracy
    # Fill the cache once, outside the measured trials: the weights and every preparation of the
    # selection (calibrations, fine-tunes, compiled code). With only the weights warm, the first
    # trial paid for the preparations and the plain run timed after it did not, which overstated
    # the gate's cost (measured: docs/gate.md, "How good the gate is"). Injected runs alone time only
    # their own selection, so only that needs warming.
    warm = [*pytest_args, "-k", only] if args.injected_only and not args.aa else pytest_args
    # Twice: the plain runs' keys, then those `optbench ab`'s sessions reuse, keyed on the code each
    # side runs (optbench.ab.worktree.tree_id): the scratch commit, which base and an A/A head run.
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    for keys in ({}, {MEMO_TREE_ENV: sha}):
        subprocess.run(
            [python, "-m", "pytest", *warm, "--results-dir", str(work / "warm")],
            cwd=repo,
            capture_output=True,
            env={**env, **keys},
        )

    def plain_run() -> float:
        """The plain run of the same selection, timed as the A/B runs are (a fresh process, warm
        caches): the yardstick for the gate's cost."""
        start = time.perf_counter()
        subprocess.run(
            [python, "-m", "pytest", *pytest_args, "--results-dir", str(work / "plain")],
            cwd=repo,
            capture_output=True,
            env=env,
        )
        return time.perf_counter() - start

    context = {"commit": commit, "rule": rule_hash, "cpu": tally.cpu() if args.ledger else {}}
    context["setup"] = tally.setup(args.rounds, args.slices) if args.ledger else {}
    injected_only = ["-k", only]
    trials, aa_runs = [], 0
    for number, (kind, settings) in enumerate(plan):
        fewer = args.injected_only and kind != "A/A"
        selection = [*pytest_args, *injected_only] if fewer else pytest_args
        result = trial(
            repo,
            work / "runs" / f"{number:03d}",
            settings,
            args.rounds,
            args.slices,
            selection,
            python,
            env,
        )
        result["kind"], result["selection"] = kind, "injected-only" if fewer else "full"
        if kind == "A/A":
            aa_runs += 1
            if (aa_runs - 1) % max(1, args.plain_every) == 0:
                # A plain run right after the A/A run: the machine's speed drifts over an hour, so
                # the cost is the median of adjacent ratios, not of two runs at the start.
                result["plain_s"] = plain_run()
        trials.append(result)
        if args.ledger:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            tally.append(Path(args.ledger), result, {**context, "when": when, "pytest_args": selection})
        flagged = ", ".join(result["flagged"]) or "-"
        reached = f" calibrated {result['injected_ratio']:.3f}" if result.get("injected_ratio") else ""
        paired = f" paired {result['paired_median']:.3f}" if result.get("paired_median") else ""
        refuted = ", ".join(result.get("unconfirmed", []))
        refuted = f"  refuted on re-measuring: {refuted}" if refuted else ""
        plain = f" (plain {result['plain_s']:.0f} s)" if "plain_s" in result else ""
        print(
            f"{number:3d} {kind:14s} exit {result['exit']} {result['wall_s']:6.0f} s{plain}{reached}{paired}  "
            f"flagged: {flagged}{refuted} {result['error']}",
            flush=True,
        )
    (work / "trials.json").write_text(json.dumps(trials, indent=2))
    print()
    tally.summarize(trials)
    if args.ledger:
        pooled = tally.pools(tally.read(Path(args.ledger))).get(tally.pool_key(context), [])
        if len(pooled) > len(trials):
            print(
                f"\nPooled with the ledger's earlier trials of rule {rule_hash} on this CPU ({len(pooled)} trials):"
            )
            tally.summarize(pooled)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
