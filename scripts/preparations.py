"""Does one preparation of a technique speak for the technique? Prepares a case several times from
the same weights, in one process, and times each preparation against one eager model in interleaved
blocks; prints each preparation's speedup, asserts nothing. A timing job: run nothing else beside it.

    python scripts/preparations.py lstm_classifier int8_dynamic --batch-size 32 --preparations 6

Random (seeded) weights: speed only. Calibration, where a technique needs it, uses 64 seeded random
inputs. Behind optbench's two preparations for the compile and quantization families
(Technique.preparations; docs: harness-honesty, "One preparation is not the technique").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("technique")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--preparations", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds of 5 calls a side")
    options = parser.parse_args()

    from optbench.catalog.machine import machine_info
    from optbench.catalog.models import MODELS, load_zoo
    from optbench.catalog.techniques import Prepared, TechniqueContext, load_techniques, resolve

    load_zoo()
    load_techniques()
    info = machine_info()
    print(f"machine: {info['cpu']} cpu {info['cpu_id']}, torch capability {info['cpu_capability']}, "
          f"ISA {info['cpu_isa']}, {info['cores']} cores, torch {info['torch']}")  # fmt: skip
    spec, tech = MODELS.get(options.model), resolve(options.technique)
    torch.manual_seed(0)
    base = spec.build_model().eval()
    inputs = spec.example_inputs(options.batch_size, torch.Generator().manual_seed(0))
    cache = Path(tempfile.mkdtemp(prefix="optbench-preparations-"))

    def prepare():
        model = spec.build_model().eval()
        model.load_state_dict(base.state_dict())
        ctx = TechniqueContext(spec=spec, device=torch.device("cpu"), batch_size=options.batch_size,
                               input_shape=spec.input_shape, show_progress=False, calibration_samples=64,
                               cache_root=cache)  # fmt: skip
        return tech.apply(
            Prepared.eager(model, inputs), ctx.for_technique(tech.name, tech.code_hash())
        ).forward

    def median_ms(call, n: int = 5) -> float:
        out = []
        for _ in range(n):
            started = time.perf_counter()
            call(*inputs)
            out.append(time.perf_counter() - started)
        return statistics.median(out) * 1e3

    speedups = []
    with torch.inference_mode():
        for _ in range(5):
            base(*inputs)
        for k in range(options.preparations):
            forward = prepare()
            for _ in range(5):
                forward(*inputs)
            ratios, case_ms, eager_ms = [], [], []
            for _ in range(options.rounds):
                case_ms.append(median_ms(forward))
                eager_ms.append(median_ms(base))
                ratios.append(eager_ms[-1] / case_ms[-1])
            speedups.append(statistics.median(ratios))
            print(f"{options.model} {options.technique} preparation {k + 1}: case {statistics.median(case_ms):.2f} ms, "
                  f"eager {statistics.median(eager_ms):.2f} ms, speedup {speedups[-1]:.3f}", flush=True)  # fmt: skip
            del forward
    print(
        f"speedups {min(speedups):.3f} to {max(speedups):.3f}: highest / lowest {max(speedups) / min(speedups):.3f}"
    )


if __name__ == "__main__":
    main()
