"""The gate-quality ledger and its rates: every trial of scripts/gate_quality.py as one JSON line, with
the commit, the gate's rule and the CPU it ran on, so that counts too long for one sitting (A/A x20,
10% x20, ...) add up over several, and only trials of the same rule, CPU and setup are pooled.

    python scripts/gate_quality_tally.py results/gate-quality/ledger.jsonl

prints the rates of each (rule, CPU, setup) pool of the ledger (pool_key). Measures nothing;
asserts nothing.

The rule is a hash of the committed trees that decide what the gate measures and how it judges
(RULE_PATHS: all of optbench but its report package, the bench/ and models/ folders, the injected
technique, pyproject.toml). A commit that touches only docs or reports keeps the rule, so its trials
pool with the earlier ones; any other change starts a new pool."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE_TECHNIQUE = "gate_injected"
RULE_PATHS = ("bench", "models", "tests/gate_quality", "pyproject.toml")
RULE_EXCLUDED = ("src/optbench/report",)
"""Under src/optbench: every entry but these is part of the rule."""


def _git(args: list[str]) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def rule_paths() -> list[str]:
    entries = _git(["ls-tree", "--name-only", "HEAD", "src/optbench/"]).split()
    return sorted([e for e in entries if e not in RULE_EXCLUDED] + list(RULE_PATHS))


def rule() -> tuple[str, str]:
    """(commit, rule hash) of this checkout's HEAD. Uncommitted changes to the rule's paths are refused:
    the trials run a clone of HEAD, so they would not be what the ledger says."""
    import hashlib

    paths = rule_paths()
    dirty = _git(["status", "--porcelain", "--", *paths]).strip()
    if dirty:
        raise SystemExit(
            f"gate_quality: uncommitted changes to the gate's code ({dirty.splitlines()[0]} ...); commit first"
        )
    trees = _git(["rev-parse", *[f"HEAD:{p}" for p in paths]]).split()
    digest = hashlib.sha1(" ".join(trees).encode()).hexdigest()[:12]
    return _git(["rev-parse", "--short=12", "HEAD"]).strip(), digest


def cpu() -> dict[str, str]:
    """The facts of this machine that decide its kernels and noise (optbench's fingerprint among them)."""
    from optbench.catalog.machine import machine_info

    info = machine_info()
    keys = ("cpu", "cores", "cpu_capability", "cpu_isa", "cpu_id", "cuda_device", "fingerprint")
    return {k: info[k] for k in keys}


def setup(rounds: int, slices: int) -> dict:
    """What else decides the error rates and must match for trials to pool: the A/B design, the
    gate's alpha (this checkout's pyproject.toml) and the library versions that run and judge it."""
    from importlib import metadata

    from optbench.gate.config import load_gate_config

    versions = {p: metadata.version(p) for p in ("torch", "torchvision", "numpy", "scipy")}
    versions["python"] = sys.version.split()[0]
    alpha = load_gate_config(ROOT / "pyproject.toml").thresholds.alpha
    found = {"rounds": rounds, "slices": slices, "alpha": alpha, "versions": versions}
    from optbench.ab.allocator import user_settings

    # Allocator settings reach both sessions through the environment and change their noise: the
    # same filter `optbench ab` reads them with.
    tunables = user_settings(os.environ)
    if tunables:
        found["environment"] = tunables
    return found


def outcome(recorded: dict) -> dict:
    """What one `optbench ab` run's gate.json says, for the ledger: the case tests, what failed the
    gate, and the injected cases' raw one-sided p-values (first measurement and confirmation)."""
    from optbench.gate.paired import signed_rank_p

    verdicts = recorded["verdicts"]
    judged = [v for v in verdicts if v["verdict"] != "not_comparable"]
    regressed = [v for v in verdicts if v["verdict"] == "regressed" and not v.get("ignored")]
    # What fails the gate: regressions not acknowledged and not refuted by a second measurement.
    flagged = sorted({f"{v['case_id']}:{v['metric']}" for v in regressed if v.get("confirmed") is not False})
    confirmation = recorded["ab"].get("confirmation") or {}
    return {
        # The case tests of this run: cases judged on a metric (a verdict other than not comparable).
        "cases_judged": len({v["case_id"] for v in judged}),
        # The latency cases judged on pairs: the family the paired test corrects over.
        "latency_judged": sum(v["metric"] == "latency_ms" for v in judged),
        "flagged": flagged,
        "unconfirmed": sorted(
            {f"{v['case_id']}:{v['metric']}" for v in regressed if v.get("confirmed") is False}
        ),
        # The screen (optbench/gate/paired.py; gate.json's verdicts say "screened" since it exists):
        # cases significant before correction only, measured again, failing only if confirmed.
        "screen": bool(verdicts) and "screened" in verdicts[0],
        "screened": sorted({v["case_id"] for v in verdicts if v.get("screened")}),
        "remeasured": len(confirmation.get("cases") or []),
        "injected_caught": any(CASE_TECHNIQUE in f for f in flagged),
        # Per injected case (one per model): a run can catch one model's and miss another's.
        "injected_cases": sorted({v["case_id"] for v in verdicts if CASE_TECHNIQUE in v["case_id"]}),
        "injected_cases_caught": sorted({f.split(":")[0] for f in flagged if CASE_TECHNIQUE in f}),
        "injected_p": {
            v["case_id"]: v["p_value"]
            for v in verdicts
            if CASE_TECHNIQUE in v["case_id"] and v["metric"] == "latency_ms" and v.get("p_value") is not None
        },
        "injected_confirm_p": {
            c: signed_rank_p(r, "greater")
            for c, r in (confirmation.get("paired_ratios") or {}).items()
            if CASE_TECHNIQUE in c and r
        },
        # The allocator both sessions ran under (optbench ab --malloc; absent before it existed).
        "allocator": recorded["ab"].get("allocator"),
        "rounds": recorded["ab"].get("rounds"),
        "slices": recorded["ab"].get("slices"),
    }


def append(ledger: Path, trial: dict, context: dict) -> None:
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a") as f:
        f.write(json.dumps({**context, **trial}, sort_keys=True) + "\n")


def read(ledger: Path) -> list[dict]:
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def rate(k: int, n: int) -> str:
    """k of n with its exact two-sided 95% Clopper-Pearson interval."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return f"{k} of {n} ({k / n:.0%}, 95% Clopper-Pearson [{ci.low:.1%}, {ci.high:.1%}])"


def summarize(trials: list[dict]) -> None:
    """Print the false-alarm, detection and cost figures of `trials` (one pool)."""
    valid = [t for t in trials if not t["error"]]
    aa = [t for t in valid if t["kind"] == "A/A"]
    if aa:
        alarms = sum(t["exit"] == 1 for t in aa)
        print(f"A/A, runs that failed (false-alarm rate per run of the selection): {rate(alarms, len(aa))}")
        tests = sum(t.get("cases_judged", 0) for t in aa)
        flagged = sum(len({f.split(":")[0] for f in t["flagged"]}) for t in aa)
        if tests:
            print(f"A/A, cases that failed (false-alarm rate per case test): {rate(flagged, tests)}")
    for kind in dict.fromkeys(t["kind"] for t in valid):
        runs = [t for t in valid if t["kind"] == kind]
        refuted = sum(bool(t.get("unconfirmed")) for t in runs)
        others = sum(any(CASE_TECHNIQUE not in f for f in t["flagged"]) for t in runs)
        print(
            f"{kind}: {refuted} of {len(runs)} runs had a flagged case refuted by measuring it again; "
            f"{others} failed on a case with no injected change"
        )
        screened = [t for t in runs if t.get("screened")]
        if any(t.get("screen") for t in runs):
            print(
                f"{kind}: {len(screened)} of {len(runs)} runs screened a case (significant before the "
                f"correction only: {sum(len(t['screened']) for t in screened)} cases, measured again)"
            )
    # The latency cases a run of the whole selection judges (its A/A runs): what an injected run
    # that timed fewer cases (--injected-only) would have been corrected over.
    full = max((t.get("latency_judged", 0) for t in aa if t.get("selection", "full") == "full"), default=0)
    alpha = float(trials[0].get("setup", {}).get("alpha", 0.01))
    # What a whole selection's confirmation would also have measured again on unchanged cases.
    extra = max((t.get("remeasured", 0) for t in aa if t.get("selection", "full") == "full"), default=0)
    for kind in dict.fromkeys(t["kind"] for t in valid if t["kind"] != "A/A"):
        _detection(kind, [t for t in valid if t["kind"] == kind], full, alpha, extra)
    with_plain = [t for t in aa if t.get("plain_s")]
    if with_plain:  # A/A: no calibration of an injected slowdown in the way
        costs = [t["wall_s"] / t["plain_s"] for t in with_plain]
        ab_wall = statistics.median(t["wall_s"] for t in with_plain)
        plain_wall = statistics.median(t["plain_s"] for t in with_plain)
        print(
            f"optbench ab wall time per run: median {ab_wall:.0f} s against {plain_wall:.0f} s plain "
            f"({len(with_plain)} runs); adjacent ratios median {statistics.median(costs):.2f}x "
            f"(range {min(costs):.2f}-{max(costs):.2f}): the gate adds {statistics.median(costs) - 1:.2f}x"
        )
    errors = [t for t in trials if t["error"]]
    if errors:
        print(f"{len(errors)} runs ended without verdicts (not counted): {errors[0]['error']}")


def holds_at(trial: dict, full: int, alpha: float, extra: int = 0) -> bool:
    """Whether an injected run that timed fewer cases caught its change in a way the whole selection's
    correction would keep: some caught injected case whose latency test's raw one-sided p, in the first
    measurement and in the confirmation, times `full` is below alpha (Holm's and Benjamini-Hochberg's
    adjusted p are at most that), or one caught on a metric not corrected over cases (top-1, size).
    Under the screen (trial["screen"]) the first test is not corrected over the selection when the
    case was measured again, so such a case holds if its first p is below alpha and its confirmation's
    p times the cases this run measured again plus `extra` (the most a whole selection's A/A run
    measured again) is. This bounds the correction only: a whole selection's session also runs longer,
    which this cannot show."""
    for flag in trial.get("flagged", []):
        case, _, metric = flag.rpartition(":")
        if CASE_TECHNIQUE not in case:
            continue
        if metric != "latency_ms":
            return True
        first = trial.get("injected_p", {}).get(case)
        again = trial.get("injected_confirm_p", {}).get(case)  # None: it was not re-measured
        if trial.get("screen") and first is not None and again is not None:
            if first < alpha and again * (trial.get("remeasured", 1) + extra) < alpha:
                return True
            continue
        found = [p for p in (first, again) if p is not None]
        if found and max(found) * full < alpha:
            return True
    return False


def _detection(kind: str, runs: list[dict], full: int, alpha: float, extra: int = 0) -> None:
    # Injected training cases (gate_quality.py --training) are cases the gated selection lacks: the
    # correction a catch must survive grows by them.
    trained = max(
        (sum(c.endswith("-training") for c in t.get("injected_cases", [])) for t in runs), default=0
    )
    full = full + trained if full else full
    whole = [t for t in runs if t.get("selection", "full") == "full"]
    fewer = [t for t in runs if t.get("selection") == "injected-only"]
    measured = [t["paired_median"] for t in runs if t.get("paired_median")]
    seen = f"; gate's paired ratio median {statistics.median(measured):.3f}" if measured else ""
    injected = [t["injected_ratio"] for t in runs if t.get("injected_ratio")]
    if injected:
        seen += f", calibrated {min(injected):.3f}-{max(injected):.3f}"
    if whole:
        caught = sum(bool(t.get("injected_caught")) for t in whole)
        print(f"{kind}, timing the whole selection: detected in {rate(caught, len(whole))}")
    if fewer:
        caught = sum(bool(t.get("injected_caught")) for t in fewer)
        if full:
            held = sum(holds_at(t, full, alpha, extra) for t in fewer)
            how = (
                f"; a screened catch: first p < {alpha:g} and the confirmation's p x (cases measured "
                f"again + {extra}) < {alpha:g}"
                if any(t.get("screen") for t in fewer)
                else ""
            )
            print(
                f"{kind}, timing only the injected and eager inference cases: caught in {caught} of "
                f"{len(fewer)}, of which {held} hold at the whole selection's correction ({full} latency "
                f"cases, raw p x {full} < {alpha:g} in both measurements{how}): detected in {rate(held, len(fewer))}"
            )
        else:
            print(
                f"{kind}, timing only the injected and eager inference cases: caught in {caught} of "
                f"{len(fewer)}; not counted as detection: no A/A run of the whole selection in this pool "
                f"gives the correction's size to check them against"
            )
    if seen:
        print(f"{kind}:{seen[1:]}")
    cases = [c for t in runs for c in t.get("injected_cases", [])]
    if cases:
        hit = [c for t in runs for c in t.get("injected_cases_caught", [])]
        missed = sorted(
            {
                c
                for t in runs
                for c in t.get("injected_cases", [])
                if c not in t.get("injected_cases_caught", [])
            }
        )
        print(
            f"{kind}, per injected case: caught {rate(len(hit), len(cases))}; missed in: {', '.join(missed) or '-'}"
        )
        if trained:
            steps = [c for c in cases if c.endswith("-training")]
            print(
                f"{kind}, per injected training case: caught {rate(sum(c.endswith('-training') for c in hit), len(steps))}"
            )


def pool_key(trial: dict) -> tuple[str, str, str]:
    """Trials pool when the rule, the CPU and the setup (A/B design, alpha, versions) are the same."""
    return (
        trial.get("rule", "?"),
        trial.get("cpu", {}).get("fingerprint", "?"),
        json.dumps(trial.get("setup", {}), sort_keys=True),
    )


def pools(trials: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """Trials grouped by pool_key, in ledger order."""
    grouped: dict[tuple[str, str, str], list[dict]] = {}
    for t in trials:
        grouped.setdefault(pool_key(t), []).append(t)
    return grouped


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python scripts/gate_quality_tally.py LEDGER.jsonl", file=sys.stderr)
        return 2
    for (rule_hash, _, _), trials in pools(read(Path(argv[0]))).items():
        first = trials[0]
        commits = ", ".join(dict.fromkeys(t.get("commit", "?") for t in trials))
        c = first.get("cpu", {})
        print(
            f"## rule {rule_hash}: {len(trials)} trials, commits {commits}, "
            f"{first.get('when', '?')[:10]} to {trials[-1].get('when', '?')[:10]}\n"
            f"CPU: {c.get('cpu')} {c.get('cpu_id')}, {c.get('cores')} cores, capability {c.get('cpu_capability')}, "
            f"ISA {c.get('cpu_isa') or '-'} (fingerprint {c.get('fingerprint')})\n"
            f"setup: {json.dumps(first.get('setup', {}), sort_keys=True)}"
        )
        summarize(trials)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
