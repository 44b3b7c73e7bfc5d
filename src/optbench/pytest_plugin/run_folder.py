"""A run's folder: its id, results/latest, run.json, this shard's cases, and the machine's timing lock."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from optbench.pytest_plugin.stash import STATE_KEY as _STATE_KEY


def _new_run_id() -> str:
    from optbench.results.manifest import new_run_id

    return new_run_id()


def _point_latest(results: Path, run_dir: Path) -> None:
    latest = results / "latest"
    tmp = results / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run_dir.relative_to(results), target_is_directory=True)
        os.replace(tmp, latest)  # atomic: a reader never sees latest missing
    except OSError:
        # No symlinks (some Windows setups): name the run in a file instead.
        (results / "LATEST").write_text(run_dir.name + "\n")


def _cases(items: list[pytest.Item]) -> dict[pytest.Item, Any]:
    params = ((item, getattr(getattr(item, "callspec", None), "params", {})) for item in items)
    return {item: p["optbench_case"] for item, p in params if "optbench_case" in p}


def _keep_shard(config: pytest.Config, items: list[pytest.Item], shard: Any) -> None:
    """Keep this shard's groups of cases (and any non-benchmark test), deselect the rest."""
    from optbench.matrix.shard import plan

    cases = _cases(items)
    groups: dict[Any, list[str]] = {}
    for case in cases.values():
        groups.setdefault(case.group, []).append(case.id)
    durations = None
    if config.getoption("shard_durations"):
        from optbench.results import load

        earlier = load(config.getoption("shard_durations"))
        durations = dict(zip(earlier["case_id"], earlier["duration_s"].fillna(0.0), strict=True))
    mine = set(plan(groups, shard.count, durations)[shard.index - 1])
    config.stash[_STATE_KEY]["matrix_cases"] = len(cases)
    deselected = [item for item, case in cases.items() if case.group not in mine]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        gone = set(deselected)
        items[:] = [item for item in items if item not in gone]


def _write_manifest(
    config: pytest.Config, state: dict[str, Any], run_id: str, run_dir: Path, items: list[pytest.Item]
) -> None:
    from dataclasses import asdict

    from optbench.catalog.machine import git_sha, machine_info, speed_environment
    from optbench.matrix.settings import MANIFEST_OPTIONS
    from optbench.results.manifest import Manifest

    chosen = state["selection"]
    selection = {k: v for k, v in asdict(chosen).items() if k not in ("shard", "models_given")}
    options = (*MANIFEST_OPTIONS, "keyword", "markexpr")  # the in_manifest options, then pytest's -k and -m
    settings = {name: getattr(config.option, name, None) for name in options}
    if "malloc" in state:  # `auto` resolved: the thresholds the rows were timed under
        settings["malloc"] = state["malloc"]
    cases = [case.id for case in _cases(items).values()]
    info = machine_info()
    Manifest(
        run_id=run_id,
        git_sha=git_sha(str(config.rootpath)),
        config={**selection, **settings},
        cases=cases,
        matrix_cases=state.get("matrix_cases", len(cases)),
        shard=str(chosen.shard) if chosen.shard is not None else None,
        machine_fingerprint=info["fingerprint"],
        versions={k: info[k] for k in ("torch", "torchvision", "python")},
        environment=speed_environment(),
    ).write(run_dir)


def _take_machine(config: pytest.Config, state: dict[str, Any], run_id: str, wait: bool) -> None:
    """The cache folder's timing lock (pytest_plugin/lock.py): a second run timing on this machine at
    once is told in one line, or waits. `optbench ab`'s two sessions share the machine on purpose."""
    if config.pluginmanager.get_plugin("optbench_lockstep") is not None:
        return
    from optbench.catalog.checkpoints import cache_dir
    from optbench.pytest_plugin.lock import MachineLock

    lock = MachineLock(cache_dir())
    if wait:
        print(f"optbench: waiting for the machine ({lock.path})", file=sys.stderr)
    warning = lock.acquire(run_id, wait=wait)
    state["lock"] = lock
    if warning:
        state["lock_warning"] = warning
        print(warning, file=sys.stderr)
