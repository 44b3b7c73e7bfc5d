"""`pytest bench/` in a subprocess, as a user runs it, with a throwaway cache: shared by the
end-to-end test files."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


SHARED_CEILINGS = Path(tempfile.mkdtemp(prefix="optbench-ceilings-"))
"""The machine's ceilings, measured by the first run of this test session that needed them and copied
into every fresh cache after it: they are not what these tests test (tests/test_ceilings.py is)."""
atexit.register(shutil.rmtree, SHARED_CEILINGS, ignore_errors=True)


def run_bench(
    *args: str, cwd: Path = ROOT, timeout: int = 900, cache: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    # Trained checkpoints go to the test's folder, never to the user's cache. A throwaway cache made
    # here is removed after the run (the caller never sees its path); a given one is the caller's.
    throwaway = cache is None
    if cache is None:
        cache = Path(tempfile.mkdtemp(prefix="optbench-cache-"))
        if any(SHARED_CEILINGS.iterdir()):
            shutil.copytree(SHARED_CEILINGS, cache / "ceilings", dirs_exist_ok=True)
    env = {**os.environ, "OPTBENCH_CACHE": str(cache), **(env or {})}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if not any(SHARED_CEILINGS.iterdir()) and (Path(env["OPTBENCH_CACHE"]) / "ceilings").is_dir():
            shutil.copytree(Path(env["OPTBENCH_CACHE"]) / "ceilings", SHARED_CEILINGS, dirs_exist_ok=True)
    finally:
        if throwaway:
            shutil.rmtree(cache, ignore_errors=True)
    return done
