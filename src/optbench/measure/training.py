"""Measures one training case: optimizer steps timed at the timed shape on a copy of the weights,
then a short seeded training through the same technique to show whether it still learns (on the
plain digits where the embedded task is hard digits: see tasks.base.short_training_task)."""

from __future__ import annotations

import torch

from optbench.catalog.techniques import Prepared
from optbench.catalog.weights import ModelWeights, accuracy_source
from optbench.matrix.case import Case
from optbench.measure.convergence import short_training
from optbench.measure.inference import Measurement, Setup, TimeFn, apply_technique, time_case, timed_columns


def measure_training(case: Case, weights: ModelWeights, setup: Setup, time_fn: TimeFn) -> Measurement:
    timed = time_case(case, weights, setup, time_fn)
    measurement = Measurement(
        columns=timed_columns(case, timed, setup.timing),
        samples_ms=[s * 1e3 for s in timed.samples],
        paired=timed.paired,
        nonfinite=timed.nonfinite,
    )
    del timed  # free the timed model before training another
    task, at_task = weights.converge_task or weights.task, weights.eval_spec
    if setup.converge_steps and task is not None and at_task is not None and len(task.train_y):
        device = torch.device(case.device)
        # The recipe's batch, rounded to a multiple of the timed batch: a technique that splits the
        # timed batch (grad_accum_<k>) then splits this one too.
        batch = max(case.batch_size, at_task.recipe.batch_size // case.batch_size * case.batch_size)

        def prepare(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> Prepared:
            return apply_technique(case.tech, model, inputs, weights, at_task, case, setup, batch)[0]

        result = short_training(
            prepare,
            at_task.build_model,
            (task.train_x, task.train_y),
            task.eval_set(setup.eval_limit),
            steps=setup.converge_steps,
            batch_size=batch,
            lr=at_task.recipe.lr,
            device=device,
        )
        measurement.columns.update(
            result.columns(),
            converge_task=task.name,
            accuracy_source=accuracy_source(task, "short training from scratch", always=True),
        )
    return measurement
