"""Which code a session of `optbench ab` runs (optbench.ab.worktree.tree_id): the key that lets it reuse
evaluations made by exactly that code, and nothing else."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from optbench.ab.sessions import Setup, running
from optbench.ab.worktree import MEMO_TREE_ENV, tree_id
from optbench.errors import UsageProblem


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_a_tree_is_its_commit_until_anything_in_it_changes(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "technique.py").write_text("SCALE = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "base")
    sha = _git(tmp_path, "rev-parse", "HEAD")
    assert tree_id(tmp_path, sha) == sha  # clean: the commit alone, as the base worktree's

    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "scratch.bin").write_bytes(b"\x00" * 10)
    assert tree_id(tmp_path, sha) == sha  # ignored files are not the code

    (tmp_path / "technique.py").write_text("SCALE = 2\n")
    edited = tree_id(tmp_path, sha)
    assert edited is not None and edited.startswith(sha + "+") and edited != sha
    assert tree_id(tmp_path, sha) == edited  # the same change, the same identity
    (tmp_path / "technique.py").write_text("SCALE = 3\n")
    assert tree_id(tmp_path, sha) not in (sha, edited)
    # A user's external diff tool that prints nothing does not make the change invisible.
    _git(tmp_path, "config", "diff.external", "true")
    assert tree_id(tmp_path, sha) not in (sha, edited)
    (tmp_path / "technique.py").write_text("SCALE = 1\n")
    assert tree_id(tmp_path, sha) == sha  # back as committed

    (tmp_path / "vocab.txt").write_text("a b c\n")  # untracked, not ignored: a file a technique may read
    untracked = tree_id(tmp_path, sha)
    assert untracked not in (sha, edited)
    (tmp_path / "vocab.txt").write_text("a b c d\n")
    assert tree_id(tmp_path, sha) != untracked


def test_outside_a_repository_nothing_is_named(tmp_path):
    assert tree_id(tmp_path, "0" * 40) is None


def test_each_session_is_told_its_own_tree_and_no_inherited_one(tmp_path, monkeypatch):
    """The environment `running` starts each side with (the sessions fail at once here: their pytest
    arguments name no file, so only the environment is looked at)."""
    from optbench.ab.options import AbOptions

    seen: dict[str, dict[str, str]] = {}

    class Popen:  # records the environment instead of starting pytest
        def __init__(self, command, env, **kwargs):
            seen[command[command.index("--run-id") + 1]] = env
            self.returncode = 2

        def poll(self):
            return 2

        def wait(self, timeout=None):
            return 2

    monkeypatch.setattr("optbench.ab.sessions.subprocess.Popen", Popen)
    setup = Setup(
        AbOptions(base="HEAD", start_timeout=1), [], {"base": "b" * 40, "head": "h" * 40},
        {"base": tmp_path, "head": tmp_path}, {"base": [], "head": []},
        {MEMO_TREE_ENV: "from the user's shell"}, tmp_path, 0.01, {"base": "b" * 40, "head": None},
    )  # fmt: skip
    (tmp_path / "out").mkdir()
    with pytest.raises(UsageProblem), running(setup, tmp_path / "out"):
        pass  # neither session says hello (one line): what matters is how they were started
    assert seen["base"][MEMO_TREE_ENV] == "b" * 40
    assert MEMO_TREE_ENV not in seen["head"]  # unknown: that session reuses nothing
