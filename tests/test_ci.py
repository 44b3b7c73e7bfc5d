from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_starts_with_the_bench_command_then_the_test_command():
    bench, tests = _readme_commands()[:2]
    assert bench.startswith("python3 -m venv .venv") and bench.endswith("pytest bench/")
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("pytest tests/")


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in ci


def test_every_package_under_src_ships_in_the_wheel():
    # A subpackage missing from this list works in an editable install and breaks a wheel install.
    import pytest

    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT / "src").parts) for init in (ROOT / "src").rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
