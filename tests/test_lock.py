"""Two runs timing on one machine at once: the second one is told, in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from optbench.pytest_plugin.lock import MachineLock


def test_a_second_run_is_warned_while_the_first_holds_the_lock(tmp_path):
    first = MachineLock(tmp_path)
    assert first.acquire("run-a") is None
    # Another process (flock locks are per open file, so a second process is the real test).
    code = textwrap.dedent(f"""
        from pathlib import Path
        from optbench.pytest_plugin.lock import MachineLock
        print(MachineLock(Path({str(tmp_path)!r})).acquire("run-b"))
    """)
    held = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert held.startswith("optbench: warning: another run is timing on this machine (run run-a, pid ")
    assert "--wait-for-machine" in held and held.count("\n") == 1
    first.release()
    free = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert free.strip() == "None"
