"""Defaults for every optbench option from `[tool.optbench]` in the pytest root's pyproject.toml.

The command line wins over the file. An unknown key or a value of the wrong type is one usage-error
line naming the key; a value of the right type that the option rejects names the key too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from optbench.errors import UsageProblem
from optbench.matrix.settings import BY_NAME, SETTINGS

APPLIED = pytest.StashKey[dict[str, str]]()
"""On the pytest config: option dest -> 'key = value' for the options the file set."""

KEYS: dict[str, str] = {s.name: s.kind for s in SETTINGS if s.toml_key is not None}
"""[tool.optbench] key (the option's dest) -> kind of value, from the table of options
(optbench.matrix.settings). Lists may be TOML arrays or comma-separated strings; paths are relative
to the pyproject.toml's folder."""

_KIND_NAMES = {
    "str": "a string",
    "list": "a list or a comma-separated string",
    "path": "a path string",
    "paths": "a list of path strings",
    "number": "a number",
    "int": "a whole number",
    "bool": "true or false",
}


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageProblem(f"could not read {path}: {error}") from None


def _flag(key: str) -> str:
    return BY_NAME[key].flag


def _given_on_command_line(config: pytest.Config, key: str) -> bool:
    flag = _flag(key)
    return any(str(arg) == flag or str(arg).startswith(flag + "=") for arg in config.invocation_params.args)


def _convert(key: str, kind: str, value: Any, base: Path, where: str) -> Any:
    def bad() -> UsageProblem:
        return UsageProblem(f"{where}: {key} must be {_KIND_NAMES[kind]}, got {value!r}")

    if kind == "bool":
        if not isinstance(value, bool):
            raise bad()
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad()
        return float(value)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        return value
    if kind == "list":
        if isinstance(value, list) and value and all(isinstance(v, (str, int)) for v in value):
            return ",".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return value
        raise bad()
    if kind == "paths":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad()
        return [str(base / v) for v in value]
    if not isinstance(value, str) or not value.strip():
        raise bad()
    return str(base / value) if kind == "path" else value


def apply_project_config(config: pytest.Config) -> dict[str, str]:
    """Set each option the command line left alone from `[tool.optbench]`. Returns option dest ->
    key for the options it set, so a later error can name the key."""
    path = config.rootpath / "pyproject.toml"
    if not path.is_file():
        return {}
    table = _load_toml(path).get("tool", {}).get("optbench")
    if table is None:
        return {}
    where = f"[tool.optbench] in {path}"
    if not isinstance(table, dict):
        raise UsageProblem(f"{where} must be a table of option = value")
    table = {k: v for k, v in table.items() if k != "gate"}  # [tool.optbench.gate]: the gate's own
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise UsageProblem(
            f"{where}: unknown key {', '.join(map(repr, unknown))}; valid keys: {', '.join(KEYS)}"
        )
    applied: dict[str, str] = {}
    for key, value in table.items():
        converted = _convert(key, KEYS[key], value, path.parent, where)
        if _given_on_command_line(config, key):
            continue
        setattr(config.option, key, converted)
        applied[key] = f"{key} = {value!r}"
    return applied


def name_the_key(message: str, applied: dict[str, str], config: pytest.Config) -> str:
    """Point an option's error at the [tool.optbench] key that set its value."""
    for key, setting in applied.items():
        value = getattr(config.option, key)
        items = value if isinstance(value, list) else [v.strip() for v in str(value).split(",")]
        if _flag(key) in message or any(f"'{item}'" in message for item in items if item):
            return f"{message} (from [tool.optbench] {setting} in {config.rootpath / 'pyproject.toml'})"
    return message
