"""How much of a CPU step's time, and of its session-to-session spread, is glibc malloc's? Each case
runs in fresh processes (one per seed), once with glibc's defaults and once with M_MMAP_THRESHOLD and
M_TRIM_THRESHOLD raised at start-up (optbench.catalog.allocator.fix_thresholds: 1 GiB from glibc 2.35), so that large buffers are reused instead
of being mapped and faulted in anew at every step, which is what jemalloc and tcmalloc do by default.
The two modes alternate process by process. Prints each process's block medians; asserts nothing.

    python scripts/malloc_effect.py                      # lstm_train lstm_int8 r18_train r18_infer, seeds 0-2
    python scripts/malloc_effect.py --cases lstm_train --seeds 5

Only on Linux with glibc. The models are the zoo's LSTM classifier (batch 32, 64 tokens) and
torchvision's resnet18 (batch 2, 3x224x224), random weights; training steps use AdamW."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("lstm_train", "lstm_int8", "r18_train", "r18_infer")


def child(mode: str, case: str, seed: int) -> None:
    import time
    import warnings

    import torch
    import torchvision

    warnings.filterwarnings("ignore")
    if mode == "tuned":
        # The thresholds `pytest bench/ --malloc fixed` and `optbench ab` use.
        from optbench.catalog.allocator import fix_thresholds

        try:
            fix_thresholds()
        except RuntimeError as refused:
            raise SystemExit(str(refused)) from None
    sys.path.insert(0, str(ROOT / "models"))
    from lstm_classifier import LSTMClassifier

    torch.manual_seed(seed)
    if case.startswith("lstm"):
        model: torch.nn.Module = LSTMClassifier(4)
        x, y = torch.randint(0, 1000, (32, 64)), torch.randint(0, 4, (32,))
    else:
        model = torchvision.models.resnet18(num_classes=10)
        x, y = torch.randn(2, 3, 224, 224), torch.randint(0, 10, (2,))
    if case.endswith("train"):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def call() -> None:
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

        calls = 150
    else:
        model.eval()
        if case == "lstm_int8":
            model = torch.ao.quantization.quantize_dynamic(
                model, {torch.nn.LSTM, torch.nn.Linear}, dtype=torch.qint8
            )

        def call() -> None:
            with torch.inference_mode():
                model(x)

        calls = 300
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    size = calls // 6
    blocks = [
        statistics.median(times[k : k + size]) * 1e3 for k in range(size, calls, size)
    ]  # block 1: warm-up
    print(f"{statistics.median(blocks):.2f} " + " ".join(f"{b:.1f}" for b in blocks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--seeds", type=int, default=3, help="fresh processes per case and mode")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"malloc_effect: unknown case {unknown[0]!r}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    print("case         mode     seed  median ms  block medians (ms, blocks 2-6)")
    for case in cases:
        medians: dict[str, list[float]] = {"default": [], "tuned": []}
        for seed in range(args.seeds):
            for mode in ("default", "tuned"):
                done = subprocess.run(
                    [sys.executable, __file__, "--child", mode, case, str(seed)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                median, _, blocks = done.stdout.strip().splitlines()[-1].partition(" ")
                medians[mode].append(float(median))
                print(f"{case:12s} {mode:8s} {seed:4d}  {float(median):9.1f}  {blocks}", flush=True)
        d, t = medians["default"], medians["tuned"]
        print(
            f"{case}: default {min(d):.1f}-{max(d):.1f} ms across processes, tuned {min(t):.1f}-{max(t):.1f} ms; "
            f"tuned / default (medians) {statistics.median(t) / statistics.median(d):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
