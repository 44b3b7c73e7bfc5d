"""How good is the gate? False alarms on identical code (A/A) and detection of injected slowdowns and
accuracy drops, all through `optbench ab` (A/B mode), on this machine. Prints the figures; asserts
nothing.

In a scratch clone of this repository's HEAD it commits tests/gate_quality/gate_injected.py as a
technique (eager plus a change read from techniques/gate_injection.json, zero in the commit), then
for each trial edits that JSON in the working tree and runs `optbench ab --base HEAD`, so base and
head differ only by the injected change:

    python scripts/gate_quality.py --aa 10 --slowdowns 0.05,0.10,0.25 --trials 5 --accuracy 3 \\
        -- bench/test_inference.py --profile smoke --models resnet18 --devices cpu
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

ROOT = Path(__file__).resolve().parents[1]
INJECTED = ROOT / "tests" / "gate_quality" / "gate_injected.py"
CASE_TECHNIQUE = "gate_injected"


def _git(args: list[str], cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def scratch_clone(work: Path) -> Path:
    repo = work / "repo"
    _git(["clone", "--quiet", "--local", str(ROOT), str(repo)], work)
    (repo / "techniques").mkdir(exist_ok=True)
    shutil.copyfile(INJECTED, repo / "techniques" / INJECTED.name)
    (repo / "techniques" / "gate_injection.json").write_text(json.dumps({"slowdown": 0, "flip_every": 0}))
    _git(["add", "techniques"], repo)
    _git(["-c", "user.name=gate-quality", "-c", "user.email=gq@localhost", "commit", "-qm", "base"], repo)
    return repo


def isolated_env(repo: Path, work: Path, cache: Path) -> dict[str, str]:
    """An environment whose Python imports optbench from the scratch clone (an editable install in a
    scratch folder, put first by a sitecustomize: the same means `optbench ab` uses for its base),
    so the clone's zoo is the zoo and head runs the clone's code."""
    from optbench.gate.ab import _base_imports

    (work / "head-install").mkdir(exist_ok=True)
    os.chdir(ROOT)  # _base_imports installs only when optbench comes from the current repository
    entries, note = _base_imports(repo, work / "head-install", dict(os.environ))
    print(f"scratch clone {repo}, isolated install ({note})")
    path = os.pathsep.join([*entries, *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])
    return {**os.environ, "OPTBENCH_CACHE": str(cache), "PYTHONPATH": path}


def trial(repo: Path, out: Path, settings: dict, rounds: int, pytest_args: list[str], env: dict) -> dict:
    (repo / "techniques" / "gate_injection.json").write_text(json.dumps(settings))
    command = [sys.executable, "-m", "optbench.cli", "ab", "--base", "HEAD", "--rounds", str(rounds)]
    command += ["--out", str(out), "--", *pytest_args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    result = {"settings": settings, "exit": done.returncode, "wall_s": wall, "flagged": [], "error": ""}
    gate = out / "gate.json"
    if done.returncode not in (0, 1) or not gate.exists():
        result["error"] = (done.stderr.strip().splitlines() or ["?"])[-1]
        return result
    verdicts = json.loads(gate.read_text())["verdicts"]
    result["flagged"] = sorted(
        {
            f"{v['case_id']}:{v['metric']}"
            for v in verdicts
            if v["verdict"] == "regressed" and not v.get("ignored")
        }
    )
    result["injected_caught"] = any(CASE_TECHNIQUE in f for f in result["flagged"])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=10, help="A/A runs (identical code)")
    parser.add_argument("--slowdowns", default="0.05,0.10,0.25", help="injected slowdowns, fractions")
    parser.add_argument("--trials", type=int, default=5, help="runs per slowdown")
    parser.add_argument("--accuracy", type=int, default=3, help="runs with a 1-point top-1 drop")
    parser.add_argument("--rounds", type=int, default=3, help="optbench ab --rounds")
    parser.add_argument("--keep", metavar="DIR", help="keep every run's folder and a trials.json here")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    pytest_args = args.pytest_args or [
        "bench/test_inference.py", "--profile", "smoke", "--models", "resnet18", "--devices", "cpu",
    ]  # fmt: skip
    pytest_args = [*pytest_args, "--techniques", f"eager,channels_last,{CASE_TECHNIQUE}"]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="optbench-gate-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    repo, cache = scratch_clone(work), work / "cache"
    env = isolated_env(repo, work, cache)
    plan = [("A/A", {"slowdown": 0, "flip_every": 0})] * args.aa
    for size in (float(s) for s in args.slowdowns.split(",") if s):
        plan += [(f"slowdown {size:.0%}", {"slowdown": size, "flip_every": 0})] * args.trials
    plan += [("top-1 -1 pt", {"slowdown": 0, "flip_every": 100})] * args.accuracy
    # Train the weights into the cache once, outside the measured trials (an eager-only run).
    warm = [a for a in pytest_args if a != "--techniques" and not a.startswith("eager,")]
    subprocess.run(
        [sys.executable, "-m", "pytest", *warm, "--techniques", "eager", "--results-dir", str(work / "warm")],
        cwd=repo,
        capture_output=True,
        env=env,
    )
    trials = []
    for number, (kind, settings) in enumerate(plan):
        result = trial(repo, work / "runs" / f"{number:03d}", settings, args.rounds, pytest_args, env)
        result["kind"] = kind
        trials.append(result)
        flagged = ", ".join(result["flagged"]) or "-"
        print(
            f"{number:3d} {kind:14s} exit {result['exit']} {result['wall_s']:6.0f} s  flagged: {flagged} {result['error']}",
            flush=True,
        )
    (work / "trials.json").write_text(json.dumps(trials, indent=2))
    print()
    valid = [t for t in trials if not t["error"]]
    aa = [t for t in valid if t["kind"] == "A/A"]
    if aa:
        alarms = sum(t["exit"] == 1 for t in aa)
        print(
            f"A/A: {alarms} failing runs of {len(aa)} ({alarms / len(aa):.0%} false-alarm rate per suite run)"
        )
    for kind in dict.fromkeys(t["kind"] for t in valid if t["kind"] != "A/A"):
        runs = [t for t in valid if t["kind"] == kind]
        caught = sum(bool(t.get("injected_caught")) and t["exit"] == 1 for t in runs)
        print(f"{kind}: detected in {caught} of {len(runs)} runs ({caught / len(runs):.0%})")
    walls = [t["wall_s"] for t in valid]
    if walls:
        print(f"optbench ab wall time per run: median {statistics.median(walls):.0f} s")
    errors = [t for t in trials if t["error"]]
    if errors:
        print(f"{len(errors)} runs ended without verdicts (not counted): {errors[0]['error']}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
