"""`optbench selfcheck`: does the harness measure what simpler tools measure, at negligible cost?

For each check (a model, batch size and technique or stack), runs optbench's own pytest path, then
torch.utils.benchmark and a bare perf_counter loop on the very same prepared module, input tensors and
thread count, interleaved in rotating order, and prints the figures.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_BENCH = """
import pytest

@pytest.mark.optbench(mode="inference")
def test_inference(optbench_case, optbench_run):
    optbench_run(optbench_case)
"""

TARGET = "selfcheck_target"
IDENTITY = "selfcheck_identity"
"""A model that does nothing: its median under the harness bounds what the harness adds to a call."""


# (model, batch size, technique or stack, seconds per method and repeat): resnet18 small and fast,
# resnet50 at its deployment shape in fp32, and a stack users deploy.
CHECKS = (
    ("resnet18", 4, "eager", 2.0),
    ("resnet50", 8, "eager", 5.0),
    ("resnet50", 8, "channels_last+bf16_autocast", 5.0),
)


def _optbench_medians(
    batch_size: int, budget: float, workdir: Path, rep: int, technique: str, noop: bool
) -> dict[str, float]:
    import contextlib
    import io

    import pytest

    from optbench.results import load

    run_id = f"selfcheck-{technique}-{rep}"
    models = f"{TARGET},{IDENTITY}" if noop else TARGET
    output = io.StringIO()
    args = [
        "bench", "--models", models, "--techniques", technique, "--devices", "cpu",
        "--batch-sizes", str(batch_size), "--time-budget", str(budget), "--target-precision", "0.005",
        "--run-id", run_id, "-q", "-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir", str(workdir), "--weights", "random",
    ]  # fmt: skip
    # pytest-benchmark announces its JSON file on stderr: keep both streams out of the report.
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = pytest.main(args)
    if code != 0:
        raise RuntimeError(f"the optbench run failed with exit code {code}:\n{output.getvalue()[-3000:]}")
    frame = load(workdir / "results" / "runs" / run_id)
    frame = frame[frame["technique"] == technique].set_index("model")
    return {m: float(frame.loc[m, "latency_ms_median"]) for m in ((TARGET, IDENTITY) if noop else (TARGET,))}


def _register_targets(net: Any, inputs: tuple[Any, ...], spec: Any) -> None:
    import torch
    from torch import nn

    from optbench.catalog.models import MODELS, ModelSpec

    # optbench times this very module and these very tensors, as the other two methods do, so the
    # figures differ only in how they time (separate builds put a second variable in the comparison).
    for name, module, args in ((TARGET, net, inputs), (IDENTITY, nn.Identity(), (torch.zeros(1),))):
        MODELS.add(
            name,
            ModelSpec(
                name=name,
                task=spec.task,
                build=lambda n, m=module: m,
                make_inputs=lambda s, b, g, a=args: a,
                resolution=spec.resolution,
                seq_len=spec.seq_len,
                source=__file__,
            ),
            origin=__file__,
        )


def _prepared(net: Any, inputs: tuple[Any, ...], spec: Any, batch_size: int, technique: str) -> Any:
    """The technique applied to `net` as the runner applies it: the object the other methods time."""
    import torch

    from optbench.catalog.techniques import Prepared, TechniqueContext, load_techniques, resolve
    from optbench.measure.inference import SEED

    load_techniques()
    tech = resolve(technique)
    ctx = TechniqueContext(
        spec=spec, device=torch.device("cpu"), batch_size=batch_size, input_shape=spec.input_shape, seed=SEED
    ).for_technique(tech.name, tech.code_hash())
    return tech.apply(Prepared.eager(net, inputs), ctx)


def run_selfcheck(
    model: str = "resnet18",
    batch_size: int = 4,
    budget: float = 2.0,
    repeats: int = 6,
    technique: str = "eager",
) -> dict[str, Any]:
    import os

    import torch
    from torch.utils import benchmark as tbench

    from optbench.catalog.models import MODELS, load_zoo
    from optbench.measure.inference import SEED
    from optbench.measure.timing import time_calls

    load_zoo()
    spec = MODELS.get(model)
    torch.manual_seed(SEED)
    net = spec.build_model().eval()
    inputs = spec.example_inputs(batch_size, torch.Generator().manual_seed(SEED))
    threads = torch.get_num_threads()
    _register_targets(net, inputs, spec)
    # The no-op model runs eager only: techniques like channels_last do not apply to it.
    noop = technique == "eager"
    figures: dict[str, list[float]] = {"optbench": [], "torch_timer": [], "perf_counter_loop": []}
    if noop:
        figures["harness_noop"] = []
    # optbench applies the technique to this same module (in place for channels_last, which is
    # idempotent); the other two methods time the same prepared callable and inputs.
    prepared = _prepared(net, inputs, spec, batch_size, technique)
    forward, args = prepared.forward, prepared.inputs

    def optbench(rep: int, workdir: Path) -> None:
        medians = _optbench_medians(batch_size, budget, workdir, rep, technique, noop)
        figures["optbench"].append(medians[TARGET])
        if noop:
            figures["harness_noop"].append(medians[IDENTITY])

    def torch_timer(rep: int, workdir: Path) -> None:
        with torch.inference_mode():
            # torch.utils.benchmark defaults to one thread: give it the harness's count.
            timer = tbench.Timer("f(*args)", globals={"f": forward, "args": args}, num_threads=threads)
            figures["torch_timer"].append(timer.blocked_autorange(min_run_time=budget).median * 1e3)

    def perf_counter_loop(rep: int, workdir: Path) -> None:
        with torch.inference_mode():
            for _ in range(3):
                forward(*args)
            per_call = time_calls(lambda: forward(*args), 1)[0]
            rounds = max(10, int(budget / per_call))
            figures["perf_counter_loop"].append(
                statistics.median(time_calls(lambda: forward(*args), rounds)) * 1e3
            )

    methods = [optbench, torch_timer, perf_counter_loop]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "bench").mkdir()
        (workdir / "bench" / "test_inference.py").write_text(_BENCH)
        old_cwd = os.getcwd()
        os.chdir(workdir)
        try:
            for rep in range(repeats):
                # Rotate the order every repeat so a drifting machine does not favour one method.
                for method in methods[rep % 3 :] + methods[: rep % 3]:
                    method(rep, workdir)
        finally:
            os.chdir(old_cwd)
    summary = {name: statistics.median(values) for name, values in figures.items()}

    def paired(other: str) -> float:
        # Median of per-repeat ratios: each pair was measured seconds apart.
        return statistics.median(a / b for a, b in zip(figures["optbench"], figures[other], strict=True)) - 1

    return {
        "model": model,
        "technique": technique,
        "input_shape": spec.input_shape,
        "batch_size": batch_size,
        "threads": threads,
        "repeats": repeats,
        "figures_ms": figures,
        "median_ms": summary,
        "vs_torch_timer": paired("torch_timer"),
        "vs_perf_counter_loop": paired("perf_counter_loop"),
        "harness_overhead": summary["harness_noop"] / summary["optbench"] if noop else None,
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"selfcheck: {result['model']} {result['technique']}, {result['input_shape']}, batch "
        f"{result['batch_size']}, {result['threads']} threads, {result['repeats']} interleaved repeats"
    ]
    for name, values in result["figures_ms"].items():
        runs = ", ".join(f"{v:.4f}" for v in values)
        lines.append(f"  {name:18s} median {result['median_ms'][name]:10.4f} ms   runs: {runs}")
    lines += [
        f"  optbench vs torch.utils.benchmark (median of paired ratios): {result['vs_torch_timer']:+.2%}"
        f"  (target: within {AGREEMENT:.0%})",
        f"  optbench vs bare perf_counter loop (median of paired ratios): {result['vs_perf_counter_loop']:+.2%}",
    ]
    if result["harness_overhead"] is not None:
        lines.append(
            f"  harness cost per call (no-op model) / measured call: {result['harness_overhead']:.4%}"
            "  (target: < 1%)"
        )
    lines.append(f"  verdict: {'agrees' if agrees(result) else 'DISAGREES'} with torch.utils.benchmark")
    return "\n".join(lines)


AGREEMENT = 0.03
"""optbench's median and torch.utils.benchmark's must agree within this (median of paired ratios)."""


def agrees(result: dict[str, Any]) -> bool:
    return abs(result["vs_torch_timer"]) <= AGREEMENT


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="optbench selfcheck", description=__doc__)
    parser.add_argument("--model", default=None, help="check this model only (default: the built-in checks)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--technique", default="eager", help="a technique or '+' stack (with --model)")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timing per method and repeat")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    checks = [(args.model, args.batch_size, args.technique, args.budget)] if args.model else list(CHECKS)
    failing = 0
    for model, batch_size, technique, budget in checks:
        started = time.perf_counter()
        result = run_selfcheck(model, batch_size, budget, args.repeats, technique)
        failing += not agrees(result)
        print(report(result))
        print(f"  ({time.perf_counter() - started:.0f} s)")
        sys.stdout.flush()
    print(
        f"selfcheck: {'FAIL' if failing else 'pass'}: {len(checks) - failing} of {len(checks)} checks agree within {AGREEMENT:.0%}"
    )
    sys.stdout.flush()
    return 1 if failing else 0
