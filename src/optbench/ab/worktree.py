"""`optbench ab`'s base side on disk: the base commit checked out into a temporary git worktree (the
user's working tree, index and HEAD are never touched), and, where optbench itself is part of the
repository, base's optbench installed so that the base session imports it. No torch."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from optbench.errors import UsageProblem


def git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageProblem("optbench ab needs git, and git is not installed") from None


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def resolve_commit(ref: str, cwd: Path) -> str:
    """The full sha of `ref`; a ref that names no commit is one line."""
    found = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd)
    if found.returncode != 0 or not found.stdout.strip():
        raise UsageProblem(
            f"base ref {ref!r} is not a commit in this repository (git rev-parse found nothing)"
        )
    return found.stdout.strip()


@dataclass
class Head:
    """The repository `optbench ab` runs in, as it is now."""

    repo: Path
    """Its top-level folder."""
    sha: str
    dirty: bool
    """Uncommitted changes to tracked files (head is the working tree, with them)."""


def head(cwd: Path) -> Head:
    top = git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        raise UsageProblem(f"optbench ab runs inside a git repository; {cwd} is not in one")
    repo = Path(top.stdout.strip())
    sha = git(["rev-parse", "HEAD"], repo).stdout.strip()
    dirty = bool(git(["status", "--porcelain", "--untracked-files=no"], repo).stdout.strip())
    return Head(repo, sha, dirty)


MEMO_TREE_ENV = "OPTBENCH_MEMO_TREE"
"""Set by `optbench ab` in each session's environment: which code that session runs (tree_id). With it
a session reuses only the evaluations and short trainings made by exactly that code (the memo's keys
take it in: optbench/measure/memo.py); without it a gated session reuses none."""


def tree_id(repo: Path, sha: str) -> str | None:
    """The identity of the code in the working tree at `repo`, whose HEAD is `sha`: `sha` itself when
    nothing is uncommitted or untracked (a base worktree, a clean checkout), else `sha` plus a digest of
    the uncommitted changes (`git diff --binary HEAD`, without external tools or textconv) and of each untracked, not ignored, file's
    name, size and modification time. None when git cannot tell (then nothing is reused). Files
    outside the repository, and ignored ones, are not in it."""
    try:
        # The raw patch: a configured external diff tool, textconv driver or colour must not stand in
        # for the bytes (a tool printing nothing would make a changed head look like its commit).
        diff = subprocess.run(
            ["git", "diff", "--no-ext-diff", "--no-textconv", "--no-color", "--binary", "HEAD"],
            cwd=repo, capture_output=True,
        )  # fmt: skip
        others = subprocess.run(
            ["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=repo, capture_output=True
        )
    except OSError:
        return None
    if diff.returncode != 0 or others.returncode != 0:
        return None
    if not diff.stdout and not others.stdout:
        return sha
    digest = hashlib.sha256(diff.stdout)
    for name in sorted(n for n in others.stdout.split(b"\0") if n):
        try:
            info = (repo / os.fsdecode(name)).stat()
        except OSError:
            return None
        digest.update(b"\0" + name + f"|{info.st_size}|{info.st_mtime_ns}".encode())
    return f"{sha}+{digest.hexdigest()[:16]}"


def add_worktree(repo: Path, sha: str, worktree: Path, cwd: Path) -> Path:
    """Check `sha` out (detached) into `worktree`; returns the folder there that matches `cwd`."""
    added = git(["worktree", "add", "--detach", str(worktree), sha], repo)
    if added.returncode != 0:
        raise UsageProblem(f"git worktree add failed: {first_line(added.stderr)}")
    rel = cwd.resolve().relative_to(repo.resolve())
    if not (worktree / rel).is_dir():
        raise UsageProblem(f"{rel} does not exist in the base commit {sha[:12]}")
    return worktree / rel


def remove_worktree(repo: Path, worktree: Path) -> None:
    if worktree.exists():
        removed = git(["worktree", "remove", "--force", str(worktree)], repo)
        if removed.returncode != 0:
            shutil.rmtree(worktree, ignore_errors=True)
    git(["worktree", "prune"], repo)


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


def base_imports(worktree: Path, tmp: Path, env: dict[str, str]) -> tuple[list[str], str]:
    """PYTHONPATH entries that make the base session run base's optbench, and a note saying which.

    Only when optbench itself is part of this repository (head imports it from the working tree) is
    anything installed: base's optbench, editable, into a temporary folder (no dependencies: they are
    head's, already installed). In a user's repository both sides use the installed optbench."""
    home = _optbench_home()
    toplevel = Path(git(["rev-parse", "--show-toplevel"], worktree).stdout.strip() or worktree)
    head_top = Path(git(["rev-parse", "--show-toplevel"], Path.cwd()).stdout.strip() or Path.cwd())
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
        why = first_line(install.stderr[-2000:]) or f"pip exited with code {install.returncode}"
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
