"""Measures one prepared case: build, prepare (outside inference mode), first call, warm-up, timed
rounds, costs, and the held-out logits of the very object that was timed."""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from optbench.catalog import cost
from optbench.catalog.devices import synchronize
from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques import Prepared, Technique, TechniqueContext
from optbench.catalog.techniques.base import TRAINING
from optbench.catalog.weights import ModelWeights
from optbench.matrix.case import BASELINE, Case
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.memo import Memo, key, tensor_digest
from optbench.measure.memory import PeakMemory
from optbench.measure.paired import PairedResult, time_paired
from optbench.measure.row_columns import timed_columns
from optbench.measure.timing import plan_rounds, warm_up

SEED = 0
EVAL_BATCH = 32
"""Evaluation batch size when the evaluation shape differs from the timed one (the prepared object
sees a new shape anyway): far fewer calls for models timed at batch 2. At the timed shape, evaluation
keeps the timed batch size, so a compiled model sees no new shape."""


class TimeFn(Protocol):
    """Runs `call` for `rounds` timed rounds (plus `warmup` untimed) and returns seconds per round.
    Under `optbench ab` it may time more rounds and pause between slices of them; `paced=False`
    times exactly `rounds` in one go (a call that consumes a finite stream, such as a loader epoch)."""

    def __call__(
        self, call: Callable[[], object], rounds: int, warmup: int, *, paced: bool = True
    ) -> list[float]: ...


@dataclass
class Measurement:
    """What measuring a case produced: row columns, and the arrays judging accuracy needs."""

    columns: dict[str, Any]
    samples_ms: list[float]
    nonfinite: bool = False
    paired: PairedResult | None = None
    """The case timed against its eager baseline (None: timed alone)."""
    logits: torch.Tensor | None = None
    """Held-out logits of the prepared model (None: these weights have no task to evaluate on)."""
    logits_again: torch.Tensor | None = None
    """A second pass over the first batches (eager only): is fp32 itself deterministic?"""


@dataclass
class Setup:
    """What one case needs besides the case itself (shared by the run)."""

    timing: TimingPolicy
    timing_shape: str = "deploy"
    eval_limit: int | None = None
    flops: dict[tuple[str, str, int, str, str], int] = field(default_factory=dict)
    flops_source: dict[tuple[str, str, int, str, str], str] = field(default_factory=dict)
    converge_steps: int = 0
    """Training mode: optimizer steps of the short seeded training per case (0: none)."""
    context: Callable[..., TechniqueContext] = TechniqueContext
    """Makes the technique context (the run binds the cache folder and progress bars into it)."""
    call_timeout_s: float | None = None
    """One call longer than this stops the case (CallTimeout): a timeout row, and the run goes on."""
    paired: bool = True
    """Time each case in alternating blocks with its group's eager baseline (optbench.measure.paired);
    False times each case alone (`optbench ab` pairs whole sessions instead)."""
    eager: dict[Any, tuple[Callable[[], object], float]] = field(default_factory=dict)
    """The current group's eager call, kept prepared in memory, and its per-call seconds."""
    memo: Memo | None = None
    """Evaluations and short trainings an earlier run left (optbench.measure.memo; None: none reused)."""
    memo_parts: dict[str, Any] = field(default_factory=dict)
    """Run settings that change what is evaluated (calibration samples ...), for the memo's keys."""


def _dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (0 until anything was compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    return int(utils.counters["stats"]["unique_graphs"]) if utils is not None else 0


def _build(
    weights: ModelWeights, spec: ModelSpec, batch_size: int, device: torch.device
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model at `spec`'s input shape with the case's weights, and its example inputs, on `device`."""
    model = weights.build(spec).to(device)
    gen = torch.Generator().manual_seed(SEED)
    return model, tuple(x.to(device) for x in spec.example_inputs(batch_size, gen))


def apply_technique(
    tech: Technique,
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    weights: ModelWeights,
    spec: ModelSpec,
    case: Case,
    setup: Setup,
    batch_size: int,
) -> tuple[Prepared, TechniqueContext]:
    """Apply the technique outside inference mode: it may calibrate, fine-tune or use autograd."""
    ctx = setup.context(
        spec=spec,
        device=torch.device(case.device),
        batch_size=batch_size,
        input_shape=spec.input_shape,
        task=weights.task,
        seed=SEED,
        weights_key=weights.key,
        mode=case.mode,
    ).for_technique(tech.name, tech.code_hash())
    return tech.apply(Prepared.eager(model, inputs), ctx), ctx


def evaluate(prepared: Prepared, x: torch.Tensor, batch_size: int, device: torch.device) -> torch.Tensor:
    """Logits of the prepared model on `x`, at the timed batch size: the last batch is padded, so a
    compiled model sees no new batch shape."""
    outs = []
    for i in range(0, len(x), batch_size):
        chunk = x[i : i + batch_size]
        real = len(chunk)
        if real < batch_size:
            chunk = torch.cat([chunk, chunk[:1].expand(batch_size - real, *chunk.shape[1:])])
        out = prepared.forward(*prepared.adapt_inputs((chunk.to(device),)))
        outs.append(out[:real].float().cpu())
    return torch.cat(outs)


@dataclass
class Timed:
    """A prepared case after its timed rounds: what the row's speed and cost columns come from."""

    prepared: Prepared
    ctx: TechniqueContext
    spec: ModelSpec
    """The spec at the timed input shape."""
    samples: list[float]
    pilot: list[float]
    first_call_s: float
    prepare_s: float
    graphs: int
    nonfinite: bool
    memory: PeakMemory
    params: int
    nonzero: int
    size: int
    compressed: int
    flops_per_sample: float | None
    extra: dict[str, Any] = field(default_factory=dict)
    paired: PairedResult | None = None


def time_case(case: Case, weights: ModelWeights, setup: Setup, time_fn: TimeFn) -> Timed:
    """Build, prepare, call once (part of preparation), warm up and time the case. Inference times
    forward calls in inference mode; training times optimizer steps on a copy of the weights."""
    tech, device, policy = case.tech, torch.device(case.device), setup.timing
    training = case.mode == TRAINING
    timed = weights.spec.at_shape(setup.timing_shape)
    extra: dict[str, Any] = {}
    if case.technique == BASELINE:
        setup.eager.clear()  # the previous group's eager call: freed before this group's is built
    with PeakMemory(device) as memory:
        # weights.build makes a new module from the state dict: training never touches the checkpoint.
        model, inputs = _build(weights, timed, case.batch_size, device)
        gen = torch.Generator().manual_seed(SEED)
        targets = torch.randint(timed.num_classes, (case.batch_size,), generator=gen).to(device)
        flops_key = (case.model, case.device, case.batch_size, timed.input_shape, case.mode)
        if flops_key not in setup.flops:
            # Counted once, on the model before any technique: the work it does, whatever runs it.
            if training:
                setup.flops[flops_key], setup.flops_source[flops_key] = cost.count_training_flops(
                    model, inputs, targets
                )
            else:
                setup.flops[flops_key] = cost.count_flops(model, inputs)
        if training:
            extra["flops_counted"] = setup.flops_source.get(flops_key)
        graphs_before = _dynamo_graphs()
        started = time.perf_counter()
        prepared, ctx = apply_technique(tech, model, inputs, weights, timed, case, setup, case.batch_size)
        call = _caller(prepared, training, device, targets, timed.recipe.lr)
        mode: Any = contextlib.nullcontext() if training else torch.inference_mode()
        with mode:
            t1 = time.perf_counter()
            first_out = call()  # preparation (compilation happens here): never held to the limit
            first_call = time.perf_counter() - t1
            unlimited = [call]  # for a later preparation's recompile of this one: never held to the limit
            if setup.call_timeout_s is not None:
                call = _limited(call, setup.call_timeout_s)
            prepare_s = time.perf_counter() - started
            graphs = _dynamo_graphs() - graphs_before
            nonfinite = isinstance(first_out, torch.Tensor) and not bool(torch.isfinite(first_out).all())
            pilot = warm_up(call, policy)
            eager = setup.eager.get(case.group) if setup.paired and case.technique != BASELINE else None
            paired = None
            if eager is not None:
                memory.read()  # the case's own peak: eager's calls below must not count in it
                calls = [call]
                cap = policy.max_preparations or tech.preparations
                for _ in range(min(tech.preparations, cap) - 1):  # after memory.read: not its own peak
                    calls.append(_prepared_again(case, weights, setup, timed, targets, unlimited, policy))
                paired = _time_against_eager(calls, eager, pilot, policy, time_fn)
                samples = paired.case_samples
            else:
                samples = time_fn(call, plan_rounds(pilot, policy), 1)
            if setup.paired and case.technique == BASELINE:  # kept for the group's cases
                setup.eager[case.group] = (call, statistics.median(samples))
        if paired is None:
            memory.read()
        params, nonzero = cost.parameter_counts(prepared.module)
        size, compressed = cost.model_sizes(prepared.module)
    flops = prepared.flops_per_sample if not training else None
    flops = flops or setup.flops[flops_key] / case.batch_size
    return Timed(
        prepared, ctx, timed, samples, pilot, first_call, prepare_s, graphs, nonfinite, memory,
        params, nonzero, size, compressed, flops, extra, paired,
    )  # fmt: skip


class CallTimeout(Exception):
    """One call of a case took longer than the run allows (--call-timeout)."""


def _caller(
    prepared: Prepared, training: bool, device: torch.device, targets: torch.Tensor, lr: float
) -> Callable[[], object]:
    """The timed call of a prepared case: one forward, or one optimizer step in training."""
    args = prepared.inputs
    if training:
        from optbench.measure.train_step import train_step

        step = train_step(prepared, device, lr=lr)

        def call() -> object:
            loss = step(args, targets)
            synchronize(device)
            return loss

        return call
    forward = prepared.forward

    def infer() -> object:
        out = forward(*args)
        synchronize(device)  # pytest-benchmark's timer does not wait for the GPU
        return out

    return infer


def _prepared_again(
    case: Case,
    weights: ModelWeights,
    setup: Setup,
    timed: ModelSpec,
    targets: torch.Tensor,
    earlier: list[Callable[[], object]],
    policy: TimingPolicy,
) -> Callable[[], object]:
    """Another independent preparation of the case from the same weights (Technique.preparations),
    called once and warmed up like the first, for the paired timing to alternate with it. Its
    preparation reuses what the first cached (calibration, fine-tunes, inductor's compiled code).
    `earlier`: the preparations so far, without the call-time limit (a recompile after dynamo's reset
    is preparation, not a timed call); this one joins them."""
    with torch.inference_mode(False):  # preparing may calibrate, fine-tune or use autograd
        model, inputs = _build(weights, timed, case.batch_size, torch.device(case.device))
        again, _ = apply_technique(case.tech, model, inputs, weights, timed, case, setup, case.batch_size)
    call = _caller(again, case.mode == TRAINING, torch.device(case.device), targets, timed.recipe.lr)
    call()
    for other in earlier:  # a technique that resets dynamo (compile does) makes the others compile again
        other()
    earlier.append(call)
    warm_up(call, policy)
    return _limited(call, setup.call_timeout_s) if setup.call_timeout_s is not None else call


def _limited(call: Callable[[], object], limit_s: float) -> Callable[[], object]:
    """`call`, raising CallTimeout after any call that took longer than `limit_s`. A running kernel
    cannot be interrupted safely, so the case stops after that call: one call is the most it costs."""

    def limited() -> object:
        started = time.perf_counter()
        out = call()
        took = time.perf_counter() - started
        if took > limit_s:
            raise CallTimeout(f"one call took {took:.1f} s, over the {limit_s:g} s limit (--call-timeout)")
        return out

    return limited


def _time_against_eager(
    calls: list[Callable[[], object]],
    eager: tuple[Callable[[], object], float],
    pilot: list[float],
    policy: TimingPolicy,
    time_fn: TimeFn,
) -> PairedResult:
    """The case (its preparations' calls) against its group's eager call, in ABBA blocks
    (optbench.measure.paired); the case's calls also go to pytest-benchmark where the timer can take
    them (`time_fn.record`)."""
    eager_call, eager_per_call = eager
    for _ in range(3):  # eager's caches were the previous case's for a while: warm them again
        eager_call()
    per_call = max(statistics.median(pilot[-3:]), eager_per_call)
    paired = time_paired(calls, eager_call, per_call, policy.budget_s, policy.target_rel_ci)
    record = getattr(time_fn, "record", None)
    if record is not None:
        record(paired.case_samples)
    return paired


def measure_case(case: Case, weights: ModelWeights, setup: Setup, time_fn: TimeFn) -> Measurement:
    timed = time_case(case, weights, setup, time_fn)
    prepared, tech, device = timed.prepared, case.tech, torch.device(case.device)
    measurement = Measurement(
        columns={},
        samples_ms=[s * 1e3 for s in timed.samples],
        nonfinite=timed.nonfinite,
        paired=timed.paired,
    )
    per_shape = None
    at_eval = weights.eval_spec
    if weights.task is not None and at_eval is not None:
        new_shape = at_eval.input_shape != timed.spec.input_shape
        per_shape = new_shape and (timed.spec.shape_tied or tech.shape_specific)
        eval_batch = max(case.batch_size, EVAL_BATCH) if new_shape else case.batch_size
        t2 = time.perf_counter()
        x, _ = weights.eval_set(setup.eval_limit)
        name = found = None
        if setup.memo is not None:
            name = key(
                kind="evaluation", model=case.model, model_code=weights.spec.code_hash(),
                weights=weights.key, technique=case.technique, technique_code=tech.code_hash(),
                device=case.device, timed_shape=timed.spec.input_shape, batch_size=case.batch_size,
                eval_shape=at_eval.input_shape, eval_batch=eval_batch, inputs=tensor_digest(x),
                **setup.memo_parts,
            )  # fmt: skip
            found = setup.memo.load(name)
        if found is not None:  # the same code, weights, technique and kernels evaluated it before
            measurement.logits, measurement.logits_again = found["logits"], found.get("again")
        else:
            to_eval = prepared
            if per_shape:
                # A prepared object tied to its shape cannot run the held-out split: prepare another
                # from the same weights, through the same technique, at the evaluation shape.
                eval_model, eval_inputs = _build(weights, at_eval, eval_batch, device)
                to_eval = apply_technique(
                    tech, eval_model, eval_inputs, weights, at_eval, case, setup, eval_batch
                )[0]
            with torch.inference_mode():
                measurement.logits = evaluate(to_eval, x, eval_batch, device)
                if case.technique == "eager":
                    # Determinism of fp32 itself: a second pass over a few batches is enough to see it.
                    first = x[: 4 * eval_batch]
                    measurement.logits_again = evaluate(to_eval, first, eval_batch, device)
            if setup.memo is not None and name is not None:
                kept = {"logits": measurement.logits}
                if measurement.logits_again is not None:
                    kept["again"] = measurement.logits_again
                setup.memo.save(name, kept)
        measurement.columns["eval_cached"] = found is not None if setup.memo is not None else None
        measurement.columns["eval_s"] = time.perf_counter() - t2
        measurement.columns["eval_samples"] = len(measurement.logits)
        measurement.columns["eval_batch_size"] = eval_batch
    measurement.columns.update(timed_columns(case, timed, setup.timing))
    measurement.columns["prepared_per_shape"] = per_shape
    return measurement
