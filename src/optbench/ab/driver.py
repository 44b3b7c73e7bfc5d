"""`optbench ab`: base and head measured interleaved on one machine, then gated on paired ratios.

The base ref is checked out into a temporary git worktree (the user's working tree, index and HEAD are
never touched: worktree.py). One pytest session per side starts once (sessions.py); a stand-alone
lockstep plugin (lockstep.py) makes each run the test items the driver names, one at a time: item i on
base, then item i on head (who goes first alternating by item and by round: schedule.py). Within an
item the two take turns again: each side's timer pauses between slices of its timing rounds (ABBA
order), so the two sides' slices pair up moments apart. Only one side measures at any moment, so slow
drift and a noisy neighbour hit both sides alike.

Each side's rows are split by round (rounds/<side>-<r>/) and pooled per case (base/, head/:
pooling.py). The verdicts are `optbench compare`'s on the pooled samples, except latency
(`latency_ms`), judged on the pairs of slices (optbench/gate/paired.py), and a flagged latency
regression is measured again before it fails (outcome.py, confirmation.py). This module runs those
steps in order. No torch is imported here.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from optbench.ab import allocator, schedule, sessions, worktree
from optbench.ab.options import AbOptions, check_options, gate_config, output_folder
from optbench.ab.outcome import EXIT_INTERRUPTED, AbRun, gate
from optbench.ab.pooling import paired_slices, pool
from optbench.ab.sessions import Measured, Setup, short
from optbench.errors import UsageProblem

__all__ = ["AbOptions", "measure", "paired_slices", "pool", "run_ab"]
"""paired_slices and pool live in pooling.py; named here too for callers that import them from here."""


def run_ab(options: AbOptions) -> int:
    """Measure, gate and write everything; returns the exit code (UsageProblem for bad input)."""
    pytest_args = check_options(options)
    cwd = Path.cwd()
    head = worktree.head(cwd)
    base_sha = worktree.resolve_commit(options.base, head.repo)
    config = gate_config(options)
    out = output_folder(options)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="optbench-ab-"))
    base_tree = tmp / "base"
    try:
        with sessions.signals_interrupt():
            base_cwd = worktree.add_worktree(head.repo, base_sha, base_tree, cwd)
            memory = allocator.choose(options.malloc, os.environ)
            # No __pycache__ in the user's tree; the same allocator for both sessions.
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **memory.added}
            plugin_dir = sessions.copy_plugin(tmp / "plugin")
            base_path, note = worktree.base_imports(base_tree, tmp, env)
            setup = Setup(
                options, pytest_args, {"base": base_sha, "head": head.sha},
                {"base": base_cwd, "head": cwd}, {"base": base_path, "head": []}, env, plugin_dir,
                config.thresholds.alpha,
                # Each session reuses the evaluations and short trainings of exactly its own code.
                {"base": base_sha, "head": worktree.tree_id(head.repo, head.sha)},
            )  # fmt: skip
            print(
                f"optbench ab: base {options.base} ({base_sha[:12]}) vs head {head.sha[:12]}"
                f"{' + uncommitted changes' if head.dirty else ''}, {options.rounds} round(s) of "
                f"{options.slices} timing slices; {note}; allocator: {memory.describe()}",
                file=sys.stderr,
                flush=True,
            )
            measured = measure(setup, out, None)
            wall_s = time.monotonic() - started
            run = AbRun(
                options, measured, out, base_sha, head.sha, head.dirty, note, wall_s, allocator=memory
            )
            # Inside the try: a confirmation re-measures in the base worktree, removed below.
            return gate(run, config, lambda items: measure(setup, out / "confirm", items))
    except KeyboardInterrupt:
        print(
            "optbench ab: interrupted; stopping both sessions and removing the base worktree", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    finally:
        with sessions.uninterruptible():
            worktree.remove_worktree(head.repo, base_tree)
            shutil.rmtree(tmp, ignore_errors=True)


def measure(setup: Setup, out: Path, only: list[str] | None) -> Measured:
    """Start a fresh pair of sessions, run the common test items (all, or those in `only`) interleaved,
    and stop both. Their logs and raw rows go under `out`. Fresh processes on purpose: a confirmation
    must not inherit the first sessions' memory layout, whose effect on speed is what it rules out."""
    out.mkdir(parents=True, exist_ok=True)
    options = setup.options
    started = time.monotonic()
    with sessions.running(setup, out) as sides:
        base, head = sides["base"], sides["head"]
        steps, common = schedule.plan(base.items, head.items, options.rounds, only)
        if not common:
            for side in sides.values():
                assert side.conn is not None
                side.conn.send({"abort": "optbench ab: no case in common with the other side"})
            raise UsageProblem(
                f"base and head have no case in common (base: {len(base.items)} items, e.g. "
                f"{short(base.items[0]) if base.items else 'none'}; head: {len(head.items)}, e.g. "
                f"{short(head.items[0]) if head.items else 'none'}): nothing to gate"
            )
        unreachable = None if only is not None else _unreachable(options, setup.alpha, len(common))
        if unreachable:
            for side in sides.values():
                assert side.conn is not None
                side.conn.send({"abort": "optbench ab: " + unreachable})
            raise UsageProblem(unreachable)
        start_s = time.monotonic() - started
        print(
            f"optbench ab: both sessions collected after {start_s:.0f} s: "
            f"{len(common)} items in common, {len(steps)} steps",
            file=sys.stderr,
            flush=True,
        )
        seconds = schedule.execute(sides, steps, options.step_timeout, options.slices, options.slice_rounds)
    return Measured(sides, common, seconds, start_s)


def _unreachable(options: AbOptions, alpha: float, cases: int) -> str | None:
    """Why no case could ever fail with these slices and rounds, or None (refused before any timing:
    otherwise such a gate passes whatever it measures)."""
    from optbench.gate.paired import min_pairs

    pairs, needed = options.slices * options.rounds, min_pairs(alpha, cases)
    if pairs >= needed:
        return None
    raise_to = -(-needed // options.rounds)
    return (
        f"--slices {options.slices} x --rounds {options.rounds} gives {pairs} pairs per case; {cases} cases "
        f"tested one-sided at alpha {alpha:g} and corrected need {needed} for any regression to be "
        f"significant: raise --slices to {raise_to} (or --rounds)"
    )
