"""`optbench ab`: base and head measured interleaved on one machine, then gated on paired ratios.

The base ref is checked out into a temporary git worktree (the user's working tree, index and HEAD are
never touched). One pytest session per side starts once; a stand-alone lockstep plugin
(optbench/gate/lockstep.py) makes each run the test items the driver names, one at a time: item i on
base, then item i on head (who goes first alternates by item and by round). Within an item the two
take turns again: each side's timer pauses between slices of its timing rounds (ABBA order), so the
two sides' slices pair up moments apart. Only one side measures at any moment, so slow drift and a
noisy neighbour hit both sides alike.

Each side's rows are split by round (rounds/<side>-<r>/) and pooled per case (base/, head/). The
verdicts are `optbench compare`'s on the pooled samples, except latency (`latency_ms`), judged on the
pairs of slices (optbench/gate/paired.py). No torch is imported here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optbench.errors import UsageProblem

if TYPE_CHECKING:
    from optbench.gate.paired import Pair

EXIT_OK, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 130
DEFAULT_ROUNDS = 1
DEFAULT_SLICES = 16
DEFAULT_SLICE_ROUNDS = 3
OWNED_OPTIONS = ("--results-dir", "--run-id", "--optbench-compare")
"""pytest options `optbench ab` sets itself for each side."""
PLUGIN_MODULE = "optbench_lockstep"
GATED = "latency_ms"
"""The latency metric A/B gates on. Both sides run on one machine, interleaved, so absolute latency
needs no normalizing; latency_vs_eager and latency_vs_reference divide all of a case's samples by one
other measured number, whose own noise shifts the whole distribution (a false alarm on identical code
in our measurements), so they are not computed here."""
NORMALIZERS = ("baseline_latency_ms", "reference_ms")


@dataclass
class AbOptions:
    base: str
    rounds: int = DEFAULT_ROUNDS
    slices: int = DEFAULT_SLICES
    """Each case's timing rounds are cut into this many slices, base and head alternating (ABBA)."""
    slice_rounds: int = DEFAULT_SLICE_ROUNDS
    """... each of at least this many timing rounds (a case is timed at least slices x this)."""
    out: Path | None = None
    config: Path | None = None
    markdown: Path | None = None
    json: Path | None = None
    pytest_args: list[str] = field(default_factory=list)
    confirm_budget: float = 600.0
    """Seconds the confirmation (flagged latency regressions measured again in fresh sessions) may
    take; 0: none (a flagged regression then fails unconfirmed)."""
    step_timeout: float = 1800.0
    """Seconds one test item may take before its session is declared hung and stopped."""
    start_timeout: float = 900.0
    """Seconds both sessions may take to start and collect."""


class _Conn:
    """One side's JSON-lines connection, read with a timeout and with the process watched."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float, alive: Any = None) -> dict[str, Any] | None:
        """The next message; None when the peer closed the connection, its process ended (alive()
        is False) or `timeout` seconds passed."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], min(1.0, left))
            if not ready:
                if alive is not None and not alive():
                    return None
                continue
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


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
    conn: _Conn | None = None
    items: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    """Every row the session wrote, tagged with `_round` and `_nodeid`."""
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
        """Rows appended since the last step (the results file is flushed after every row); the
        sample counts at which the step's timer paused ride along as `_slice_ends`."""
        if not self.results.exists():
            return
        with self.results.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if line.strip():
                row = json.loads(line)
                # An eager baseline the selection left out is measured inside the item, unpaced: the
                # pauses belong to the item's own (selected) case only.
                ends = (slice_ends or []) if row.get("selected", True) else []
                self.rows.append({**row, "_round": round_, "_nodeid": nodeid, "_slice_ends": ends})


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageProblem("optbench ab needs git, and git is not installed") from None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def resolve_commit(ref: str, cwd: Path) -> str:
    """The full sha of `ref`; a ref that names no commit is one line."""
    found = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd)
    if found.returncode != 0 or not found.stdout.strip():
        raise UsageProblem(
            f"base ref {ref!r} is not a commit in this repository (git rev-parse found nothing)"
        )
    return found.stdout.strip()


def check_pytest_args(args: list[str]) -> list[str]:
    for arg in args:
        for option in OWNED_OPTIONS:
            if arg == option or arg.startswith(option + "="):
                raise UsageProblem(f"{option} is set by optbench ab for each side; leave it out (use --out)")
    return args or ["bench/"]


_BOOT = '''"""Written by optbench ab: this interpreter imports optbench from the base worktree (an editable install
in SITE) ahead of head's own install, then runs the sitecustomize this file shadows, if any."""
import importlib.machinery, importlib.util, os, sys

SITE = {site!r}
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SITE)  # base's distribution metadata (entry points) before head's
for _pth in sorted(f for f in os.listdir(SITE) if f.endswith(".pth")):
    for _line in open(os.path.join(SITE, _pth)).read().splitlines():
        _line = _line.strip()
        if _line and not _line.startswith(("#", "import")):
            sys.path.insert(0, _line if os.path.isabs(_line) else os.path.join(SITE, _line))
for _name in sorted(f for f in os.listdir(SITE) if f.startswith("__editable__") and f.endswith("_finder.py")):
    _spec = importlib.util.spec_from_file_location("_optbench_ab_base_" + _name[:-3], os.path.join(SITE, _name))
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    _before = list(sys.meta_path)
    _module.install()
    for _finder in [f for f in sys.meta_path if f not in _before]:
        sys.meta_path.remove(_finder)
        sys.meta_path.insert(0, _finder)  # ahead of head's finder, appended at start-up
_other = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") not in (HERE, SITE)]
)
if _other is not None and _other.loader is not None:
    _shadowed = importlib.util.module_from_spec(_other)
    _other.loader.exec_module(_shadowed)
'''


def _optbench_home() -> Path:
    import optbench

    return Path(optbench.__file__).resolve().parent


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _base_imports(worktree: Path, tmp: Path, env: dict[str, str]) -> tuple[list[str], str]:
    """PYTHONPATH entries that make the base session run base's optbench, and a note saying which.

    Only when optbench itself is part of this repository (head imports it from the working tree) is
    anything installed: base's optbench, editable, into a temporary folder (no dependencies: they are
    head's, already installed). In a user's repository both sides use the installed optbench."""
    home = _optbench_home()
    toplevel = Path(_git(["rev-parse", "--show-toplevel"], worktree).stdout.strip() or worktree)
    head_top = Path(_git(["rev-parse", "--show-toplevel"], Path.cwd()).stdout.strip() or Path.cwd())
    if not _inside(home, head_top):
        return [], f"both sides use the installed optbench ({home}); the A/B compares this repository's code"
    site, boot = tmp / "base-site", tmp / "base-boot"
    boot.mkdir()
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-compile", "--disable-pip-version-check", "--target", str(site), "-e", str(toplevel)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if install.returncode != 0:
        why = _first_line(install.stderr[-2000:]) or f"pip exited with code {install.returncode}"
        raise UsageProblem(
            f"could not install base's optbench from {toplevel} (pip install -e --target): {why}"
        )
    (boot / "sitecustomize.py").write_text(_BOOT.format(site=str(site)), encoding="utf-8")
    probe = subprocess.run(
        [sys.executable, "-c", "import optbench; print(optbench.__file__)"],
        cwd=worktree, capture_output=True, text=True,
        env={**env, "PYTHONPATH": os.pathsep.join([str(boot), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)},
    )  # fmt: skip
    found = Path(probe.stdout.strip() or "/nonexistent")
    if probe.returncode != 0 or not _inside(found, toplevel):
        raise UsageProblem(
            f"base's optbench is not the one imported in the base session (it imports {found})"
        )
    return [str(boot)], f"base runs base's optbench ({found.parent}), head runs {home}"


def _pythonpath(entries: list[str], env: dict[str, str]) -> str:
    return os.pathsep.join([*entries, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])


def _why_exited(side: Side) -> str:
    text = side.log.read_text(errors="replace") if side.log.exists() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line for line in lines if line.startswith("ERROR:")), None)
    error = error or next((line for line in reversed(lines) if line.startswith("E ")), None)
    error = error or (lines[-1] if lines else "no output")
    code = side.proc.poll() if side.proc else None
    return f"the {side.name} session ({side.sha[:12]}) exited with code {code} before running anything: {error} (log: {side.log})"


def _connect(server: socket.socket, sides: dict[str, Side], token: str, timeout: float) -> None:
    """Wait for both sessions to collect and say hello; a session that dies first is one line."""
    pending = dict(sides)
    deadline = time.monotonic() + timeout
    server.settimeout(0.5)
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
        try:
            sock, _ = server.accept()
        except TimeoutError:
            continue
        conn = _Conn(sock)
        hello = conn.recv(30.0)
        if not hello or hello.get("token") != token or hello.get("hello") not in pending:
            conn.close()
            continue
        side = pending.pop(hello["hello"])
        side.conn = conn
        if "error" in hello:
            raise UsageProblem(
                f"the {side.name} session ({side.sha[:12]}): {hello['error']} (log: {side.log})"
            )
        side.items = list(hello["items"])


def plan(
    base_items: list[str], head_items: list[str], rounds: int, only: list[str] | None = None
) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(side, round, nodeid) steps and the items both sides have: each round every common item on
    both sides back to back, who goes first alternating by item and by round; then the items one side
    has, once. With `only` (a confirmation), just the common items named there."""
    base_set = set(base_items)
    common = [n for n in head_items if n in base_set and (only is None or n in only)]
    if only is not None:
        return plan(common, common, rounds)[0], common
    steps: list[tuple[str, int, str]] = []
    for r in range(1, rounds + 1):
        for i, nodeid in enumerate(common):
            order = ("base", "head") if (i + r) % 2 else ("head", "base")
            steps += [(order[0], r, nodeid), (order[1], r, nodeid)]
    head_set = set(head_items)
    steps += [("base", 1, n) for n in base_items if n not in head_set]
    steps += [("head", 1, n) for n in head_items if n not in base_set]
    return steps, common


def _short(nodeid: str) -> str:
    return nodeid.split("[", 1)[1].rstrip("]") if "[" in nodeid else nodeid


def _execute(
    sides: dict[str, Side],
    steps: list[tuple[str, int, str]],
    timeout: float,
    slices: int = 0,
    slice_rounds: int = 1,
) -> dict[str, float]:
    """Run the steps; returns the wall seconds each test item took, both sides and all rounds."""
    schedules: dict[str, list[int]] = {"base": [], "head": []}
    for name, _, nodeid in steps:
        schedules[name].append(sides[name].items.index(nodeid))
    for name, side in sides.items():
        assert side.conn is not None
        side.conn.send({"schedule": schedules[name], "slices": slices, "rounds_per_slice": slice_rounds})
    counters = {"base": 0, "head": 0}
    seconds: dict[str, float] = {}
    i = 0
    while i < len(steps):
        name, round_, nodeid = steps[i]
        pair = i + 1 < len(steps) and steps[i + 1][1:] == (round_, nodeid) and steps[i + 1][0] != name
        group = [steps[i], steps[i + 1]] if pair else [steps[i]]
        began = time.monotonic()
        _run_together(sides, group, counters, timeout, (i + 1, len(steps)))
        seconds[nodeid] = seconds.get(nodeid, 0.0) + time.monotonic() - began
        i += len(group)
    for side in sides.values():  # both finish (summary, files) only now: nothing is measuring
        if side.conn is not None and side.alive():
            with contextlib.suppress(OSError):
                side.conn.send({"quit": True})
    for side in sides.values():
        if side.proc is not None:
            try:
                side.returncode = side.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                _stop(side)
                side.returncode = side.proc.poll()
    return seconds


def _turns(first: str, second: str) -> Iterator[str]:
    """first, second, second, first, first, second, ...: each pair of timing slices in ABBA order, so
    a steady drift favours neither side."""
    while True:
        yield from (first, second, second, first)


def _run_together(
    sides: dict[str, Side],
    group: list[tuple[str, int, str]],
    counters: dict[str, int],
    timeout: float,
    position: tuple[int, int],
) -> None:
    """Run one item on one side, or on both (the same item and round): each side runs until its timer
    pauses at a slice end or the item is done, and the turn passes to the other side (ABBA). Only one
    side is busy at any moment. A side whose timer never pauses runs its item in one turn."""
    _, round_, nodeid = group[0]
    names = [name for name, _, _ in group]
    finished = {name: sides[name].dead is not None for name in names}
    ends: dict[str, list[int]] = {name: [] for name in names}
    order = _turns(names[0], names[-1])
    while not all(finished.values()):
        name = next(order)
        if finished[name]:
            continue
        side = sides[name]
        assert side.conn is not None
        if not ends[name]:  # the step's first turn (later turns resume a pause)
            side.conn.send({"go": counters[name]})
            counters[name] += 1
        else:
            side.conn.send({"go": counters[name] - 1})
        message = side.conn.recv(timeout, side.alive)
        if message is not None and "paused" in message:
            ends[name].append(int(message["samples"]))
            continue
        finished[name] = True
        side.read_rows(round_, nodeid, ends[name])
        if message is None:
            side.crashed_on = nodeid
            side.dead = (
                f"stopped responding after {timeout:g} s on {nodeid}"
                if side.alive()
                else f"pytest exited (code {side.proc.poll() if side.proc else None}) while running {nodeid}"
            )
            print(f"optbench ab: the {name} session {side.dead} (log: {side.log})", file=sys.stderr)
            _stop(side)
            continue
        outcome = "failed" if message.get("failed") else "ok"
        sliced = f", {len(ends[name]) + 1} slices" if ends[name] else ""
        print(
            f"optbench ab: [{position[0]}/{position[1]}] round {round_} {name:4} {_short(nodeid)} "
            f"{message.get('seconds', 0):.1f}s {outcome}{sliced}",
            file=sys.stderr,
            flush=True,
        )
        if message.get("stopped"):
            side.dead = f"pytest stopped early: {message['stopped']}"


def _stop(side: Side) -> None:
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


# ---- pooling and verdicts ----------------------------------------------------------------------


def _numbers(row: dict[str, Any]) -> list[float]:
    samples = row.get("samples_ms")
    return [float(s) for s in samples] if isinstance(samples, list) else []


def pool(rows: list[dict[str, Any]], profile: str | None) -> list[dict[str, Any]]:
    """One row per case: the samples of every round together and the latency columns computed from
    them; other columns from the first round (from the first round that did not pass, if any)."""
    import statistics

    from optbench.matrix.profiles import PROFILES, TimingPolicy
    from optbench.results.derive import latency_stats, speedup_interval

    policy = PROFILES[profile].timing if profile in PROFILES else TimingPolicy()
    by_case: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(str(row["case_id"]), []).append(row)
    pooled: dict[str, dict[str, Any]] = {}
    for case_id, runs in by_case.items():
        bad = [r for r in runs if r.get("status") != "passed"]
        row = {k: v for k, v in (bad[0] if bad else runs[0]).items() if not k.startswith("_")}
        samples = [s for r in runs for s in _numbers(r)] if not bad else _numbers(row)
        if samples:
            row.update(latency_stats([s / 1e3 for s in samples], policy))
            row["samples_ms"] = samples
        references = [float(r["reference_ms"]) for r in runs if r.get("reference_ms")]
        if references and not bad:  # the fixed workload timed beside the case, once per round
            row["reference_ms"] = statistics.median(references)
        pooled[case_id] = row
    for row in pooled.values():  # speedup against the pooled eager case of the same side
        base = pooled.get(str(row.get("baseline_case_id")))
        if (
            not base
            or not base.get("samples_ms")
            or not row.get("samples_ms")
            or row.get("status") != "passed"
        ):
            continue
        row["baseline_latency_ms"] = base["latency_ms_median"]  # as the runner does, data rows too
        statistic = "mean" if row.get("mode") == "data" else "median"
        if base is row:
            continue
        row["speedup"] = base[f"latency_ms_{statistic}"] / row[f"latency_ms_{statistic}"]
        row["speedup_ci95_low"], row["speedup_ci95_high"] = speedup_interval(
            base["samples_ms"], row["samples_ms"], statistic
        )
        if row.get("batch_size") and statistic == "median":
            row["throughput"] = row["batch_size"] / (row["latency_ms_median"] / 1e3)
    return list(pooled.values())


def paired_slices(base_rows: list[dict[str, Any]], head_rows: list[dict[str, Any]]) -> dict[str, list[Pair]]:
    """Per case, (base samples, head samples) pairs: slice by slice where both sides' timers paused
    alike, otherwise one pair per round both sides passed; in round order."""
    from optbench.gate.paired import pair_slices

    def index(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
        return {(str(r["case_id"]), int(r["_round"])): r for r in rows}

    base, head = index(base_rows), index(head_rows)
    pairs: dict[str, list[Pair]] = {}
    for (case_id, round_), h in sorted(head.items(), key=lambda kv: kv[0][1]):
        b = base.get((case_id, round_))
        if b is None or b.get("status") != "passed" or h.get("status") != "passed":
            continue
        bs, hs = _numbers(b), _numbers(h)
        if not (bs and hs):
            continue
        sliced = pair_slices(bs, b.get("_slice_ends") or [], hs, h.get("_slice_ends") or [])
        pairs.setdefault(case_id, []).extend(sliced or [(bs, hs)])
    return pairs


def _code_changes(base: Any, head: Any) -> list[str]:
    """Cases whose model or technique code differs between base and head (what A/B measures)."""
    changed = []
    base_hashes = {
        str(r["case_id"]): (r.get("model_code_hash"), r.get("technique_code_hash"))
        for _, r in base.iterrows()
    }
    for _, r in head.iterrows():
        before = base_hashes.get(str(r["case_id"]))
        if before is None:
            continue
        what = [
            name
            for name, old, new in zip(
                ("model", "technique"),
                before,
                (r.get("model_code_hash"), r.get("technique_code_hash")),
                strict=True,
            )
            if str(old) != str(new)
        ]
        if what:
            changed.append(f"`{r['case_id']}` ({' and '.join(what)} code)")
    return changed


def _write_run(
    folder: Path, rows: list[dict[str, Any]], manifest: dict[str, Any] | None, run_id: str
) -> None:
    from optbench.results import COLUMN_NAMES, JSON_ONLY, ResultsWriter

    known = set(COLUMN_NAMES) | set(JSON_ONLY)
    writer = ResultsWriter(folder)
    try:
        for row in rows:
            writer.append({k: v for k, v in row.items() if k in known})
    finally:
        writer.close()
    if manifest is not None:
        data = {**manifest, "run_id": run_id, "cases": [str(r["case_id"]) for r in rows]}
        (folder / "run.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _manifest(side: Side) -> dict[str, Any] | None:
    path = side.results.parent / "run.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _pairs_markdown(ratios: dict[str, list[float]], config: Any) -> list[str]:
    import statistics

    from optbench.gate.paired import MIN_PAIRS

    if not ratios:
        return []
    lines = [
        "",
        "### Paired ratios",
        "",
        "Head's median latency over base's in each pair of timing slices (or each round, where a side "
        "could not slice), the two measured moments apart on this machine. A latency change fails only "
        "when the one-sided signed-rank test on the pairs is significant after correction, the median "
        "ratio passes the A/B threshold, and it holds when a fresh pair of sessions measures it again "
        "(both measurements weighed together; the fresh one must lean slower). (In "
        "the verdicts above, baseline and this run are the pooled medians; the latency ratio and its "
        "interval are the pairs'.)",
        "",
        "| case | pairs | median | range | past the threshold |",
        "|---|---|---|---|---|",
    ]
    for case_id in sorted(ratios):
        found = ratios[case_id]
        if not found:
            continue
        t = config.for_case(case_id)
        slower = 1 + (t.ab_latency_pct if len(found) >= MIN_PAIRS else t.latency_pct) / 100
        up, down = sum(r > slower for r in found), sum(r < 1 / slower for r in found)
        past = f"{up} slower, {down} faster" if up or down else "none"
        lines.append(
            f"| `{case_id}` | {len(found)} | {statistics.median(found):.3f} | "
            f"{min(found):.3f} to {max(found):.3f} | {past} |"
        )
    return lines


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run like Ctrl-C does, so the cleanup below always runs."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading_main():
        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    else:
        previous = {}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    """Cleanup runs to its end even if Ctrl-C is pressed again."""
    if not threading_main():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _remove_worktree(repo: Path, worktree: Path) -> None:
    if worktree.exists():
        removed = _git(["worktree", "remove", "--force", str(worktree)], repo)
        if removed.returncode != 0:
            shutil.rmtree(worktree, ignore_errors=True)
    _git(["worktree", "prune"], repo)


def run_ab(options: AbOptions) -> int:
    """Measure, gate and write everything; returns the exit code (UsageProblem for bad input)."""
    from optbench.gate.config import load_gate_config

    if options.rounds < 1:
        raise UsageProblem(f"--rounds takes a whole number of at least 1, got {options.rounds}")
    if not 1 <= options.slices <= 1000:
        raise UsageProblem(f"--slices takes a whole number from 1 to 1000, got {options.slices}")
    if not 1 <= options.slice_rounds <= 1000:
        raise UsageProblem(f"--slice-rounds takes a whole number from 1 to 1000, got {options.slice_rounds}")
    if not options.confirm_budget >= 0:  # also refuses nan
        raise UsageProblem(f"--confirm-budget takes seconds, 0 or more, got {options.confirm_budget}")
    pytest_args = check_pytest_args(list(options.pytest_args))
    cwd = Path.cwd()
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        raise UsageProblem(f"optbench ab runs inside a git repository; {cwd} is not in one")
    repo = Path(top.stdout.strip())
    base_sha = resolve_commit(options.base, repo)
    head_sha = _git(["rev-parse", "HEAD"], repo).stdout.strip()
    dirty = bool(_git(["status", "--porcelain", "--untracked-files=no"], repo).stdout.strip())
    config = load_gate_config(
        Path(options.config) if options.config else Path("pyproject.toml"), bool(options.config)
    )
    # A/B compares fresh runs of both sides: a large improvement is good news, not a stale baseline.
    config = replace(
        config,
        thresholds=replace(config.thresholds, fail_on_improvement_pct=None),
        cases={p: replace(t, fail_on_improvement_pct=None) for p, t in config.cases.items()},
    )
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    out = (options.out or Path("results") / "ab" / stamp).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageProblem(f"--out {out} already exists and is not empty; nothing is overwritten")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageProblem(f"--out {out} cannot be created: {error.strerror}") from None
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="optbench-ab-"))
    worktree = tmp / "base"
    try:
        with _signals_interrupt():
            added = _git(["worktree", "add", "--detach", str(worktree), base_sha], repo)
            if added.returncode != 0:
                raise UsageProblem(f"git worktree add failed: {_first_line(added.stderr)}")
            rel = cwd.resolve().relative_to(repo.resolve())
            if not (worktree / rel).is_dir():
                raise UsageProblem(f"{rel} does not exist in the base commit {base_sha[:12]}")
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # no __pycache__ in the user's tree
            plugin_dir = tmp / "plugin"
            plugin_dir.mkdir()
            shutil.copyfile(Path(__file__).with_name("lockstep.py"), plugin_dir / f"{PLUGIN_MODULE}.py")
            base_path, note = _base_imports(worktree, tmp, env)
            setup = _Setup(
                options, pytest_args, {"base": base_sha, "head": head_sha},
                {"base": worktree / rel, "head": cwd}, {"base": base_path, "head": []}, env, plugin_dir,
            )  # fmt: skip
            print(
                f"optbench ab: base {options.base} ({base_sha[:12]}) vs head {head_sha[:12]}"
                f"{' + uncommitted changes' if dirty else ''}, {options.rounds} round(s) of "
                f"{options.slices} timing slices; {note}",
                file=sys.stderr,
                flush=True,
            )
            measured = _measure(setup, out, None)
            run = AbRun(options, measured, out, base_sha, head_sha, dirty, note, time.monotonic() - started)
            # Inside the try: a confirmation re-measures in the base worktree, removed below.
            return _gate(run, config, lambda items: _measure(setup, out / "confirm", items))
    except KeyboardInterrupt:
        print(
            "optbench ab: interrupted; stopping both sessions and removing the base worktree", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    finally:
        with _uninterruptible():
            _remove_worktree(repo, worktree)
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class _Setup:
    """What starting a pair of sessions takes: the same for the measurement and its confirmation."""

    options: AbOptions
    pytest_args: list[str]
    shas: dict[str, str]
    cwds: dict[str, Path]
    imports: dict[str, list[str]]
    """PYTHONPATH entries ahead of the lockstep plugin's folder, per side."""
    env: dict[str, str]
    plugin_dir: Path


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


def _measure(setup: _Setup, out: Path, only: list[str] | None) -> Measured:
    """Start a fresh pair of sessions, run the common test items (all, or those in `only`) interleaved,
    and stop both. Their logs and raw rows go under `out`. Fresh processes on purpose: a confirmation
    must not inherit the first sessions' memory layout, whose effect on speed is what it rules out."""
    out.mkdir(parents=True, exist_ok=True)
    options = setup.options
    sides: dict[str, Side] = {}
    server = socket.create_server(("127.0.0.1", 0))
    token = secrets.token_hex(16)
    port = server.getsockname()[1]
    started = time.monotonic()
    try:
        for name in ("base", "head"):
            side_env = {
                **setup.env,
                "PYTHONPATH": _pythonpath([*setup.imports[name], str(setup.plugin_dir)], setup.env),
                "OPTBENCH_LOCKSTEP": f"127.0.0.1:{port}:{name}:{token}",
            }
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
        _connect(server, sides, token, options.start_timeout)
        steps, common = plan(sides["base"].items, sides["head"].items, options.rounds, only)
        if not common:
            for side in sides.values():
                assert side.conn is not None
                side.conn.send({"abort": "optbench ab: no case in common with the other side"})
            raise UsageProblem(
                f"base and head have no case in common (base: {len(sides['base'].items)} items, e.g. "
                f"{_short(sides['base'].items[0]) if sides['base'].items else 'none'}; head: "
                f"{len(sides['head'].items)}, e.g. "
                f"{_short(sides['head'].items[0]) if sides['head'].items else 'none'}): nothing to gate"
            )
        start_s = time.monotonic() - started
        print(
            f"optbench ab: both sessions collected after {start_s:.0f} s: "
            f"{len(common)} items in common, {len(steps)} steps",
            file=sys.stderr,
            flush=True,
        )
        seconds = _execute(sides, steps, options.step_timeout, options.slices, options.slice_rounds)
    finally:
        with _uninterruptible():
            for side in sides.values():
                _stop(side)
            server.close()
    return Measured(sides, common, seconds, start_s)


@dataclass
class AbRun:
    """What one A/B run measured, for the verdicts and the outputs."""

    options: AbOptions
    measured: Measured
    out: Path
    base_sha: str
    head_sha: str
    dirty: bool
    note: str
    """Which optbench each side imported."""
    wall_s: float
    confirmation: dict[str, Any] | None = None
    """What the confirmation measured again and found (gate.json's ab.confirmation)."""

    @property
    def sides(self) -> dict[str, Side]:
        return self.measured.sides

    @property
    def common(self) -> list[str]:
        return self.measured.common


Remeasure = Callable[[list[str]], Measured]
"""Measures the given test items again in a fresh pair of sessions."""


def _gate(run: AbRun, config: Any, remeasure: Remeasure | None = None) -> int:
    from optbench.gate import paired
    from optbench.gate.render import verdicts_json
    from optbench.gate.verdicts import REGRESSED, Verdict, compare, failed
    from optbench.results import load

    base, head = run.sides["base"], run.sides["head"]
    manifests = {name: _manifest(side) for name, side in run.sides.items()}
    profile = (manifests["head"] or {}).get("config", {}).get("profile")
    for side in run.sides.values():
        for r in sorted({int(row["_round"]) for row in side.rows}):
            these = [row for row in side.rows if row["_round"] == r]
            _write_run(
                run.out / "rounds" / f"{side.name}-{r}", these, manifests[side.name], f"{side.name}-{r}"
            )
        _write_run(run.out / side.name, pool(side.rows, profile), manifests[side.name], side.name)
    if not base.rows or not head.rows:
        raise UsageProblem(
            f"no rows from the {'base' if not base.rows else 'head'} session: are these optbench benchmarks? "
            f"(logs: {base.log}, {head.log})"
        )
    base_frame, head_frame = load(run.out / "base"), load(run.out / "head")
    changed = _code_changes(base_frame, head_frame)
    for frame in (base_frame, head_frame):
        frame["model_code_hash"] = frame["technique_code_hash"] = ""  # changed code is what A/B measures
        for column in NORMALIZERS:  # latency is gated as latency_ms only (see GATED)
            if column in frame:
                frame[column] = None
    # Both sides ran the same pytest arguments: every case of base is asked of head as well.
    asked = set(base_frame["case_id"].astype(str))
    verdicts = compare(base_frame, head_frame, config, asked)
    verdicts = [v for v in verdicts if not v.metric.startswith("latency") or v.metric == GATED]
    pairs = paired_slices(base.rows, head.rows)
    ratios = {case_id: paired.ratios(found) for case_id, found in pairs.items()}
    gated = [v for v in verdicts if v.metric == GATED and v.p_value is not None]
    judged = paired.decide(gated, pairs, config.correction, config.for_case)
    unpaired = sorted({v.case_id for v in gated} - judged)
    for v in gated:
        if v.case_id in unpaired:  # optbench compare's verdict on the pooled samples stands
            v.reason = "; ".join(
                filter(None, [v.reason, "pooled samples: not timed in slices on both sides"])
            )
    interrupted = False
    if remeasure is not None:
        interrupted = _confirm(run, verdicts, judged, pairs, config, remeasure, profile)
    if head.crashed_on:  # a head that crashes or hangs on a case has regressed there
        crashed = _short(head.crashed_on)
        verdicts = [v for v in verdicts if not (v.case_id == crashed and v.metric == "case")]
        verdicts.append(Verdict(crashed, "status", REGRESSED, reason=f"the head session {head.dead}"))
    text = _markdown(run, verdicts, base_frame, head_frame, ratios, changed, config, unpaired)
    payload = json.loads(verdicts_json(verdicts))
    payload["ab"] = {
        "base_ref": run.options.base,
        "base_sha": run.base_sha,
        "head_sha": run.head_sha,
        "head_uncommitted_changes": run.dirty,
        "rounds": run.options.rounds,
        "slices": run.options.slices,
        "slice_rounds": run.options.slice_rounds,
        "pytest_args": run.options.pytest_args,
        "common_items": len(run.common),
        "wall_s": run.wall_s,
        "sessions": {
            n: {"returncode": s.returncode, "stopped": s.dead, "log": str(s.log)}
            for n, s in run.sides.items()
        },
        "paired_ratios": ratios,
        "confirmation": run.confirmation,
        "code_changed": changed,
        "imports": run.note,
    }
    data = json.dumps(payload, indent=2) + "\n"
    for target, content in (
        (run.out / "gate.md", text),
        (run.out / "gate.json", data),
        (run.options.markdown, text),
        (run.options.json, data),
    ):
        if target is not None:
            try:
                Path(target).write_text(content, encoding="utf-8")
            except OSError as error:
                raise UsageProblem(f"could not write {target}: {error.strerror}") from None
    print(text, end="")
    print(f"optbench ab: wrote {run.out} (base/, head/, rounds/, gate.md, gate.json)", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    if failed(verdicts):
        return EXIT_REGRESSION
    both = set(base_frame.loc[base_frame["status"] == "passed", "case_id"]) & set(
        head_frame.loc[head_frame["status"] == "passed", "case_id"]
    )
    if not both:
        raise UsageProblem(
            "no case passed on both base and head (skipped or failed on one side): nothing was gated "
            f"(see {run.out / 'gate.md'})"
        )
    return EXIT_OK


def _confirm(
    run: AbRun,
    verdicts: list[Any],
    judged: set[str],
    first: dict[str, list[Any]],
    config: Any,
    remeasure: Remeasure,
    profile: str | None,
) -> bool:
    """Measure the flagged latency regressions again in fresh sessions, within the budget, and mark
    them confirmed or not on both measurements' pairs (`first` and the fresh ones; see
    optbench/gate/ab_confirm.py); the second runs go to confirm/base and confirm/head. Returns True
    when Ctrl-C stopped it (the first verdicts stand, unconfirmed)."""
    from optbench.ab import confirmation as ab_confirm
    from optbench.gate import paired

    item_of = {str(r["case_id"]): str(r["_nodeid"]) for r in run.sides["head"].rows}
    measured = run.measured
    plan = ab_confirm.choose(
        verdicts, judged, item_of, measured.item_seconds, measured.start_s, run.options.confirm_budget
    )
    if not plan.cases and not plan.left_out:
        return False
    record: dict[str, Any] = {
        "budget_s": run.options.confirm_budget,
        "estimate_s": round(plan.estimate_s, 1),
        "cases": plan.cases,
        "left_out": plan.left_out,
    }
    run.confirmation = record
    if not plan.cases:
        return False
    print(
        f"optbench ab: {len(plan.cases)} latency regression(s) flagged; measuring again in fresh sessions "
        f"(about {plan.estimate_s:.0f} s): {', '.join(plan.cases)}",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    try:
        second = remeasure(plan.items)
    except KeyboardInterrupt:
        record["error"] = "interrupted: the first verdicts stand, unconfirmed"
        print(f"optbench ab: confirmation {record['error']}", file=sys.stderr)
        return True
    except UsageProblem as problem:
        record["error"] = f"could not measure again: {problem}"
        print(f"optbench ab: confirmation {record['error']}", file=sys.stderr)
        return False
    finally:
        record["wall_s"] = round(time.monotonic() - started, 1)
    for side in second.sides.values():
        folder = run.out / "confirm" / side.name
        _write_run(folder, pool(side.rows, profile), _manifest(side), f"confirm-{side.name}")
    pairs = paired_slices(second.sides["base"].rows, second.sides["head"].rows)
    again = ab_confirm.judge(verdicts, plan.cases, first, pairs, config)
    record["paired_ratios"] = {c: paired.ratios(pairs.get(c, [])) for c in plan.cases}
    record["verdicts"] = {c: again[c].verdict if c in again else None for c in plan.cases}
    # The size of the change both measurements agree on (ab_confirm: geometric mean of their medians).
    record["ratios"] = {c: round(again[c].ratio, 4) for c in plan.cases if c in again}
    return False


def _markdown(
    run: AbRun,
    verdicts: list[Any],
    base: Any,
    head: Any,
    ratios: dict[str, list[float]],
    changed: list[str],
    config: Any,
    unpaired: list[str],
) -> str:
    from optbench.gate.render import markdown

    rounds = run.options.rounds
    lines = [
        f"# optbench ab: base `{run.options.base}` ({run.base_sha[:12]}) vs head {run.head_sha[:12]}"
        f"{' + uncommitted changes' if run.dirty else ''}",
        "",
        f"{rounds} round{'s' if rounds != 1 else ''}, {len(run.common)} test items on both sides, "
        f"interleaved case by case on one machine, each case's timing in {run.options.slices} "
        f"alternating slices; {run.wall_s:.0f} s in all. "
        f"{run.note[0].upper() + run.note[1:]}.",
        "",
        *markdown(verdicts, base, head).rstrip("\n").split("\n"),
        *_pairs_markdown(ratios, config),
    ]
    notes = []
    for side in run.sides.values():
        if side.dead:
            notes.append(f"- the {side.name} session {side.dead} (log: `{side.log}`)")
        elif side.returncode not in (0, 1, None):
            notes.append(
                f"- the {side.name} session ended with pytest exit code {side.returncode} (log: `{side.log}`)"
            )
    for name, side in run.sides.items():
        only = [i for i in side.items if i not in set(run.common)]
        if only:
            shown = ", ".join(f"`{_short(i)}`" for i in only[:10])
            notes.append(f"- {len(only)} test item(s) only on {name}, run once: {shown}")
    if unpaired:
        shown = ", ".join(f"`{c}`" for c in unpaired[:10]) + (" ..." if len(unpaired) > 10 else "")
        notes.append(
            f"- {len(unpaired)} case(s) judged on pooled samples (`optbench compare`'s Mann-Whitney test "
            f"and `latency_pct`), not on pairs of slices: {shown}. A base whose optbench predates timing "
            "slices, or a case timed in fewer than 6 slices; such verdicts false-alarm more on a shared "
            "machine."
        )
    notes += _confirmation_notes(run.confirmation)
    if changed:
        more = f" and {len(changed) - 20} more" if len(changed) > 20 else ""
        notes.append(
            f"- code changed (compared anyway: the change is what A/B measures): {', '.join(changed[:20])}{more}"
        )
    if notes:
        lines += ["", "**Notes:**", *notes]
    return "\n".join(lines) + "\n"


def _confirmation_notes(record: dict[str, Any] | None) -> list[str]:
    if not record:
        return []
    notes = []
    if record.get("cases"):
        found, both = record.get("verdicts") or {}, record.get("ratios") or {}
        shown = ", ".join(
            f"`{c}` ({found.get(c) or 'not judged'}"
            + (f", {both[c]:.3g}x over both measurements)" if c in both else ")")
            for c in record["cases"]
        )
        took = f" in {record['wall_s']:.0f} s" if "wall_s" in record else ""
        notes.append(
            f"- latency regressions measured again in a fresh pair of sessions{took} (a regression fails "
            f"only if it holds over both measurements): {shown}"
        )
    if record.get("error"):
        notes.append(f"- confirmation: {record['error']}")
    if record.get("left_out"):
        shown = ", ".join(f"`{c}`" for c in record["left_out"])
        notes.append(
            f"- not measured again within the {record['budget_s']:g} s confirmation budget (they fail "
            f"unconfirmed; raise `--confirm-budget`): {shown}"
        )
    return notes
