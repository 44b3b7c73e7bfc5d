"""Runs one Case end to end and turns it into a row: build, prepare, warm up, time, cost.

Timing goes through pytest-benchmark when the caller hands over its fixture; an eager reference
measured on demand (its case was deselected) uses the same loop without it.
"""

from __future__ import annotations

import datetime as dt
import gc
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from optbench import cost
from optbench.case import BASELINE, Case
from optbench.devices import device_name, synchronize
from optbench.environment import git_sha, machine_info
from optbench.results import ResultsWriter
from optbench.timing import TimingPolicy, latency_stats, plan_rounds, time_calls, warm_up

SEED = 0

# Runs `call` for `rounds` timed rounds (plus `warmup` untimed) and returns seconds per round.
TimeFn = Callable[[Callable[[], object], int, int], list[float]]


def plain_timer(call: Callable[[], object], rounds: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    return time_calls(call, rounds)


def pytest_benchmark_timer(benchmark: Any) -> TimeFn:
    """Time through pytest-benchmark's pedantic mode so its JSON, tables and comparisons see the case."""

    def run(call: Callable[[], object], rounds: int, warmup: int) -> list[float]:
        benchmark.pedantic(call, rounds=rounds, warmup_rounds=warmup, iterations=1)
        return list(benchmark.stats.stats.data)

    return run


class CaseFailed(Exception):
    """The case ran and failed; its row is written. Message: the row's reason."""


@dataclass
class RunState:
    """What the cases of one run share."""

    run_id: str
    writer: ResultsWriter
    timing: TimingPolicy
    rows: list[dict[str, Any]] = field(default_factory=list)
    baselines: dict[tuple[str, str, str, int], dict[str, Any]] = field(default_factory=dict)
    flops: dict[tuple[str, str, int], int] = field(default_factory=dict)
    repo_dir: str | None = None

    def record(self, row: dict[str, Any]) -> None:
        self.writer.append(row)
        self.rows.append(row)


def _identity(case: Case, state: RunState, test: str, selected: bool) -> dict[str, Any]:
    spec = case.spec
    tech = case.tech
    info = machine_info()
    return {
        "run_id": state.run_id,
        "case_id": case.id,
        "test": test,
        "model": case.model,
        "task": spec.task,
        "technique": case.technique,
        "family": tech.family,
        "device": case.device,
        "device_name": device_name(case.device),
        "mode": case.mode,
        "batch_size": case.batch_size,
        "input_shape": spec.input_shape,
        "resolution": spec.resolution,
        "seq_len": spec.seq_len,
        "api": tech.api,
        "selected": selected,
        "threads": torch.get_num_threads(),
        "torch_version": info["torch"],
        "torchvision_version": info["torchvision"],
        "python_version": info["python"],
        "machine_fingerprint": info["fingerprint"],
        "git_sha": git_sha(state.repo_dir),
        "model_code_hash": spec.code_hash(),
        "technique_code_hash": tech.code_hash(),
    }


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _is_oom(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(error).lower()


def describe_error(error: BaseException) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}"[:500]


class CaseRunner:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def run(self, case: Case, test: str = "inference", time_fn: TimeFn | None = None) -> dict[str, Any]:
        """Measure `case` and record its row. Raises CaseFailed (after recording) when it fails."""
        if case.skip_reason:
            row = {
                **_identity(case, self.state, test, True),
                "status": "skipped",
                "reason": case.skip_reason,
                "timestamp": _now(),
            }
            self.state.record(row)
            return row
        if case.technique != BASELINE and case.group not in self.state.baselines:
            self._measure_reference(case.baseline(), test)
        row = self._measure(case, test, time_fn or plain_timer, selected=True)
        if row["status"] != "passed":
            raise CaseFailed(row["reason"])
        return row

    def _measure_reference(self, case: Case, test: str) -> None:
        # Speedup needs the eager baseline from this run; measure it if the user deselected it.
        self._measure(case, test, plain_timer, selected=False)

    def _measure(self, case: Case, test: str, time_fn: TimeFn, selected: bool) -> dict[str, Any]:
        started = time.perf_counter()
        row = _identity(case, self.state, test, selected)
        try:
            row.update(self._time_and_cost(case, time_fn))
            row["status"] = "passed"
        except Exception as error:  # a failing technique is a failed row; the run goes on
            row["status"] = "oom" if _is_oom(error) else "failed"
            row["reason"] = describe_error(error)
            row["error_trace"] = traceback.format_exc()
        finally:
            gc.collect()
            if case.device == "cuda" and torch.cuda.is_available():
                torch.cuda.empty_cache()
        trace = row.pop("error_trace", None)
        if row["status"] == "passed":
            self._add_speedup(case, row)
        row["duration_s"] = time.perf_counter() - started
        row["timestamp"] = _now()
        self.state.record(row)
        if trace:
            row["error_trace"] = trace  # for the test's failure message only, not the table
        return row

    def _add_speedup(self, case: Case, row: dict[str, Any]) -> None:
        if case.technique == BASELINE:
            self.state.baselines[case.group] = row
        base = self.state.baselines.get(case.group)
        if base is None:
            return
        row["baseline_case_id"] = base["case_id"]
        row["baseline_latency_ms"] = base["latency_ms_median"]
        row["speedup"] = 1.0 if base is row else base["latency_ms_median"] / row["latency_ms_median"]

    def _time_and_cost(self, case: Case, time_fn: TimeFn) -> dict[str, Any]:
        from optbench.memory import PeakMemory

        spec, tech = case.spec, case.tech
        device = torch.device(case.device)
        policy = self.state.timing
        with PeakMemory(device) as memory, torch.inference_mode():
            torch.manual_seed(SEED)
            model = spec.build(spec.num_classes).eval().to(device)
            gen = torch.Generator().manual_seed(SEED)
            inputs = tuple(x.to(device) for x in spec.make_inputs(case.batch_size, gen))
            flops_key = (case.model, case.device, case.batch_size)
            if flops_key not in self.state.flops:
                # Counted once on the unmodified fp32 model: the work the model does, whatever runs it.
                self.state.flops[flops_key] = cost.count_flops(model, inputs)

            t0 = time.perf_counter()
            prepared = tech.apply(model, inputs, device)
            forward, args = prepared.forward, prepared.inputs

            def call() -> object:
                out = forward(*args)
                synchronize(device)  # pytest-benchmark's timer does not wait for the GPU
                return out

            t1 = time.perf_counter()
            call()
            first_call = time.perf_counter() - t1
            prepare_s = time.perf_counter() - t0
            pilot = warm_up(call, policy)
            rounds = plan_rounds(pilot, policy)
            samples = time_fn(call, rounds, 1)
            memory.read()
            params, nonzero = cost.parameter_counts(prepared.module)
            size, compressed = cost.model_sizes(prepared.module)

        stats = latency_stats(samples, policy)
        median_s = stats["latency_ms_median"] / 1e3
        flops = self.state.flops[flops_key] / case.batch_size
        throughput = case.batch_size / median_s
        return {
            **stats,
            "dtype": prepared.dtype,
            "api": prepared.api or tech.api,
            "warmup_rounds": len(pilot) + 1,
            "throughput": throughput,
            "prepare_s": prepare_s,
            "first_call_ms": first_call * 1e3,
            "peak_mem_mb": memory.peak_mb,
            "peak_mem_delta_mb": memory.delta_mb,
            "mem_source": memory.source,
            "params": params,
            "nonzero_params": nonzero,
            "size_bytes": size,
            "size_compressed_bytes": compressed,
            "flops_per_sample": int(flops) if flops else None,
            "gflops_per_s": flops * throughput / 1e9 if flops else None,
            "samples_ms": [s * 1e3 for s in samples],
        }
