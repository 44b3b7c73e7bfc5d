"""`optbench ab` for real, in throwaway git repositories: a clone of this repository with its own
environment (optbench installed editable from the clone, as in a developer's checkout), and a user's
repository that only uses the installed optbench. Small selections keep the whole file short."""

from __future__ import annotations

import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from user_repo import user_repo

from optbench.ab.allocator import user_settings
from optbench.ab.pooling import pool
from optbench.ab.schedule import plan
from optbench.ab.sessions import Server, Side
from optbench.cli import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, main

ROOT = Path(__file__).resolve().parents[1]
# Random weights at the task shape (3x32x32) and a short time budget: a case takes about a second.
SELECTION = (
    "bench/test_inference.py", "--models", "resnet18", "--techniques", "eager,channels_last",
    "--weights", "random", "--devices", "cpu", "--time-budget", "0.1", "--timing-shape", "task",
)  # fmt: skip
# 100 ms a call against a few ms: caught even when another job on the machine spreads the pairs'
# ratios over 0.1x to 4x (a CI run beside a training job did; a 20 ms sleep then passed the gate).
SLOWDOWN = """
        import time

        prepared.module.register_forward_pre_hook(lambda *_: time.sleep(0.1))  # injected by test_ab
"""


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.email=ab@test", "-c", "user.name=ab", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _state(repo: Path) -> tuple[str, str, str]:
    """What `optbench ab` must leave as it found it: HEAD, the status (ignored files too) and the worktrees."""
    return (
        _git(repo, "rev-parse", "HEAD"),
        _git(repo, "status", "--porcelain", "--ignored"),
        _git(repo, "worktree", "list", "--porcelain"),
    )


def _user_git_repo(folder: Path) -> Path:
    """A user's repository (tests/user_repo.py) with one commit."""
    folder.mkdir()
    repo = user_repo(folder)
    _git(repo, "init", "--quiet")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "base")
    return repo


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One cache for the file: the machine's ceilings are measured once, never in the user's cache.
    return tmp_path_factory.mktemp("optbench-cache")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(repository, python): a clone whose HEAD commit is this working tree as it is now, and an
    environment where optbench is the clone's, editable (its dependencies are this environment's)."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs optbench's git checkout")
    tmp = tmp_path_factory.mktemp("ab-clone")
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(repo)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, target = ROOT / name, repo / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.exists():
            target.unlink()  # deleted in the working tree
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "--allow-empty", "-m", "the working tree under test")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # This environment's packages (torch, pytest ...) as a plain path entry: its own editable
    # optbench is not activated there, since .pth files are read only in site directories.
    (purelib / "zz_optbench_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(purelib), "-e", str(repo)],
        check=True,
    )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import optbench; print(optbench.__file__)"], capture_output=True, text=True
    )
    assert where.stdout.strip().startswith(str(repo)), where.stdout + where.stderr
    return repo, python


def ab(
    python: Path, repo: Path, cache: Path, *args: str, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "optbench.cli", "ab", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OPTBENCH_CACHE": str(cache)},
    )


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]


def test_plan_interleaves_and_alternates_who_goes_first():
    steps, common = plan(["a", "b", "x"], ["a", "b", "y"], rounds=2)
    assert common == ["a", "b"]
    assert steps == [
        ("base", 1, "a"), ("head", 1, "a"), ("head", 1, "b"), ("base", 1, "b"),
        ("head", 2, "a"), ("base", 2, "a"), ("base", 2, "b"), ("head", 2, "b"),
        ("base", 1, "x"), ("head", 1, "y"),
    ]  # fmt: skip


def test_pool_joins_the_rounds_samples_and_keeps_a_failed_round():
    def row(case, technique, samples, status="passed", round_=1):
        return {
            "case_id": case, "technique": technique, "status": status, "samples_ms": samples,
            "baseline_case_id": "m-eager", "mode": "inference", "batch_size": 2, "_round": round_,
        }  # fmt: skip

    rows = [
        row("m-eager", "eager", [10.0, 10.0]), row("m-x", "x", [5.0, 5.0]),
        row("m-eager", "eager", [12.0, 12.0], round_=2), row("m-x", "x", [6.0, 6.0], round_=2),
        row("m-y", "y", [4.0], round_=1), row("m-y", "y", None, "failed", round_=2),
    ]  # fmt: skip
    pooled = {r["case_id"]: r for r in pool(rows, "smoke")}
    assert pooled["m-x"]["samples_ms"] == [5.0, 5.0, 6.0, 6.0] and pooled["m-x"]["rounds"] == 4
    assert pooled["m-x"]["latency_ms_median"] == 5.5 and pooled["m-x"]["baseline_latency_ms"] == 11.0
    assert pooled["m-x"]["speedup"] == 2.0 and "_round" not in pooled["m-x"]
    assert pooled["m-y"]["status"] == "failed"  # any round that did not pass decides the case


def test_pooled_speedup_and_throughput_are_derived_as_the_runner_derives_them():
    """One derivation (results.derive.speedup_columns) for the runner's rows and the pooled ones:
    a data row's throughput is batch / mean over every round, the eager row's too (not round 1's)."""
    from optbench.results.derive import speedup_columns

    def row(case, samples, round_):
        return {
            "case_id": case, "status": "passed", "samples_ms": samples, "baseline_case_id": "d-eager",
            "mode": "data", "batch_size": 4, "throughput": 1.0, "_round": round_,
        }  # fmt: skip

    rows = [row("d-eager", [10.0, 30.0], 1), row("d-x", [5.0, 15.0], 1)]
    rows += [row("d-eager", [20.0], 2), row("d-x", [40.0], 2)]
    pooled = {r["case_id"]: r for r in pool(rows, "smoke")}
    x, eager = pooled["d-x"], pooled["d-eager"]
    expected = speedup_columns([5.0, 15.0, 40.0], [10.0, 30.0, 20.0], 4, "mean")
    assert {k: x[k] for k in expected} == expected
    assert x["throughput"] == 4 / (20.0 / 1e3) and x["speedup"] == 1.0
    assert eager["throughput"] == 4 / (20.0 / 1e3) and eager["speedup"] == eager["speedup_ci95_low"] == 1.0


def test_rows_arrive_without_private_keys_and_carry_their_origin_beside_them(tmp_path):
    side = Side("base", "0" * 40, tmp_path, {}, tmp_path / "raw", tmp_path / "base.log")
    side.results.parent.mkdir(parents=True)
    older = {"case_id": "m-x", "status": "passed", "_round": 7, "_nodeid": "t[old]", "_slice_ends": [9]}
    unselected = {"case_id": "m-eager", "status": "passed", "selected": False}
    lines = [json.dumps(older), json.dumps(unselected), '{"case_id": "being wri']  # the last: unfinished
    side.results.write_text("\n".join(lines))
    side.read_rows(2, "t[m-x]", [3, 6])
    x, eager = side.rows
    assert x.row == {"case_id": "m-x", "status": "passed"}
    assert (x.round, x.nodeid, x.slice_ends) == (2, "t[m-x]", [3, 6])
    assert eager.slice_ends == []  # measured inside the item, unpaced: the pauses are not its own
    side.results.write_text("\n".join([*lines[:2], '{"case_id": "m-y", "status": "passed"}', ""]))
    side.read_rows(3, "t[m-y]")
    assert [(r.row["case_id"], r.round) for r in side.rows[2:]] == [("m-y", 3)]


def test_the_sessions_connection_needs_the_key_and_sees_a_silent_or_gone_peer():
    """The driver's end (sessions.Server, Channel) and the lockstep plugin's (copied into each
    session) speak multiprocessing.connection with the authkey in the session's environment."""
    from multiprocessing.connection import AuthenticationError, Client

    from optbench.ab import lockstep

    server = Server()
    try:
        host, port, side, _ = server.spec("head").split(":")
        with pytest.raises(AuthenticationError):
            Client((host, int(port)), authkey=b"not the key")
        session = lockstep._Channel(server.spec("head"))
        assert session.side == "head"
        driver = server.next(10.0)
        assert driver is not None and server.next(0.1) is None  # the refused client never arrives
        session.send({"hello": "head", "items": ["t[a]"]})
        assert driver.recv(10.0) == {"hello": "head", "items": ["t[a]"]}
        driver.send({"go": 0})
        assert session.recv() == {"go": 0}
        started = time.monotonic()
        assert driver.recv(0.3) is None  # silent: the step timeout
        assert driver.recv(60.0, alive=lambda: False) is None  # its process ended: within a second
        assert time.monotonic() - started < 5
        session.close()
        assert driver.recv(60.0) is None and time.monotonic() - started < 5  # hung up
        other = lockstep._Channel(server.spec("base"))
        server.next(10.0).close()  # the driver goes away: the session stops
        with pytest.raises(pytest.exit.Exception, match="the driver went away"):
            other.recv()
        other.close()
    finally:
        server.close()
    assert not server.thread.is_alive()


def test_ab_imports_pytest_only_in_the_lockstep_plugin():
    modules = "driver, options, worktree, sessions, schedule, pooling, outcome, confirmation"
    code = f"import sys; from optbench.ab import {modules}; print('pytest' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.stdout.strip() == "False", found.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ab", "--base", "HEAD", "--rounds", "0"], "--rounds takes a whole number of at least 1, got 0"),
        (["ab", "--base", "HEAD", "--slices", "0"], "--slices takes a whole number from 1 to 1000, got 0"),
        (
            ["ab", "--base", "HEAD", "--slice-rounds", "0"],
            "--slice-rounds takes a whole number from 1 to 1000, got 0",
        ),
        (
            ["ab", "--base", "HEAD", "--confirm-budget", "-1"],
            "--confirm-budget takes seconds, 0 or more, got -1.0",
        ),
        (["ab", "--base", "HEAD", "--", "bench/", "--run-id", "x"], "--run-id is set by optbench ab"),
        (["ab", "--base", "HEAD", "--", "--results-dir=r"], "--results-dir is set by optbench ab"),
        (["ab", "--base", "HEAD", "--config", "no-such.toml"], "--config no-such.toml: no such file"),
    ],
)
def test_bad_arguments_are_one_line(argv, message, capsys):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"optbench: error: {message}") and err.count("\n") == 1, err


def test_missing_base_ref_is_one_line(tmp_path, cache):
    repo = _user_git_repo(tmp_path / "user")
    before = _state(repo)
    result = ab(Path(sys.executable), repo, cache, "--base", "no-such-branch", "--out", str(tmp_path / "out"))
    assert result.returncode == EXIT_USAGE
    assert result.stderr == (
        "optbench: error: base ref 'no-such-branch' is not a commit in this repository "
        "(git rev-parse found nothing)\n"
    )
    assert _state(repo) == before and not (tmp_path / "out").exists()


def test_no_case_in_common_is_an_input_error(tmp_path, cache):
    """A user's repository (optbench installed elsewhere: nothing is installed for base) whose model
    was renamed since the base commit: the two sides share no case."""
    repo = _user_git_repo(tmp_path / "user")
    model = repo / "models" / "my_net.py"
    model.write_text(model.read_text().replace('"my_net"', '"my_net2"'))
    before = _state(repo)
    result = ab(Path(sys.executable), repo, cache, "--base", "HEAD", "--out", str(tmp_path / "out"))
    assert result.returncode == EXIT_USAGE, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("optbench: error:")]
    assert len(errors) == 1 and "base and head have no case in common" in errors[0]
    assert "my_net-eager-cpu-bs8" in errors[0] and "my_net2-eager-cpu-bs8" in errors[0]  # each side its own
    assert "both sides use the installed optbench" in result.stderr
    assert _state(repo) == before
    assert not (tmp_path / "out" / "gate.md").exists()  # never a pass


def test_identical_code_passes_and_leaves_the_tree_alone(clone, cache, tmp_path):
    repo, python = clone
    before = _state(repo)
    out = tmp_path / "out"
    # The noise of this shared machine's neighbours is not what this test is about (the README's
    # gate figures are): this test is about the plumbing, so only 2x counts.
    config = tmp_path / "gate.toml"
    config.write_text("[tool.optbench.gate]\nlatency_pct = 100\nab_latency_pct = 100\n")
    result = ab(
        python, repo, cache, "--base", "HEAD", "--out", str(out), "--config", str(config), "--", *SELECTION
    )
    assert result.returncode == EXIT_OK, result.stdout[-3000:] + result.stderr[-3000:]
    assert "optbench gate: **pass**" in result.stdout and "### Paired ratios" in result.stdout
    assert "each case's timing in 16 alternating slices" in result.stdout
    assert _state(repo) == before
    payload = json.loads((out / "gate.json").read_text())
    assert payload["failed"] is False and payload["ab"]["rounds"] == 1 and payload["ab"]["slices"] == 16
    assert "base runs base's optbench" in payload["ab"]["imports"]
    # Both sides paused their timing alike: 16 paired slices per case, judged on the pairs.
    assert {len(r) for r in payload["ab"]["paired_ratios"].values()} == {16}
    assert payload["ab"]["slice_rounds"] == 3
    allocator = payload["ab"]["allocator"]
    if platform.libc_ver()[0] == "glibc" and not user_settings(os.environ):
        # --malloc fixed, the default: both thresholds, in both sessions' environment
        assert allocator["mode"] == "fixed"
        assert set(allocator["environment"]) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
        for side in ("base", "head"):  # ... which each session's manifest records as run under
            manifest = json.loads((out / "raw" / side / "runs" / side / "run.json").read_text())
            assert manifest["environment"].items() >= allocator["environment"].items()
    assert payload["ab"]["confirmation"] is None and not (out / "confirm").exists()  # nothing flagged
    latency = [v for v in payload["verdicts"] if v["metric"].startswith("latency")]
    assert {v["metric"] for v in latency} == {"latency_ms"}
    assert latency and all("16 pairs" in v["reason"] for v in latency)
    for side in ("base", "head"):
        (raw,) = [r for r in _rows(out / "rounds" / f"{side}-1") if r["technique"] == "eager"]
        (pooled,) = [row for row in _rows(out / side) if row["technique"] == "eager"]
        # 16 slices of 3 rounds, or of fewer where fewer cover 0.1 s at the warm call (so on a loaded
        # machine, whose calls are slower, as few as 16 in all).
        assert len(pooled["samples_ms"]) == len(raw["samples_ms"]) == pooled["rounds"] >= 16
    assert (out / "gate.md").read_text() == result.stdout


def test_injected_slowdown_is_caught_and_base_runs_its_own_code(clone, cache, tmp_path):
    """Head (the working tree, uncommitted) sleeps 100 ms in every channels_last call; base (the commit)
    does not. Caught only if base really ran the commit's optbench, not head's."""
    repo, python = clone
    technique = repo / "src" / "optbench" / "catalog" / "techniques" / "channels_last.py"
    original = technique.read_text()
    anchor = "        prepared.module.to(memory_format=torch.channels_last)"
    line = next(x for x in original.splitlines(keepends=True) if x.startswith(anchor))
    technique.write_text(original.replace(line, line + SLOWDOWN))
    try:
        before = _state(repo)
        out = tmp_path / "out"
        result = ab(
            python, repo, cache, "--base", "HEAD", "--rounds", "2", "--out", str(out), "--", *SELECTION
        )
        assert _state(repo) == before
    finally:
        technique.write_text(original)
    assert result.returncode == EXIT_REGRESSION, result.stdout[-3000:] + result.stderr[-3000:]
    verdicts = json.loads((out / "gate.json").read_text())["verdicts"]
    regressed = {(v["case_id"], v["metric"]) for v in verdicts if v["verdict"] == "regressed"}
    assert ("resnet18-channels_last-cpu-bs8", "latency_ms") in regressed
    # Measured again in a fresh pair of sessions before failing, and seen again.
    (flagged,) = [
        v
        for v in verdicts
        if v["case_id"] == "resnet18-channels_last-cpu-bs8" and v["metric"] == "latency_ms"
    ]
    assert flagged["confirmed"] is True and "measured again: ratio" in flagged["reason"]
    confirmation = json.loads((out / "gate.json").read_text())["ab"]["confirmation"]
    assert "resnet18-channels_last-cpu-bs8" in confirmation["cases"]
    assert confirmation["verdicts"]["resnet18-channels_last-cpu-bs8"] == "regressed"
    assert "resnet18-channels_last-cpu-bs8" in {r["case_id"] for r in _rows(out / "confirm" / "head")}
    assert "measured again in a fresh pair of sessions" in result.stdout
    # Unchanged cases may show a noise false alarm on this shared machine (the README's measured
    # rate); what must hold is that nothing else broke.
    assert not any(metric == "status" for _, metric in regressed)
    hashes = {
        side: {r["technique_code_hash"] for r in _rows(out / side) if r["technique"] == "channels_last"}
        for side in ("base", "head")
    }
    assert len(hashes["base"]) == len(hashes["head"]) == 1 and hashes["base"] != hashes["head"]
    assert "technique code" in result.stdout  # the code change is named, and compared anyway


def _wait_for(stream, text: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} after {timeout:g} s: {seen[-2000:]}"
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            chunk = os.read(stream.fileno(), 4096).decode()
            assert chunk, f"ended before {text!r}: {seen[-2000:]}"
            seen += chunk
    return seen


def test_an_interrupted_run_leaves_no_worktree_and_no_session(clone, cache, tmp_path):
    repo, python = clone
    before = _state(repo)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [str(python), "-m", "optbench.cli", "ab", "--base", "HEAD", "--out", str(out), "--", *SELECTION],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OPTBENCH_CACHE": str(cache)},
        # A background shell starts its jobs with SIGINT ignored: restore it, as in a terminal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        seen = _wait_for(proc.stderr, "[1/", timeout=300)  # measuring: the first case is done
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        seen += proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted; stopping both sessions and removing the base worktree" in seen
    assert _state(repo) == before  # HEAD, status and the worktree list as before
    temp = Path(seen.split("base's optbench (", 1)[1].split(")", 1)[0])  # .../optbench-ab-*/base/src/optbench
    assert not temp.parents[2].exists()
    sessions = subprocess.run(["pgrep", "-f", str(out / "raw")], capture_output=True, text=True)
    assert sessions.stdout == "", "a pytest session outlived the driver"
    assert not (out / "gate.md").exists()


def test_a_case_that_head_breaks_fails_the_gate_with_its_reason(clone, cache, tmp_path):
    """Head's channels_last raises: a case that passed on base and fails on head is a regression,
    named with head's reason, never 'not comparable' (its failed row has no dtype)."""
    repo, python = clone
    technique = repo / "src" / "optbench" / "catalog" / "techniques" / "channels_last.py"
    original = technique.read_text()
    anchor = "        prepared.module.to(memory_format=torch.channels_last)"
    line = next(x for x in original.splitlines(keepends=True) if x.startswith(anchor))
    broken = line + '        raise RuntimeError("channels_last broken by test_ab")\n'
    technique.write_text(original.replace(line, broken))
    try:
        out = tmp_path / "out"
        result = ab(python, repo, cache, "--base", "HEAD", "--out", str(out), "--", *SELECTION)
    finally:
        technique.write_text(original)
    assert result.returncode == EXIT_REGRESSION, result.stdout[-3000:] + result.stderr[-3000:]
    verdicts = json.loads((out / "gate.json").read_text())["verdicts"]
    (status,) = [
        v for v in verdicts if v["case_id"] == "resnet18-channels_last-cpu-bs8" and v["metric"] == "status"
    ]
    assert status["verdict"] == "regressed" and status["reason"].startswith("failed: ")
    assert "channels_last broken by test_ab" in status["reason"]
    assert not any(v["verdict"] == "not_comparable" for v in verdicts)
    assert "optbench gate: **FAIL**" in result.stdout
