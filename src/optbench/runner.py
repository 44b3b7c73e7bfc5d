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

from optbench import accuracy, cost
from optbench.case import BASELINE, Case
from optbench.devices import device_name, synchronize
from optbench.environment import git_sha, machine_info
from optbench.results import ResultsWriter
from optbench.timing import TimingPolicy, latency_stats, plan_rounds, time_calls, warm_up
from optbench.weights import ModelWeights, WeightsProvider

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


ACCURACY_STATUSES = ("fail_accuracy", "nan_output", "nondeterministic_baseline")
"""Statuses about the numbers a model computes; `record_only` keeps them from failing the test."""


@dataclass
class Reference:
    """The eager fp32 model's held-out logits, which every technique of its group is compared with."""

    logits: torch.Tensor
    deterministic: bool


@dataclass
class RunState:
    """What the cases of one run share."""

    run_id: str
    writer: ResultsWriter
    timing: TimingPolicy
    weights: WeightsProvider = field(default_factory=lambda: WeightsProvider("random"))
    accuracy_floor: float = 0.99
    """fail_accuracy below this fraction of the fp32 top-1 (MLPerf uses 0.99 and 0.999)."""
    record_only: bool = False
    """Record accuracy statuses without failing the pytest case."""
    eval_limit: int | None = None
    """Evaluate on the first N held-out samples only (None: all of them)."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    baselines: dict[tuple[str, str, str, int], dict[str, Any]] = field(default_factory=dict)
    references: dict[tuple[str, str, str, int], Reference] = field(default_factory=dict)
    reference_attempts: set[tuple[str, str, str, int]] = field(default_factory=set)
    flops: dict[tuple[str, str, int], int] = field(default_factory=dict)
    repo_dir: str | None = None

    def record(self, row: dict[str, Any]) -> None:
        self.writer.append(row)
        self.rows.append(row)


def _identity(case: Case, state: RunState, test: str, selected: bool, spec: Any = None) -> dict[str, Any]:
    spec = spec or case.spec
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
                **_identity(case, self.state, test, True, self.state.weights.input_spec(case.spec)),
                "status": "skipped",
                "reason": case.skip_reason,
                "timestamp": _now(),
            }
            self.state.record(row)
            return row
        if case.technique != BASELINE and case.group not in self.state.reference_attempts:
            self._measure_reference(case.baseline(), test)
        row = self._measure(case, test, time_fn or plain_timer, selected=True)
        if row["status"] != "passed" and not (self.state.record_only and row["status"] in ACCURACY_STATUSES):
            raise CaseFailed(row["reason"])
        return row

    def _measure_reference(self, case: Case, test: str) -> None:
        # Speedup needs the eager baseline from this run; measure it if the user deselected it.
        self._measure(case, test, plain_timer, selected=False)

    def _measure(self, case: Case, test: str, time_fn: TimeFn, selected: bool) -> dict[str, Any]:
        if case.technique == BASELINE:
            self.state.reference_attempts.add(case.group)  # measured once per group, even if it fails
        started = time.perf_counter()
        row = _identity(case, self.state, test, selected, self.state.weights.input_spec(case.spec))
        try:
            weights = self.state.weights.get(case.spec)
            row["weights"] = self.state.weights.choice
            row["weights_source"] = weights.source
            row["status"] = "passed"
            row.update(self._time_and_cost(case, time_fn, weights))
            self._judge(case, row, weights)
        except Exception as error:  # a failing technique is a failed row; the run goes on
            row["status"] = "oom" if _is_oom(error) else "failed"
            row["reason"] = describe_error(error)
            row["error_trace"] = traceback.format_exc()
        finally:
            gc.collect()
            if case.device == "cuda" and torch.cuda.is_available():
                torch.cuda.empty_cache()
        trace = row.pop("error_trace", None)
        for private in [k for k in row if k.startswith("_")]:  # logits and flags for _judge only
            del row[private]
        if "latency_ms_median" in row and row["status"] not in ("failed", "oom"):
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

    def _judge(self, case: Case, row: dict[str, Any], weights: ModelWeights) -> None:
        """Accuracy, fidelity to fp32 and the status they imply, from the held-out logits."""
        logits = row.get("_logits")
        if row.pop("_nonfinite_output", False) or (logits is not None and accuracy.has_nonfinite(logits)):
            row["status"] = "nan_output"
            row["reason"] = "the model's outputs contain NaN or inf"
            return
        if logits is None:
            return
        _, labels = weights.eval_set(self.state.eval_limit)
        row["top1"] = accuracy.topk_accuracy(logits, labels, 1)
        row["top5"] = accuracy.topk_accuracy(logits, labels, 5)
        if case.technique == BASELINE:
            again = row["_logits_again"]
            deterministic = accuracy.baseline_is_deterministic(logits[: len(again)], again)
            self.state.references[case.group] = Reference(logits, deterministic)
            if not deterministic:
                row["status"] = "nondeterministic_baseline"
                row["reason"] = "eager fp32 gave different outputs for the same inputs twice"
        reference = self.state.references.get(case.group)
        if reference is None:
            return
        # Compare on the samples both saw (an --eval-samples limit keeps a prefix of the split).
        ref_logits = reference.logits[: len(logits)]
        ref_top1 = accuracy.topk_accuracy(ref_logits, labels, 1)
        row["top1_fp32"] = ref_top1
        row["top1_delta"] = row["top1"] - ref_top1
        row["top1_ratio"] = row["top1"] / ref_top1 if ref_top1 > 0 else float("nan")
        row.update(accuracy.fidelity(logits, ref_logits))
        row["accuracy_floor"] = self.state.accuracy_floor
        if row["status"] == "passed" and not accuracy.accuracy_ok(
            row["top1"], ref_top1, self.state.accuracy_floor
        ):
            row["status"] = "fail_accuracy"
            row["reason"] = (
                f"top-1 {row['top1']:.4f} is below {self.state.accuracy_floor:g} x fp32 top-1 {ref_top1:.4f} "
                f"(delta {row['top1_delta']:+.4f}, agreement with fp32 {row['agreement']:.4f})"
            )

    def _evaluate(
        self, prepared: Any, weights: ModelWeights, batch_size: int, device: torch.device, limit: int | None
    ) -> torch.Tensor:
        """Held-out logits of the prepared (timed) model, at the timed batch size: the last batch is
        padded, so a compiled model sees no new shape."""
        x, _ = weights.eval_set(limit)
        outs = []
        for i in range(0, len(x), batch_size):
            chunk = x[i : i + batch_size]
            real = len(chunk)
            if real < batch_size:
                chunk = torch.cat([chunk, chunk[:1].expand(batch_size - real, *chunk.shape[1:])])
            out = prepared.forward(*prepared.adapt_inputs((chunk.to(device),)))
            outs.append(out[:real].float().cpu())
        return torch.cat(outs)

    def _time_and_cost(self, case: Case, time_fn: TimeFn, weights: ModelWeights) -> dict[str, Any]:
        from optbench.memory import PeakMemory

        spec, tech = weights.spec, case.tech
        device = torch.device(case.device)
        policy = self.state.timing
        with PeakMemory(device) as memory, torch.inference_mode():
            model = weights.build().to(device)
            gen = torch.Generator().manual_seed(SEED)
            inputs = tuple(x.to(device) for x in spec.example_inputs(case.batch_size, gen))
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
            first_out = call()
            first_call = time.perf_counter() - t1
            nonfinite = isinstance(first_out, torch.Tensor) and not bool(torch.isfinite(first_out).all())
            prepare_s = time.perf_counter() - t0
            pilot = warm_up(call, policy)
            rounds = plan_rounds(pilot, policy)
            samples = time_fn(call, rounds, 1)
            memory.read()
            params, nonzero = cost.parameter_counts(prepared.module)
            size, compressed = cost.model_sizes(prepared.module)
            evaluated: dict[str, Any] = {}
            if weights.task is not None:
                t2 = time.perf_counter()
                limit = self.state.eval_limit
                evaluated["_logits"] = self._evaluate(prepared, weights, case.batch_size, device, limit)
                evaluated["eval_s"] = time.perf_counter() - t2
                evaluated["eval_samples"] = len(evaluated["_logits"])
                if case.technique == BASELINE:
                    # Determinism of fp32 itself: a second pass over a few batches is enough to see it.
                    again = min(len(evaluated["_logits"]), 4 * case.batch_size)
                    evaluated["_logits_again"] = self._evaluate(
                        prepared, weights, case.batch_size, device, again
                    )

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
            "_nonfinite_output": nonfinite,
            **evaluated,
        }
