"""The identity and context columns of a row: what was run, where, with which code."""

from __future__ import annotations

import datetime as dt
from typing import Any

import torch

from optbench.catalog.devices import device_name
from optbench.catalog.hardware import notes
from optbench.catalog.machine import git_sha, machine_info
from optbench.catalog.models import ModelSpec
from optbench.matrix.case import Case
from optbench.measure.ceilings import tf32_enabled


def identity(
    case: Case,
    run_id: str,
    test: str,
    selected: bool,
    timed: ModelSpec,
    eval_shape: str | None,
    repo_dir: str | None,
) -> dict[str, Any]:
    """Columns every row has, skipped ones included: `timed` is the spec at the timed input shape."""
    tech = case.tech
    info = machine_info()
    return {
        "run_id": run_id,
        "case_id": case.id,
        "test": test,
        "model": case.model,
        "task": timed.task,
        "technique": case.technique,
        "family": case.family,
        "device": case.device,
        "device_name": device_name(case.device),
        "mode": case.mode,
        "batch_size": case.batch_size,
        "input_shape": timed.input_shape,
        "eval_input_shape": eval_shape,
        "resolution": timed.resolution,
        "seq_len": timed.seq_len,
        "api": tech.api,
        "selected": selected,
        "threads": torch.get_num_threads(),
        "tf32": tf32_enabled() if case.device == "cuda" else None,
        "torch_version": info["torch"],
        "torchvision_version": info["torchvision"],
        "python_version": info["python"],
        "machine_fingerprint": info["fingerprint"],
        "cpu_capability": info["cpu_capability"],
        "cpu_isa": info["cpu_isa"],
        "cpu_id": info["cpu_id"],
        "cuda_capability": info["cuda_capability"] if case.device == "cuda" else None,
        "hardware_note": notes(tech.hardware, case.device),
        "git_sha": git_sha(repo_dir),
        "model_code_hash": timed.code_hash(),
        "technique_code_hash": tech.code_hash(),
    }


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
