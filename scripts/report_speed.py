"""How long `optbench report` takes on a 500-row run, and how big its HTML is (issue targets: at most
5 s, at most 5 MB, no torch import). Prints figures; asserts nothing about time.

The 500 rows are a real run's rows repeated as other devices and batch sizes (new case ids), so the
report has twice the model/device groups of the real run and the real samples, intervals and
accuracies:

    python scripts/report_speed.py results/runs/RUN [--rows 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from optbench.results import COLUMN_NAMES, ResultsWriter, load


def blow_up(source: Path, rows: int, target: Path) -> int:
    frame = load(source)
    writer = ResultsWriter(target)
    written = 0
    copy = 0
    while written < rows:
        device = ("cpu", "cuda")[copy % 2]
        scale = copy // 2 + 1
        for record in frame.to_dict("records"):
            if written == rows:
                break
            record = {
                k: (None if v is pd.NA or (isinstance(v, float) and pd.isna(v)) else v)
                for k, v in record.items()
            }
            record["device"] = device
            if record.get("batch_size") is not None:
                record["batch_size"] = int(record["batch_size"]) * scale
            record["case_id"] = f"{record['model']}-{record['technique']}-{device}-bs{record['batch_size']}"
            writer.append({k: v for k, v in record.items() if k in COLUMN_NAMES or k == "samples_ms"})
            written += 1
        copy += 1
    writer.close()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", default="results/latest")
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="optbench-report-speed-"))
    try:
        run = work / "run"
        n = blow_up(Path(args.run), args.rows, run)
        code = (
            "import sys; from optbench.cli import main; rc = main(['report', sys.argv[1], '--out', sys.argv[2]]); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)"
        )
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", code, str(run), str(work / "out")],
                capture_output=True,
                text=True,
                check=True,
            )
            times.append(time.perf_counter() - start)
        html = work / "out" / "report.html"
        groups = load(run).groupby(["model", "device"]).ngroups
        print(f"rows: {n} ({groups} model/device groups) from {args.run}")
        print(
            f"optbench report, whole process: median {statistics.median(times):.2f} s of {args.repeat} "
            f"(min {min(times):.2f}, max {max(times):.2f}); {out.stdout.strip().splitlines()[-1]}"
        )
        print(
            f"report.html: {html.stat().st_size / 1e6:.2f} MB; report.md: {(work / 'out' / 'report.md').stat().st_size / 1e3:.0f} kB"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
