"""`optbench ab`'s lockstep schedule: which side runs which test item when, and running it turn by
turn so that only one side measures at any moment. No torch."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

from optbench.ab.sessions import Side, short, stop

Step = tuple[str, int, str]
"""(side, round, test item)."""


def plan(
    base_items: list[str], head_items: list[str], rounds: int, only: list[str] | None = None
) -> tuple[list[Step], list[str]]:
    """(side, round, nodeid) steps and the items both sides have: each round every common item on
    both sides back to back, who goes first alternating by item and by round; then the items one side
    has, once. With `only` (a confirmation), just the common items named there."""
    base_set = set(base_items)
    common = [n for n in head_items if n in base_set and (only is None or n in only)]
    if only is not None:
        return plan(common, common, rounds)[0], common
    steps: list[Step] = []
    for r in range(1, rounds + 1):
        for i, nodeid in enumerate(common):
            order = ("base", "head") if (i + r) % 2 else ("head", "base")
            steps += [(order[0], r, nodeid), (order[1], r, nodeid)]
    head_set = set(head_items)
    steps += [("base", 1, n) for n in base_items if n not in head_set]
    steps += [("head", 1, n) for n in head_items if n not in base_set]
    return steps, common


def execute(
    sides: dict[str, Side],
    steps: list[Step],
    timeout: float,
    slices: int = 0,
    slice_rounds: int = 1,
) -> dict[str, float]:
    """Run the steps; returns the wall seconds each test item took, both sides and all rounds."""
    schedules: dict[str, list[int]] = {"base": [], "head": []}
    for name, _, nodeid in steps:
        schedules[name].append(sides[name].items.index(nodeid))
    for name, side in sides.items():
        assert side.conn is not None
        side.conn.send({"schedule": schedules[name], "slices": slices, "rounds_per_slice": slice_rounds})
    counters = {"base": 0, "head": 0}
    seconds: dict[str, float] = {}
    i = 0
    while i < len(steps):
        name, round_, nodeid = steps[i]
        pair = i + 1 < len(steps) and steps[i + 1][1:] == (round_, nodeid) and steps[i + 1][0] != name
        group = [steps[i], steps[i + 1]] if pair else [steps[i]]
        began = time.monotonic()
        _run_together(sides, group, counters, timeout, (i + 1, len(steps)))
        seconds[nodeid] = seconds.get(nodeid, 0.0) + time.monotonic() - began
        i += len(group)
    for side in sides.values():  # both finish (summary, files) only now: nothing is measuring
        if side.conn is not None and side.alive():
            with contextlib.suppress(OSError):
                side.conn.send({"quit": True})
    for side in sides.values():
        if side.proc is not None:
            try:
                side.returncode = side.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                stop(side)
                side.returncode = side.proc.poll()
    return seconds


def _turns(first: str, second: str) -> Iterator[str]:
    """first, second, second, first, first, second, ...: each pair of timing slices in ABBA order, so
    a steady drift favours neither side."""
    while True:
        yield from (first, second, second, first)


def _run_together(
    sides: dict[str, Side],
    group: list[Step],
    counters: dict[str, int],
    timeout: float,
    position: tuple[int, int],
) -> None:
    """Run one item on one side, or on both (the same item and round): each side runs until its timer
    pauses at a slice end or the item is done, and the turn passes to the other side (ABBA). Only one
    side is busy at any moment. A side whose timer never pauses runs its item in one turn."""
    _, round_, nodeid = group[0]
    names = [name for name, _, _ in group]
    finished = {name: sides[name].dead is not None for name in names}
    ends: dict[str, list[int]] = {name: [] for name in names}
    order = _turns(names[0], names[-1])
    while not all(finished.values()):
        name = next(order)
        if finished[name]:
            continue
        side = sides[name]
        assert side.conn is not None
        if not ends[name]:  # the step's first turn (later turns resume a pause)
            side.conn.send({"go": counters[name]})
            counters[name] += 1
        else:
            side.conn.send({"go": counters[name] - 1})
        message = side.conn.recv(timeout, side.alive)
        if message is not None and "paused" in message:
            ends[name].append(int(message["samples"]))
            continue
        finished[name] = True
        side.read_rows(round_, nodeid, ends[name])
        if message is None:
            side.crashed_on = nodeid
            side.dead = (
                f"stopped responding after {timeout:g} s on {nodeid}"
                if side.alive()
                else f"pytest exited (code {side.proc.poll() if side.proc else None}) while running {nodeid}"
            )
            print(f"optbench ab: the {name} session {side.dead} (log: {side.log})", file=sys.stderr)
            stop(side)
            continue
        outcome = "failed" if message.get("failed") else "ok"
        sliced = f", {len(ends[name]) + 1} slices" if ends[name] else ""
        print(
            f"optbench ab: [{position[0]}/{position[1]}] round {round_} {name:4} {short(nodeid)} "
            f"{message.get('seconds', 0):.1f}s {outcome}{sliced}",
            file=sys.stderr,
            flush=True,
        )
        if message.get("stopped"):
            side.dead = f"pytest stopped early: {message['stopped']}"
