"""One timing run per machine at a time: two runs timing at once make each other's numbers
meaningless. A run takes an advisory lock in the cache folder for as long as it times cases; a second
run finds it held and warns in one line (or, with --wait-for-machine, waits for it)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import IO, Any

LOCK_NAME = "timing.lock"


class MachineLock:
    """The cache folder's timing lock: `acquire()` returns None when this run holds it, or a one-line
    warning naming the run that holds it (when not waiting)."""

    def __init__(self, cache_root: Path) -> None:
        self.path = cache_root / LOCK_NAME
        self._file: IO[str] | None = None

    def acquire(self, run_id: str, wait: bool = False, poll_s: float = 5.0) -> str | None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a+", encoding="utf-8")
        while True:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = self._holder()
                if not wait:
                    self._file.close()
                    self._file = None
                    return (
                        f"optbench: warning: another run is timing on this machine ({holder}); both runs' "
                        "numbers are unreliable: let it finish, or pass --wait-for-machine to wait for it"
                    )
                time.sleep(poll_s)
                continue
            self._file.seek(0)
            self._file.truncate()
            self._file.write(json.dumps({"pid": os.getpid(), "run_id": run_id, "since": time.time()}))
            self._file.flush()
            return None

    def _holder(self) -> str:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return "a run whose details are unreadable"
        since = time.strftime("%H:%M:%S", time.localtime(data.get("since", 0)))
        return f"run {data.get('run_id', '?')}, pid {data.get('pid', '?')}, since {since}"

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
