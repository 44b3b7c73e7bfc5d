"""Sharding: one part of the matrix per runner (a CI matrix job, a Kubernetes indexed job, a Slurm
array task). Every group of cases that shares an eager baseline (model, device, mode, batch) stays
whole on one shard, so every speedup remains a ratio measured on one machine in one run; groups are
balanced by their expected time. Pure Python: no torch, so the plan can be computed anywhere."""

from __future__ import annotations

import os
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from optbench.errors import UsageProblem

_SPEC = re.compile(r"^\s*(-?\d+)\s*/\s*(-?\d+)\s*$")
DEFAULT_CASE_S = 30.0
"""Expected seconds of a case no earlier run measured (when none did, every case counts the same)."""


@dataclass(frozen=True)
class Shard:
    index: int
    """1-based: shard 1 of 3 is the first."""
    count: int
    source: str = "--shard"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, source: str = "--shard") -> Shard:
    """'2/3' -> Shard(2, 3); anything else (0/3, 4/3, x/3) is one clear line."""
    match = _SPEC.match(text or "")
    if not match:
        raise UsageProblem(f"{source} takes K/N (this is part K of N, 1 <= K <= N), got {text!r}")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 1 <= index <= count:
        raise UsageProblem(f"{source} takes K/N with 1 <= K <= N, got {text!r}")
    return Shard(index, count, source)


def detect_shard(env: Mapping[str, str] | None = None) -> Shard | None:
    """The shard the environment names, or None. Checked in order:
    OPTBENCH_SHARD=K/N; Kubernetes Indexed Jobs (JOB_COMPLETION_INDEX, 0-based, with the job's
    completions in OPTBENCH_SHARD_COUNT, which the manifest sets); Slurm arrays (SLURM_ARRAY_TASK_ID
    from SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT); GitLab's parallel matrix (CI_NODE_INDEX,
    1-based, CI_NODE_TOTAL)."""
    env = os.environ if env is None else env
    if env.get("OPTBENCH_SHARD"):
        return parse_shard(env["OPTBENCH_SHARD"], "OPTBENCH_SHARD")
    if "JOB_COMPLETION_INDEX" in env:
        if "OPTBENCH_SHARD_COUNT" not in env:
            raise UsageProblem(
                "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but OPTBENCH_SHARD_COUNT is not: "
                "set it to the job's completions"
            )
        return _from_index(
            env["JOB_COMPLETION_INDEX"], 0, env["OPTBENCH_SHARD_COUNT"], "JOB_COMPLETION_INDEX"
        )
    if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        first = env.get("SLURM_ARRAY_TASK_MIN", "0")
        if not first.isdigit():
            raise UsageProblem(f"SLURM_ARRAY_TASK_MIN is not a whole number: {first!r}")
        return _from_index(
            env["SLURM_ARRAY_TASK_ID"], int(first), env["SLURM_ARRAY_TASK_COUNT"], "SLURM_ARRAY_TASK_ID"
        )
    if "CI_NODE_INDEX" in env and "CI_NODE_TOTAL" in env:
        return _from_index(env["CI_NODE_INDEX"], 1, env["CI_NODE_TOTAL"], "CI_NODE_INDEX")
    return None


def _from_index(index: str, first: int, count: str, source: str) -> Shard:
    if not (index.strip().lstrip("-").isdigit() and count.strip().lstrip("-").isdigit()):
        raise UsageProblem(f"{source}={index!r} with a count of {count!r}: both must be whole numbers")
    return parse_shard(f"{int(index) - first + 1}/{int(count)}", source)


def plan(
    groups: Mapping[Hashable, Sequence[str]],
    count: int,
    durations: Mapping[str, float] | None = None,
) -> list[list[Hashable]]:
    """Groups (key -> the case ids in it) dealt to `count` shards: longest expected group first, each
    to the shard with the least expected time so far (ties: the lower shard). Deterministic, so every
    shard computes the same plan from the same matrix. `durations`: seconds per case id from an
    earlier run; unknown cases are expected to take the median of the known ones."""
    known = sorted(v for v in (durations or {}).values() if v and v > 0)
    default = known[len(known) // 2] if known else DEFAULT_CASE_S
    expected = {
        key: sum((durations or {}).get(case, default) or default for case in cases)
        for key, cases in groups.items()
    }
    order = sorted(groups, key=lambda k: (-expected[k], str(k)))
    shards: list[list[Hashable]] = [[] for _ in range(count)]
    load = [0.0] * count
    for key in order:
        target = min(range(count), key=lambda i: (load[i], i))
        shards[target].append(key)
        load[target] += expected[key]
    return shards
