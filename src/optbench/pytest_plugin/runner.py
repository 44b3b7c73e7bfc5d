"""Runs one Case end to end and records its row: weights, measurement, accuracy verdict, speedup
against the group's eager case (with its interval) and distance from the machine's ceiling.

Timing goes through pytest-benchmark when the caller hands over its fixture; an eager reference
measured on demand (its case was deselected) uses the same loop without it.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from optbench.catalog.techniques.base import DATA, TRAINING, NotApplicable
from optbench.catalog.weights import WeightsProvider
from optbench.errors import UsageProblem
from optbench.matrix.case import BASELINE, Case
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.ceilings import Ceilings
from optbench.measure.floor import ACCURACY_STATUSES, Reference, judge
from optbench.measure.identity import identity, now
from optbench.measure.inference import CallTimeout, Setup, TimeFn, measure_case
from optbench.measure.paired import PairedResult
from optbench.measure.reference import reference_ms
from optbench.measure.timing import Pacer, before_rounds, paced_rounds, time_calls, warm_calls
from optbench.results import ResultsWriter
from optbench.results.derive import speedup_columns
from optbench.results.schema import Status

__all__ = [
    "ACCURACY_STATUSES",
    "CaseFailed",
    "CaseRunner",
    "RunState",
    "plain_timer",
    "pytest_benchmark_timer",
]


def plain_timer(
    call: Callable[[], object], rounds: int, warmup: int, *, paced: bool = True, pacer: Pacer | None = None
) -> list[float]:
    pacer = pacer if paced else None
    rounds = paced_rounds(rounds, pacer, warm_calls(call, warmup))
    return time_calls(call, rounds, before_rounds(call, rounds, pacer))


def pytest_benchmark_timer(benchmark: Any, pacer: Pacer | None = None) -> TimeFn:
    """Time through pytest-benchmark's pedantic mode so its JSON, tables and comparisons see the case;
    a pacer (`optbench ab`) gets the machine handed over between rounds, untimed."""

    def run(call: Callable[[], object], rounds: int, warmup: int, *, paced: bool = True) -> list[float]:
        pacer_here = pacer if paced else None
        if pacer_here is None:
            benchmark.pedantic(call, rounds=rounds, warmup_rounds=warmup, iterations=1)
        else:
            # pedantic's setup also precedes warm-up rounds: warm up here, timing the calls to size
            # the slices
            rounds = paced_rounds(rounds, pacer_here, warm_calls(call, warmup))
            benchmark.pedantic(
                call, rounds=rounds, iterations=1, setup=before_rounds(call, rounds, pacer_here)
            )
        return list(benchmark.stats.stats.data)

    run.pacer = pacer  # type: ignore[attr-defined]

    def record(samples: list[float]) -> None:
        """Calls timed elsewhere (paired with eager) into pytest-benchmark's stats, so its JSON and
        tables see the case: it has no public way to add samples, and pedantic cannot stop early."""
        stats = benchmark._make_stats(1)
        for seconds in samples:
            stats.update(seconds)

    if not getattr(benchmark, "disabled", False) and hasattr(benchmark, "_make_stats"):
        run.record = record  # type: ignore[attr-defined]
    return run


def _paced(time_fn: Any) -> bool:
    """Whether `time_fn` hands the machine to `optbench ab`'s other session between rounds."""
    if isinstance(time_fn, functools.partial):
        return time_fn.keywords.get("pacer") is not None
    return getattr(time_fn, "pacer", None) is not None


class CaseFailed(Exception):
    """The case ran and failed; its row is written. Message: the row's reason."""


@dataclass
class RunState:
    """What the cases of one run share."""

    run_id: str
    writer: ResultsWriter
    timing: TimingPolicy
    paired: bool = True
    """Time each case against its group's eager baseline in alternating blocks (False under a pacer:
    `optbench ab` pairs the two sessions instead)."""
    call_timeout_s: float | None = None
    """--call-timeout: a longer call ends its case as a timeout row."""
    eager: dict[Any, Any] = field(default_factory=dict)
    """The current group's prepared eager call (optbench.measure.inference.Setup.eager)."""
    weights: WeightsProvider = field(default_factory=lambda: WeightsProvider("random"))
    timing_shape: str = "deploy"
    """Time at the deployment shape (default) or at the task shape."""
    accuracy_floor: float = 0.99
    floor_points: float | None = None
    """--accuracy-floor-points: the floor as an absolute drop of top-1, in points."""
    """fail_accuracy below this fraction of the fp32 top-1 (MLPerf uses 0.99 and 0.999)."""
    record_only: bool = False
    """Record accuracy statuses without failing the pytest case."""
    eval_limit: int | None = None
    """Evaluate on the first N held-out samples only (None: all of them)."""
    calibration_samples: int = 256
    """Training samples static quantization calibrates on."""
    ceilings: Ceilings | None = None
    """The machine's measured ceilings, for pct_of_peak (None: not measured)."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    baselines: dict[tuple[str, str, str, int], dict[str, Any]] = field(default_factory=dict)
    references: dict[tuple[str, str, str, int], Reference] = field(default_factory=dict)
    reference_attempts: set[tuple[str, str, str, int]] = field(default_factory=set)
    repo_dir: str | None = None
    flops: dict[tuple[str, str, int, str, str], int] = field(default_factory=dict)
    flops_source: dict[tuple[str, str, int, str, str], str] = field(default_factory=dict)
    converge_steps: int = 0
    """Training mode: steps of each case's short seeded training (0: none)."""
    pipeline: Any = None
    """Data mode: the PipelineConfig (dataset, images, crop) every data case reads."""
    memo: Any = None
    """The optbench.measure.memo.Memo evaluations and short trainings are reused from and kept in
    (None: every one measured afresh: --fresh-evaluations, a gated run, optbench ab's sessions
    without memo_tree)."""
    memo_tree: str | None = None
    """Which code this run is (optbench ab's sessions: its commit and uncommitted changes); in every
    memo key when set, and what lets a paced (ab) session reuse at all."""

    @property
    def setup(self) -> Setup:
        """What measuring one case needs from the run (read fresh: tests change the state's fields)."""
        weights = self.weights

        def context(**kwargs: Any) -> Any:
            from optbench.catalog.techniques import TechniqueContext

            return TechniqueContext(
                **kwargs,
                cache_root=weights.cache_root,
                progress_context=weights.show_progress,
                show_progress=weights.progress,
                calibration_samples=self.calibration_samples,
            )

        return Setup(
            self.timing,
            self.timing_shape,
            self.eval_limit,
            self.flops,
            self.flops_source,
            converge_steps=self.converge_steps,
            context=context,
            paired=self.paired,
            eager=self.eager,
            call_timeout_s=self.call_timeout_s,
            memo=self.memo,
            memo_parts={
                "calibration_samples": self.calibration_samples,
                **({"tree": self.memo_tree} if self.memo_tree else {}),
            },
        )

    def record(self, row: dict[str, Any]) -> None:
        """Write a case's finished row, once; the run keeps a copy that later changes cannot reach."""
        self.writer.append(row)
        self.rows.append(dict(row))


def training_columns(record: dict[str, Any], spec: Any) -> dict[str, Any]:
    """How well trained weights learned their task: every row of a weak model says so."""
    if "top1" not in record:
        return {}
    return {
        "trained_top1": record["top1"],
        # Checkpoints from before tasks could set the training length have no target recorded.
        "target_top1": record.get("target_top1", spec.recipe.target_top1),
        "below_target": not record["reached_target"],
    }


def _is_oom(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(error).lower()


def paired_columns(paired: PairedResult | None) -> dict[str, Any]:
    """The speedup of a case timed against its eager baseline, and how its timing stopped."""
    if paired is None:
        return {}
    speeds = paired.by_preparation()
    return {
        "speedup": paired.speedup,
        "speedup_ci95_low": paired.low,
        "speedup_ci95_high": paired.high,
        "speedup_method": "paired",
        "pairs": paired.pairs,
        "stop_reason": paired.stop_reason,
        "preparations": len(speeds),
        "preparation_spread": max(speeds) / min(speeds) if len(speeds) > 1 else None,
    }


def describe_error(error: BaseException) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, UsageProblem):  # already a sentence for the user (bad weights, bad data)
        return message[:500]
    return f"{type(error).__name__}: {message}"[:500]


class CaseRunner:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def run(self, case: Case, test: str = "inference", time_fn: TimeFn | None = None) -> dict[str, Any]:
        """Measure `case` and record its row. Raises CaseFailed (after recording) when it fails."""
        if _paced(time_fn):  # optbench ab: the sessions are paired, each case is timed alone
            self.state.paired = False
            # ... and each session measures its own code's accuracy: a change in a file no key
            # covers (a data file a technique reads) must show. Reused only when the key holds the
            # session's whole tree (memo_tree: its commit and uncommitted changes).
            if not self.state.memo_tree:
                self.state.memo = None
        if case.skip_reason:
            row = {**self._identity(case, test, True), "status": Status.SKIPPED, "reason": case.skip_reason}
            row["timestamp"] = now()
            self.state.record(row)
            return row
        if case.technique != BASELINE and case.group not in self.state.reference_attempts:
            # Speedup needs the eager baseline from this run; measure it if the user deselected it.
            self._measure(case.baseline(), test, plain_timer, selected=False)
        row = self._measure(case, test, time_fn or plain_timer, selected=True)
        if row["status"] not in (Status.PASSED, Status.SKIPPED) and not (
            self.state.record_only and row["status"] in ACCURACY_STATUSES
        ):
            raise CaseFailed(row["reason"])
        return row

    def _identity(self, case: Case, test: str, selected: bool) -> dict[str, Any]:
        state = self.state
        timed = case.spec.at_shape(state.timing_shape)
        eval_shape = None if case.mode == DATA else state.weights.eval_shape(case.spec)
        return identity(case, state.run_id, test, selected, timed, eval_shape, state.repo_dir)

    def _measure(self, case: Case, test: str, time_fn: TimeFn, selected: bool) -> dict[str, Any]:
        state = self.state
        if case.technique == BASELINE:
            state.reference_attempts.add(case.group)  # measured once per group, even if it fails
        started = time.perf_counter()
        row = self._identity(case, test, selected)
        try:
            row["status"] = Status.PASSED
            if case.mode == DATA:
                self._data(case, row, time_fn)
            else:
                weights = state.weights.get(case.spec)
                row["weights"] = state.weights.choice
                row["weights_source"] = weights.source
                row.update(training_columns(weights.record, case.spec))
                measure = self._training if case.mode == TRAINING else self._inference
                measure(case, row, weights, time_fn)
        except NotApplicable as why:  # the technique saw the case and does not apply to it
            row["status"], row["reason"] = Status.SKIPPED, str(why)
        except Exception as error:  # a failing technique is a failed row; the run goes on
            if isinstance(error, CallTimeout):
                row["status"], row["reason"] = Status.TIMEOUT, str(error)
            else:
                row["status"] = Status.OOM if _is_oom(error) else Status.FAILED
                row["reason"] = describe_error(error)
            if row.get("hardware_note"):  # the library's message rarely says the hardware is missing
                row["reason"] += f" (likely the hardware: {row['hardware_note']})"
        finally:
            gc.collect()
            if case.device == "cuda" and torch.cuda.is_available():
                torch.cuda.empty_cache()
        # Before the peak columns: the first row would otherwise hold the machine's one-time ceiling
        # measurement (tens of seconds) in its own duration.
        row["duration_s"] = time.perf_counter() - started
        if "latency_ms_median" in row and row["status"] not in (Status.FAILED, Status.OOM):
            row["reference_ms"] = reference_ms(case.device)
            self._add_speedup(case, row)
            self._add_peak(case, row)
        row["timestamp"] = now()
        state.record(row)
        return row

    def _inference(self, case: Case, row: dict[str, Any], weights: Any, time_fn: TimeFn) -> None:
        state = self.state
        measured = measure_case(case, weights, state.setup, time_fn)
        row.update(measured.columns)
        row["samples_ms"] = measured.samples_ms
        row.update(paired_columns(measured.paired))
        labels = weights.eval_set(state.eval_limit)[1] if measured.logits is not None else None
        row.update(self._judge(case, measured.logits, measured.logits_again, labels, measured.nonfinite))
        if labels is not None and weights.task is not None:
            row["accuracy_source"] = weights.accuracy_source

    def _training(self, case: Case, row: dict[str, Any], weights: Any, time_fn: TimeFn) -> None:
        from optbench.measure.convergence import verdict
        from optbench.measure.training import measure_training

        measured = measure_training(case, weights, self.state.setup, time_fn)
        row.update(measured.columns)
        row["samples_ms"] = measured.samples_ms
        row.update(paired_columns(measured.paired))
        if measured.nonfinite:
            row.update(status=Status.NAN_OUTPUT, reason="the first training step's loss is not finite")
            return
        base = row if case.technique == BASELINE else self.state.baselines.get(case.group)
        row.update(verdict(row, base, case.spec.num_classes))

    def _data(self, case: Case, row: dict[str, Any], time_fn: TimeFn) -> None:
        from optbench.measure.data import PipelineConfig, measure_pipeline

        state = self.state
        eager = state.eager if state.paired else None  # None: each case timed alone (optbench ab)
        measured = measure_pipeline(case, state.pipeline or PipelineConfig(), time_fn, state.timing, eager)
        row.update(measured.columns)
        row.update(paired_columns(measured.paired))

    def _judge(
        self,
        case: Case,
        logits: torch.Tensor | None,
        again: torch.Tensor | None,
        labels: torch.Tensor | None,
        nonfinite: bool,
    ) -> dict[str, Any]:
        from optbench.measure import accuracy

        state = self.state
        columns: dict[str, Any] = {}
        if case.technique == BASELINE and logits is not None and again is not None and not nonfinite:
            deterministic = accuracy.baseline_is_deterministic(logits[: len(again)], again)
            state.references[case.group] = Reference(logits, deterministic)
            if not deterministic:
                columns = {
                    "status": Status.NONDETERMINISTIC_BASELINE,
                    "reason": "eager fp32 gave different outputs for the same inputs twice",
                }
        # Eager compared with itself never fails accuracy, so its determinism status stands alone.
        verdict = judge(
            logits,
            labels,
            nonfinite,
            state.references.get(case.group),
            state.accuracy_floor,
            state.floor_points,
        )
        if logits is not None and labels is not None:
            state.writer.predictions(case.id, labels.tolist(), logits.argmax(1).tolist())
        return {**verdict, **columns}

    def _add_speedup(self, case: Case, row: dict[str, Any]) -> None:
        if case.technique == BASELINE:
            self.state.baselines[case.group] = row
        base = self.state.baselines.get(case.group)
        if base is None:
            return
        row["baseline_case_id"] = base["case_id"]
        row["baseline_latency_ms"] = base["latency_ms_median"]
        if base.get("peak_mem_delta_mb") and row.get("peak_mem_delta_mb") is not None:
            row["peak_mem_vs_fp32"] = row["peak_mem_delta_mb"] / base["peak_mem_delta_mb"]
        if base.get("size_compressed_bytes") and row.get("size_compressed_bytes"):
            row["size_reduction"] = 100 * (1 - row["size_compressed_bytes"] / base["size_compressed_bytes"])
        # Data cases: an epoch's time is what a pipeline changes, stalls included: compare means.
        statistic = "mean" if case.mode == DATA else "median"
        base_samples = None if base is row else base["samples_ms"]  # None: its own baseline, 1.0
        found = speedup_columns(row["samples_ms"], base_samples, case.batch_size, statistic)
        if row.get("speedup_method") == "paired":  # timed against eager: its paired speedup stands
            found = {k: v for k, v in found.items() if not k.startswith("speedup")}
        else:
            found["speedup_method"] = "bootstrap" if base is not row else "baseline"
        row.update(found)

    def _add_peak(self, case: Case, row: dict[str, Any]) -> None:
        if self.state.ceilings is not None:
            row.update(self.state.ceilings.columns(case.device, row["dtype"], row.get("gflops_per_s")))
