"""`optbench ab`'s input: its options and their checks, each bad input one line (UsageProblem) before
anything is started. No torch."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from optbench.errors import UsageProblem

DEFAULT_ROUNDS = 1
DEFAULT_SLICES = 16
DEFAULT_SLICE_ROUNDS = 3
OWNED_OPTIONS = ("--results-dir", "--run-id", "--optbench-compare")
"""pytest options `optbench ab` sets itself for each side."""


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
    """Seconds the confirmation (flagged latency regressions, then screened cases, measured again in
    fresh sessions) may take; 0: none (a flagged regression then fails unconfirmed, and a screened
    case stays unchanged)."""
    step_timeout: float = 1800.0
    """Seconds one test item may take before its session is declared hung and stopped."""
    start_timeout: float = 900.0
    """Seconds both sessions may take to start and collect."""
    malloc: str = "fixed"
    """The allocator both sessions start with (optbench.ab.allocator.MODES)."""


def check_pytest_args(args: list[str]) -> list[str]:
    """The pytest arguments both sides run (default `bench/`); an option ab sets itself is one line."""
    for arg in args:
        for option in OWNED_OPTIONS:
            if arg == option or arg.startswith(option + "="):
                raise UsageProblem(f"{option} is set by optbench ab for each side; leave it out (use --out)")
    return args or ["bench/"]


def check_options(options: AbOptions) -> list[str]:
    """Check the numbers and the pytest arguments; returns the pytest arguments both sides run."""
    if options.rounds < 1:
        raise UsageProblem(f"--rounds takes a whole number of at least 1, got {options.rounds}")
    if not 1 <= options.slices <= 1000:
        raise UsageProblem(f"--slices takes a whole number from 1 to 1000, got {options.slices}")
    if not 1 <= options.slice_rounds <= 1000:
        raise UsageProblem(f"--slice-rounds takes a whole number from 1 to 1000, got {options.slice_rounds}")
    from optbench.ab.allocator import MODES

    if options.malloc not in MODES:
        raise UsageProblem(f"--malloc takes one of {', '.join(MODES)}, got {options.malloc!r}")
    if not options.confirm_budget >= 0:  # also refuses nan
        raise UsageProblem(f"--confirm-budget takes seconds, 0 or more, got {options.confirm_budget}")
    return check_pytest_args(list(options.pytest_args))


def gate_config(options: AbOptions) -> Any:
    """The gate configuration (--config, else pyproject.toml), without fail_on_improvement_pct."""
    from optbench.gate.config import load_gate_config

    config = load_gate_config(
        Path(options.config) if options.config else Path("pyproject.toml"), bool(options.config)
    )
    # A/B compares fresh runs of both sides: a large improvement is good news, not a stale baseline.
    return replace(
        config,
        thresholds=replace(config.thresholds, fail_on_improvement_pct=None),
        cases={p: replace(t, fail_on_improvement_pct=None) for p, t in config.cases.items()},
    )


def output_folder(options: AbOptions) -> Path:
    """--out (default results/ab/<time>), created; one that holds anything is refused."""
    from optbench.results.manifest import new_run_id

    stamp = new_run_id()
    out = (options.out or Path("results") / "ab" / stamp).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageProblem(f"--out {out} already exists and is not empty; nothing is overwritten")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageProblem(f"--out {out} cannot be created: {error.strerror}") from None
    return out
