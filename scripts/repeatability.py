"""Do optbench's verdicts repeat? Runs a matrix twice, back to back, and a technique that changes
nothing many times; prints the figures, asserts nothing. A timing job: run nothing else beside it.

    python scripts/repeatability.py --noop 40 -- bench/test_inference.py --profile smoke --devices cpu

For each case: the speedup and its interval in both runs, the three-way verdict (faster: the interval
lies above 1.03; slower: below 1/1.03; no clear difference: it reaches within 3% of 1, as
optbench.results.derive.speed_verdict) in both, and whether the second
run's speedup lies inside the first run's interval; in the totals also how often the two intervals
overlap and how often the second speedup lies inside the first run's prediction interval for a
repeat (see _in_prediction_interval). Per model: whether the recommended technique is the same in
both runs. Then the no-op technique (eager with nothing changed) timed --noop times: how
often it came out clearly faster or slower than eager, which should be at most about 5%.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOOP = '''
from optbench import Technique, register_technique


@register_technique
class Noop(Technique):
    """A technique that changes nothing: eager timed as a case (scripts/repeatability.py)."""

    name = "test_noop"
    family = "layout"
    api = "none"

    def apply(self, prepared, ctx):
        return prepared.then(self.api)
'''


def run(args: list[str], out: Path, run_id: str, cache: Path) -> tuple[float, Path]:
    import os

    command = [sys.executable, "-m", "pytest", *args, "--results-dir", str(out), "--run-id", run_id, "-q",
               "-p", "no:cacheprovider"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OPTBENCH_CACHE": str(cache)})  # fmt: skip
    if done.returncode not in (0, 1):
        sys.exit(
            f"repeatability: pytest exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return time.perf_counter() - started, out / "runs" / run_id


def verdict(low: float, high: float) -> str:
    from optbench.results.derive import speed_verdict  # the product's own verdict, margin included

    return speed_verdict(low, high)


def _in_prediction_interval(first, speedup: float) -> bool:
    """Whether `speedup` lies in the first run's 95% interval widened by sqrt(2) on each side, in log
    space: where a second, independent estimate of the same ratio with the same error falls 95% of
    the time. A second estimate falls inside the first's 95% confidence interval itself only about 83%
    of the time even when both intervals are exact (P(|Z1 - Z2| < 1.96) with Z1, Z2 ~ N(0, 1))."""
    point, low, high = (math.log(first[k]) for k in ("speedup", "speedup_ci95_low", "speedup_ci95_high"))
    root2 = math.sqrt(2)
    return point - root2 * (point - low) <= math.log(speedup) <= point + root2 * (high - point)


def compare(first: Path, second: Path) -> None:
    from optbench.report.recommend import CLEAR, recommend
    from optbench.results import load

    a, b = (load(p) for p in (first, second))
    a = a[(a["status"] == "passed") & (a["technique"] != "eager")].set_index("case_id")
    b = b[(b["status"] == "passed") & (b["technique"] != "eager")].set_index("case_id")
    common = [c for c in a.index if c in b.index]
    same = inside = overlap = predicted = 0
    print(f"{'case':55} {'run 1':>24} {'run 2':>24}  verdicts  inside")
    for case in common:
        r1, r2 = a.loc[case], b.loc[case]
        v1 = verdict(r1["speedup_ci95_low"], r1["speedup_ci95_high"])
        v2 = verdict(r2["speedup_ci95_low"], r2["speedup_ci95_high"])
        holds = r1["speedup_ci95_low"] <= r2["speedup"] <= r1["speedup_ci95_high"]
        same += v1 == v2
        inside += bool(holds)
        overlap += bool(
            r1["speedup_ci95_low"] <= r2["speedup_ci95_high"]
            and r2["speedup_ci95_low"] <= r1["speedup_ci95_high"]
        )
        predicted += bool(_in_prediction_interval(r1, r2["speedup"]))
        print(f"{case:55} {r1['speedup']:6.2f}x [{r1['speedup_ci95_low']:5.2f}, {r1['speedup_ci95_high']:5.2f}]"
              f" {r2['speedup']:6.2f}x [{r2['speedup_ci95_low']:5.2f}, {r2['speedup_ci95_high']:5.2f}]"
              f"  {'same' if v1 == v2 else v1 + ' -> ' + v2:9} {'yes' if holds else 'NO'}")  # fmt: skip
    n = len(common)
    print(
        f"\nsame three-way verdict: {same} of {n}; second speedup inside the first interval: {inside} of {n}; "
        f"the two intervals overlap: {overlap} of {n}; second speedup inside the first run's prediction "
        f"interval (its interval widened by sqrt 2 in log space): {predicted} of {n}"
    )
    # One recommendation per model, device, mode and batch: a model's training and inference rows at
    # one batch size are separate answers.
    recs = [
        {(r.model, r.device, r.mode, r.batch_size): r for r in recommend(load(p))} for p in (first, second)
    ]
    for key, r1 in recs[0].items():
        r2 = recs[1].get(key)
        if r2 is None:
            continue
        both_clear = r1.verdict == CLEAR and r2.verdict == CLEAR
        print(f"recommendation {key[0]} {key[1]} {key[2]} bs{key[3]}: {r1.verdict} {r1.technique} / {r2.verdict} "
              f"{r2.technique}" + (" (same)" if r1.technique == r2.technique else " (DIFFERENT)" if both_clear else ""))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="times to run the matrix (compared 1 with 2)")
    parser.add_argument("--noop", type=int, default=0, help="runs of the no-op technique against eager")
    parser.add_argument("--noop-model", default="resnet18")
    parser.add_argument("pytest_args", nargs="*", default=["bench/test_inference.py"])
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="optbench-repeat-"))
    cache = work / "cache"  # one cache: checkpoints and ceilings are measured once, not in each run
    print(f"repeatability: {' '.join(options.pytest_args)}; work folder {work}")
    from optbench.catalog.machine import machine_info

    info = machine_info()
    print(f"machine: {info['cpu']} cpu {info['cpu_id']}, torch capability {info['cpu_capability']}, "
          f"ISA {info['cpu_isa']}, {info['cores']} cores, torch {info['torch']}")  # fmt: skip
    if options.runs >= 2:
        folders = []
        for i in range(options.runs):
            took, folder = run(options.pytest_args, work / "results", f"run-{i + 1}", cache)
            print(f"run {i + 1}: {took:.0f} s")
            folders.append(folder)
        compare(folders[0], folders[1])
    if options.noop:
        plugins = work / "noop"
        plugins.mkdir()
        (plugins / "noop_technique.py").write_text(NOOP)
        counts = {"faster": 0, "slower": 0, "no clear difference": 0, "unknown": 0}
        args = ["bench/test_inference.py", "--models", options.noop_model, "--techniques", "eager,test_noop",
                "--devices", "cpu", "--weights", "random", "--models-dir", str(plugins)]  # fmt: skip
        from optbench.results import load

        for i in range(options.noop):
            _, folder = run(args, work / "results", f"noop-{i + 1}", cache)
            row = load(folder).set_index("technique").loc["test_noop"]
            counts[verdict(row["speedup_ci95_low"], row["speedup_ci95_high"])] += 1
        clear = counts["faster"] + counts["slower"]
        print(f"\nno-op technique, {options.noop} runs of {options.noop_model}: no clear difference "
              f"{counts['no clear difference']}, clearly faster {counts['faster']}, clearly slower "
              f"{counts['slower']}, unknown {counts['unknown']} ({clear / options.noop:.0%} clear)")  # fmt: skip


if __name__ == "__main__":
    main()
