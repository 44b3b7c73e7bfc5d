"""Lockstep: a stand-alone pytest plugin that lets `optbench ab` run two pytest sessions (base and head)
one test item at a time, in an order the driver decides.

It imports only the standard library and pytest, never optbench: `optbench ab` copies this file into
a temporary folder, puts that folder on PYTHONPATH and loads it with `-p optbench_lockstep`, so it works
the same in a base commit whose optbench predates it. Without OPTBENCH_LOCKSTEP in the environment it
does nothing.

Protocol: the standard library's multiprocessing.connection. The session connects to the driver's
Listener on 127.0.0.1 with `Client(address, authkey=...)` (the address and the key, in hex, are in
the environment: the key proves the session is the driver's), then the two exchange dicts
(`send`/`recv`). After collection the session sends `hello` with its item node ids and receives a
`schedule` (indices into those items, repeats allowed: one per round) or `abort`. Then for each
scheduled step it waits for `go`, runs the item (setup, call, teardown) and answers `done`. After the
last step it waits for `quit` before pytest writes its summary, so that work never overlaps the other
session's measurement. If the driver goes away, the session stops.

Timing slices: when the schedule asks for `slices` > 1, `current_slicer()` gives the running test a
slicer; optbench's timer times at least `slices` x `rounds_per_slice` rounds and calls `pause(samples)` between timing rounds (untimed), which answers
`paused` with the number of samples timed so far and waits for the next `go`. The driver uses the
pauses to alternate base and head on one case every few samples, and the counts to pair their
samples slice by slice. A side whose optbench does not call it simply never pauses.
"""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Client
from typing import Any

import pytest

ENV = "OPTBENCH_LOCKSTEP"
"""host:port:side:authkey (hex) of the driver."""


class Slicer:
    """What a test's timer needs to hand the machine to the other side between timing rounds."""

    def __init__(self, channel: _Channel, step: int, slices: int, rounds_per_slice: int = 1) -> None:
        self.channel, self.step, self.slices = channel, step, slices
        self.rounds_per_slice = rounds_per_slice
        """The timer times at least slices x this many rounds."""

    def pause(self, samples: int) -> None:
        self.channel.send({"paused": self.step, "samples": samples})
        answer = self.channel.recv()
        if "go" not in answer:
            pytest.exit(f"optbench ab: the driver said {answer!r} during a pause; stopping", returncode=2)


_current: Slicer | None = None


def current_slicer() -> Slicer | None:
    """The slicer of the running step, or None (no slicing asked for, or not under `optbench ab`)."""
    return _current


class _Channel:
    def __init__(self, spec: str) -> None:
        host, port, self.side, key = spec.split(":", 3)
        self.conn = Client((host, int(port)), authkey=bytes.fromhex(key))

    def send(self, message: dict[str, Any]) -> None:
        self.conn.send(message)

    def recv(self) -> dict[str, Any]:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            pytest.exit("optbench ab: the driver went away; stopping", returncode=2)

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    spec = os.environ.get(ENV)
    if not spec or session.config.option.collectonly:
        return None
    channel = _Channel(spec)
    hello: dict[str, Any] = {"hello": channel.side, "pid": os.getpid()}
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        # Collection errors: say so, and let pytest's own loop report them and stop.
        channel.send({**hello, "error": f"{session.testsfailed} error(s) during collection"})
        channel.close()
        return None
    items = list(session.items)
    channel.send({**hello, "items": [item.nodeid for item in items]})
    answer = channel.recv()
    if "abort" in answer:
        session.shouldstop = str(answer["abort"])
        channel.close()
        return True
    global _current
    schedule = [int(i) for i in answer["schedule"]]
    slices = int(answer.get("slices", 0))
    rounds_per_slice = int(answer.get("rounds_per_slice", 1))
    for step, index in enumerate(schedule):
        channel.recv()  # "go": the other session is idle now
        item = items[index]
        # The item that runs next in this session decides which fixtures are torn down (a repeat of
        # the same item keeps module and session fixtures; a test in another module tears its own down).
        following = items[schedule[step + 1]] if step + 1 < len(schedule) else None
        failed_before = session.testsfailed
        started = time.perf_counter()
        _current = Slicer(channel, step, slices, rounds_per_slice) if slices > 1 else None
        try:
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=following)
        finally:
            _current = None
        stopped = session.shouldfail or session.shouldstop
        channel.send(
            {
                "done": step,
                "nodeid": item.nodeid,
                "failed": session.testsfailed > failed_before,
                "seconds": time.perf_counter() - started,
                "stopped": str(stopped) if stopped else None,
            }
        )
        if stopped:
            break
    channel.recv()  # "quit"
    channel.close()
    return True
