"""Where a case's time goes: torch.profiler's top operators for a model under each technique, with
the weights and shapes a run times. For explaining a speedup that misses its target.

    python -m optbench.measure.top_ops --model bert_base_encoder --techniques eager,int8_dynamic --batch-size 2
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from optbench.errors import UsageProblem


def top_ops(model: str, technique: str, batch_size: int, calls: int, rows: int, weights: str) -> str:
    from optbench.catalog.models import MODELS, load_zoo
    from optbench.catalog.techniques import Prepared, TechniqueContext, load_techniques, resolve
    from optbench.catalog.weights import WeightsProvider

    load_zoo()
    load_techniques()
    spec = MODELS.get(model)
    provider = WeightsProvider(weights, progress=False)
    built = provider.get(spec)
    net = built.build(spec).eval()
    inputs = spec.example_inputs(batch_size, torch.Generator().manual_seed(0))
    tech = resolve(technique)
    reason = tech.supports(spec, "cpu", "inference")
    if reason:
        raise UsageProblem(f"{technique} does not apply to {model}: {reason}")
    ctx = TechniqueContext(
        spec=spec,
        device=torch.device("cpu"),
        batch_size=batch_size,
        input_shape=spec.input_shape,
        task=built.task,
        weights_key=built.key,
        cache_root=provider.cache_root,
        show_progress=False,
    ).for_technique(tech.name, tech.code_hash())
    prepared = tech.apply(Prepared.eager(net, inputs), ctx)
    with torch.inference_mode():
        for _ in range(3):  # warm up (and compile) outside the profile
            prepared.forward(*prepared.inputs)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                prepared.forward(*prepared.inputs)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    return f"== {model} {technique} batch {batch_size} at {spec.input_shape}, {calls} calls ==\n{table}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m optbench.measure.top_ops", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--techniques", default="eager", help="comma-separated techniques or stacks")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--weights", default="trained", choices=("random", "trained"))
    args = parser.parse_args(argv)
    try:
        for technique in args.techniques.split(","):
            print(top_ops(args.model, technique, args.batch_size, args.calls, args.rows, args.weights))
    except UsageProblem as error:
        print(f"optbench.measure.top_ops: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
