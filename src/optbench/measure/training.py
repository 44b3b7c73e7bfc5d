"""Measures one training case: optimizer steps timed at the timed shape on a copy of the weights,
then a short seeded training through the same technique to show whether it still learns (on the
plain digits where the embedded task is hard digits: see tasks.base.short_training_task)."""

from __future__ import annotations

from dataclasses import asdict

import torch

from optbench.catalog.techniques import Prepared
from optbench.catalog.weights import ModelWeights, accuracy_source
from optbench.matrix.case import Case
from optbench.measure.convergence import Convergence, short_training
from optbench.measure.inference import Measurement, Setup, TimeFn, apply_technique, time_case
from optbench.measure.memo import key, tensor_digest
from optbench.measure.row_columns import timed_columns


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

        held_out = task.eval_set(setup.eval_limit)
        name = None if setup.memo is None else key(
            kind="short training", model=case.model, model_code=at_task.code_hash(), weights=weights.key,
            technique=case.technique, technique_code=case.tech.code_hash(), device=case.device,
            batch_size=case.batch_size, shape=at_task.input_shape, steps=setup.converge_steps, batch=batch,
            lr=at_task.recipe.lr, train=tensor_digest(task.train_x), labels=tensor_digest(task.train_y),
            held_out=tensor_digest(held_out[0]), **setup.memo_parts,
        )  # fmt: skip
        found = setup.memo.load(name) if setup.memo is not None and name else None
        if found is not None:  # the same code, technique and kernels trained it before
            result = Convergence(**found)
        else:
            result = short_training(
                prepare,
                at_task.build_model,
                (task.train_x, task.train_y),
                held_out,
                steps=setup.converge_steps,
                batch_size=batch,
                lr=at_task.recipe.lr,
                device=device,
            )
            if setup.memo is not None and name:
                setup.memo.save(name, asdict(result))
        measurement.columns.update(
            result.columns(),
            converge_cached=found is not None if setup.memo is not None else None,
            converge_task=task.name,
            accuracy_source=accuracy_source(task, "short training from scratch", always=True),
        )
    return measurement
