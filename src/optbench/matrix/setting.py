"""One option's declaration: `Setting`, with its kind, default, choices, `Range` and check.

The table of them is optbench.matrix.settings; this module is what a declaration can say and what
follows from it (the help line, the usage error, the docs row). No pytest, no torch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from optbench.errors import UnknownNameError, UsageProblem
from optbench.matrix.profiles import PROFILES, Profile

Kind = Literal["str", "list", "path", "paths", "number", "int", "bool"]
"""A value's kind: `list` is comma-separated on the command line (a TOML array or string in the
file); `paths` is a repeatable option (a TOML array of strings); `path`s in the file are relative to
its folder; `number` is a float."""


@dataclass(frozen=True)
class Range:
    """The values a number may take, and the usage error for one outside them. `error` is formatted
    with the option's `flag`, the `value`, the bounds `low` and `high`, and `range` as the docs write
    it ("(0, 1]")."""

    low: float | None = None
    high: float | None = None
    error: str = "{flag} takes a value {range}, got {value}"
    open_low: bool = False
    open_high: bool = False

    def __contains__(self, value: float) -> bool:  # written so that NaN is never inside
        above = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above and below

    def __str__(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if self.high is None:
            return f"{'>' if self.open_low else '>='} {low}"
        if not (self.open_low or self.open_high):
            return f"{low} to {high}"
        return f"{'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"

    def message(self, flag: str, value: Any) -> str:
        return self.error.format(flag=flag, value=value, low=self.low, high=self.high, range=self)


@dataclass(frozen=True)
class Setting:
    """One option: `--name-with-dashes` on the command line, `name` in `[tool.optbench]`."""

    name: str
    """The option's dest; its flag is `--` and the name with `-` for `_`."""
    kind: Kind
    help: str
    """What it does, for `pytest --help` and the docs; the default, range and choices are added."""
    group: str
    """Which part of a run it is about (the docs can show one group's table)."""
    default: Any = None
    default_text: str = ""
    """The default in words, when it is computed (None as `default`: "those present")."""
    profile_default: str | None = None
    """Attribute of the Profile that gives the default when the option is not set (`timing.budget_s`)."""
    choices: tuple[str, ...] = ()
    noun: str = ""
    """What one choice is, for the error: "unknown device 'tpu'; valid devices: ..."."""
    range: Range | None = None
    check: Callable[[str, Any], None] | None = None
    """An unusual check, called with the flag and a value that is not None; raises UsageProblem."""
    only_with: str | None = None
    """Checked only when this other option is set (it means nothing without it)."""
    toml: bool = True
    """Whether `[tool.optbench]` may set it."""
    in_manifest: bool = False
    """Whether run.json records its value (it changes what a row measures)."""
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def toml_key(self) -> str | None:
        return self.name if self.toml else None

    def default_words(self, markdown: bool = False) -> str:
        """The default as the help and the docs state it ("" for an off switch or no default)."""
        if self.profile_default is not None:
            per = (f"{p.name} {_number(profile_value(p, self.profile_default))}" for p in PROFILES.values())
            return f"the profile's: {', '.join(per)}"
        if self.default_text:
            return self.default_text
        if self.default is None or self.default is False or self.default == ():
            return ""
        return f"`{_number(self.default)}`" if markdown else _number(self.default)

    def full_help(self) -> str:
        """The help with its choices, range and default, as `pytest --help` shows it."""
        extra = [f"one of {', '.join(self.choices)}"] if self.choices else []
        extra += [str(self.range)] if self.range is not None else []
        default = self.default_words()
        extra += [f"default: {default}"] if default else []
        return f"{self.help} ({'; '.join(extra)})" if extra else self.help

    def validate(self, value: Any) -> None:
        """Raise the option's one-line usage error for a bad value (None is always fine)."""
        if value is None:
            return
        if self.choices:
            items = split(value) if self.kind == "list" else [value]
            unknown = [item for item in items or [] if item not in self.choices]
            if unknown:
                plural = self.noun if self.noun.endswith("s") else self.noun + "s"
                raise UnknownNameError(
                    f"unknown {self.noun} {', '.join(map(repr, unknown))}; valid {plural}: "
                    f"{', '.join(self.choices)}"
                )
        if self.range is not None and value not in self.range:
            raise UsageProblem(self.range.message(self.flag, value))
        if self.check is not None:
            self.check(self.flag, value)


def split(value: str | None) -> list[str] | None:
    """A comma-separated option's items (None when it was not given)."""
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def profile_value(profile: Profile, path: str) -> Any:
    return operator.attrgetter(path)(profile)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: no column breaks, and no `<name>` taken for an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _type_words(setting: Setting) -> str:
    words = {"paths": "path (repeatable)", "bool": "switch"}.get(setting.kind, setting.kind)
    if setting.choices:
        words += ": " + ", ".join(setting.choices)
    if setting.range is not None:
        words += f", {setting.range}"
    return words


def markdown_table(settings: Iterable[Setting]) -> str:
    """A Markdown table of `settings`: flag, [tool.optbench] key, type, default, help."""
    lines = [
        "| flag | [tool.optbench] key | type | default | help |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in settings:
        flag = f"`{s.flag} {s.metavar}`" if s.metavar else f"`{s.flag}`"
        key = f"`{s.toml_key}`" if s.toml_key else "-"
        default = s.default_words(markdown=True) or "-"
        cells = (flag, key, _cell(_type_words(s)), _cell(default), _cell(s.help))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
