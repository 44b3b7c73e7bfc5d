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


SHARED = Path(tempfile.mkdtemp(prefix="optbench-shared-cache-"))
"""What every run of this test session has made that other runs may read instead of making it again:
the machine's ceilings, trained checkpoints, pruning's fine-tunes and calibrations, generated
datasets. Each file's name holds the key of everything that made it (code, recipe, data, seed,
torch), so a file is only ever read where it would have been made the same. These are not what the
end-to-end tests test (tests/test_ceilings.py, test_checkpoints.py, test_context.py and the smoke
run's own cache are); training the smoke zoo's two checkpoints alone is about 40 s a run."""
SHARED_FOLDERS = ("ceilings", "checkpoints", "prepared", "datasets")
atexit.register(shutil.rmtree, SHARED, ignore_errors=True)


def _share(source: Path, target: Path) -> None:
    """Copy into `target` what `source`'s shared folders hold and `target` lacks (never overwrite:
    a file's name is its key, so one of the same name holds the same thing)."""
    for folder in SHARED_FOLDERS:
        if not (source / folder).is_dir():
            continue
        for file in (source / folder).rglob("*"):
            dest = target / folder / file.relative_to(source / folder)
            half_made = ".tmp" in str(file.relative_to(source)) or file.suffix == ".unusable"
            if file.is_file() and not half_made and not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, dest)


def run_bench(
    *args: str, cwd: Path = ROOT, timeout: int = 900, cache: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    # Trained checkpoints go to the test's folder, never to the user's cache. A throwaway cache made
    # here starts with what earlier runs shared and is removed after the run (the caller never sees
    # its path); a given one is the caller's, starts as the caller left it (a test of training or of
    # caching gives its own), and shares what it made with later runs.
    throwaway = cache is None
    if cache is None:
        cache = Path(tempfile.mkdtemp(prefix="optbench-cache-"))
        _share(SHARED, cache)
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
        _share(Path(env["OPTBENCH_CACHE"]), SHARED)
    finally:
        if throwaway:
            shutil.rmtree(cache, ignore_errors=True)
    return done
