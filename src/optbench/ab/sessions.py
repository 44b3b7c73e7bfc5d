"""`optbench ab`'s two pytest sessions: starting them (the lockstep plugin copied beside them), the
connection to each, reading their rows, and stopping them, their processes and the driver's signals.

The connection is the standard library's multiprocessing.connection: a Listener on 127.0.0.1 with a
random `authkey` (each session proves it knows the key, handed over in its environment, before a
message is read) and one Connection per session carrying dicts. The lockstep plugin
(optbench/ab/lockstep.py) is the other end. No torch, no pytest."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from optbench.ab.options import AbOptions
from optbench.ab.pooling import SessionRow
from optbench.ab.worktree import MEMO_TREE_ENV
from optbench.errors import UsageProblem

PLUGIN_MODULE = "optbench_lockstep"
"""The lockstep plugin's module name in each session (`-p optbench_lockstep`)."""
ENV = "OPTBENCH_LOCKSTEP"
"""host:port:side:authkey (hex) of the driver, in each session's environment (lockstep.ENV)."""


class Channel:
    """One side's connection, read with a timeout and with the session's process watched."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def send(self, message: dict[str, Any]) -> None:
        self.conn.send(message)

    def recv(self, timeout: float, alive: Callable[[], bool] | None = None) -> dict[str, Any] | None:
        """The next message; None when the peer closed the connection, its process ended (alive()
        is False) or `timeout` seconds passed."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                if self.conn.poll(min(1.0, left)):
                    message = self.conn.recv()
                    return message if isinstance(message, dict) else None
            except (EOFError, OSError):
                return None
            if alive is not None and not alive():
                return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()


class Server:
    """Where the sessions connect. Listener.accept() blocks (and checks the key) with no timeout, so
    a thread accepts and hands connections over; the driver waits on them with a timeout, watching
    the sessions' processes meanwhile."""

    def __init__(self) -> None:
        self.authkey = secrets.token_bytes(32)
        self.listener = Listener(("127.0.0.1", 0), backlog=8, authkey=self.authkey)
        self.accepted: queue.Queue[Connection] = queue.Queue()
        self.closing = False
        self.thread = threading.Thread(target=self._accept, name="optbench-ab-accept", daemon=True)
        self.thread.start()

    def spec(self, side: str) -> str:
        """What the lockstep plugin of `side` reads from ENV."""
        host, port = self.listener.address
        return f"{host}:{port}:{side}:{self.authkey.hex()}"

    def _accept(self) -> None:
        while not self.closing:
            try:
                conn = self.listener.accept()
            except Exception:  # a peer without the key, one that hung up at once, or closing
                time.sleep(0.05)
                continue
            self.accepted.put(conn)

    def next(self, timeout: float) -> Channel | None:
        """The next authenticated connection, None after `timeout` seconds without one."""
        try:
            return Channel(self.accepted.get(timeout=timeout))
        except queue.Empty:
            return None

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):  # wakes accept(): a peer that hangs up at once
            socket.create_connection(self.listener.address, timeout=1).close()
        self.thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self.listener.close()
        while not self.accepted.empty():
            Channel(self.accepted.get_nowait()).close()


@dataclass
class Side:
    name: str
    sha: str
    cwd: Path
    env: dict[str, str]
    raw: Path
    """--results-dir of this side's session; its rows land in raw/runs/<name>/."""
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    conn: Channel | None = None
    items: list[str] = field(default_factory=list)
    rows: list[SessionRow] = field(default_factory=list)
    """Every row the session wrote, with its round, test item and slice ends."""
    offset: int = 0
    dead: str | None = None
    """Why this session stopped before its schedule ended."""
    crashed_on: str | None = None
    """The item it was running when it crashed or hung (not set when pytest stopped on request, -x)."""
    returncode: int | None = None

    @property
    def results(self) -> Path:
        return self.raw / "runs" / self.name / "results.jsonl"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def read_rows(self, round_: int, nodeid: str, slice_ends: list[int] | None = None) -> None:
        """Rows appended since the last step (the results file is flushed after every row), with the
        sample counts at which the step's timer paused."""
        if not self.results.exists():
            return
        with self.results.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if line.strip():
                self.rows.append(SessionRow.arrived(json.loads(line), round_, nodeid, slice_ends))


@dataclass
class Measured:
    """One pair of sessions' work."""

    sides: dict[str, Side]
    common: list[str]
    """The test items both sides ran."""
    item_seconds: dict[str, float]
    """Wall seconds per test item, both sides together."""
    start_s: float
    """Seconds the two sessions took to start and collect."""


@dataclass
class Setup:
    """What starting a pair of sessions takes: the same for the measurement and its confirmation."""

    options: AbOptions
    pytest_args: list[str]
    shas: dict[str, str]
    cwds: dict[str, Path]
    imports: dict[str, list[str]]
    """PYTHONPATH entries ahead of the lockstep plugin's folder, per side."""
    env: dict[str, str]
    plugin_dir: Path
    alpha: float = 0.01
    """The gate's alpha: with it, the pairs each case gets must make a regression reachable."""
    trees: dict[str, str | None] = field(default_factory=dict)
    """Which code each side runs (worktree.tree_id), for its session's reuse of evaluations; None or
    absent: that session reuses none."""


def copy_plugin(folder: Path) -> Path:
    """The lockstep plugin, copied into `folder` as PLUGIN_MODULE (it imports no optbench, so it runs
    the same in a base commit whose optbench predates it)."""
    folder.mkdir()
    shutil.copyfile(Path(__file__).with_name("lockstep.py"), folder / f"{PLUGIN_MODULE}.py")
    return folder


def short(nodeid: str) -> str:
    """A test item's parameters (its case id), or the whole node id."""
    return nodeid.split("[", 1)[1].rstrip("]") if "[" in nodeid else nodeid


def _pythonpath(entries: list[str], env: dict[str, str]) -> str:
    return os.pathsep.join([*entries, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])


@contextlib.contextmanager
def running(setup: Setup, out: Path) -> Iterator[dict[str, Side]]:
    """Start a fresh pair of sessions (logs and raw rows under `out`), both at once, and yield them
    once both have collected and said hello; both are stopped when the block ends, however it ends."""
    sides: dict[str, Side] = {}
    server = Server()
    try:
        for name in ("base", "head"):
            side_env = {
                **{k: v for k, v in setup.env.items() if k != MEMO_TREE_ENV},
                "PYTHONPATH": _pythonpath([*setup.imports[name], str(setup.plugin_dir)], setup.env),
                ENV: server.spec(name),
            }
            if setup.trees.get(name):
                side_env[MEMO_TREE_ENV] = str(setup.trees[name])
            sides[name] = Side(
                name, setup.shas[name], setup.cwds[name], side_env, out / "raw" / name, out / f"{name}.log"
            )
        for side in sides.values():  # both start and collect at once: nothing is measured yet
            command = [
                sys.executable, "-m", "pytest", *setup.pytest_args, "-p", PLUGIN_MODULE, "-p", "no:cacheprovider",
                "--results-dir", str(side.raw), "--run-id", side.name,
            ]  # fmt: skip
            with side.log.open("wb") as log:
                side.proc = subprocess.Popen(
                    command,
                    cwd=side.cwd,
                    env=side.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches the driver, which ends them in order
                )
        _connect(server, sides, setup.options.start_timeout)
        yield sides
    finally:
        with uninterruptible():
            for side in sides.values():
                stop(side)
            server.close()


def _why_exited(side: Side) -> str:
    text = side.log.read_text(errors="replace") if side.log.exists() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line for line in lines if line.startswith("ERROR:")), None)
    error = error or next((line for line in reversed(lines) if line.startswith("E ")), None)
    error = error or (lines[-1] if lines else "no output")
    code = side.proc.poll() if side.proc else None
    return f"the {side.name} session ({side.sha[:12]}) exited with code {code} before running anything: {error} (log: {side.log})"


def _connect(server: Server, sides: dict[str, Side], timeout: float) -> None:
    """Wait for both sessions to collect and say hello; a session that dies first is one line."""
    pending = dict(sides)
    deadline = time.monotonic() + timeout
    while pending:
        for side in (s for s in (sides["head"], sides["base"]) if s.name in pending):
            if not side.alive():
                if side.name == "base":
                    time.sleep(1.0)  # the same bad argument fails head too: name head's error then
                    if not sides["head"].alive() and "head" in pending:
                        raise UsageProblem(_why_exited(sides["head"]))
                raise UsageProblem(_why_exited(side))
        if time.monotonic() > deadline:
            raise UsageProblem(f"the sessions did not finish collecting within {timeout:g} s")
        conn = server.next(0.5)
        if conn is None:
            continue
        hello = conn.recv(30.0)
        if not hello or hello.get("hello") not in pending:
            conn.close()
            continue
        side = pending.pop(hello["hello"])
        side.conn = conn
        if "error" in hello:
            raise UsageProblem(
                f"the {side.name} session ({side.sha[:12]}): {hello['error']} (log: {side.log})"
            )
        side.items = list(hello["items"])


def stop(side: Side) -> None:
    """End a session and everything it started (its own process group)."""
    if side.conn is not None:
        side.conn.close()
    proc = side.proc
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run like Ctrl-C does, so the cleanup always runs."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if _main_thread():
        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    else:
        previous = {}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """Cleanup runs to its end even if Ctrl-C is pressed again."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
