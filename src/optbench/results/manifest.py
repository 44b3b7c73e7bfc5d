"""run.json: what a run was asked to measure, where and with which code, written when it starts, so a
sharded run's parts can be checked against each other before they are merged. Also what names a run
(`new_run_id`) and refuses a newer results format (`refuse_newer_schema`), for run.json and the
results files alike. No torch."""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optbench.errors import UsageProblem
from optbench.results.schema import SCHEMA_VERSION
from optbench.results.values import number

MANIFEST = "run.json"


def new_run_id(now: dt.datetime | None = None) -> str:
    """A fresh run id: the UTC time to the second and 4 random hex digits (20261205-143100-a449), so
    runs sort by when they started and two started in the same second do not collide."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def refuse_newer_schema(version: Any, source: object) -> None:
    """A UsageProblem when `version`, the schema_version read from `source` (a file), is newer than
    this optbench reads; nothing when it is not, or is no number (rows without it are version 1)."""
    found = number(version)
    if found is not None and found > SCHEMA_VERSION:
        raise UsageProblem(
            f"{source} was written by a newer optbench (results schema {found:g}; this one reads up to "
            f"{SCHEMA_VERSION}): upgrade optbench to read it"
        )


@dataclass
class Manifest:
    run_id: str
    git_sha: str
    config: dict[str, Any]
    """Everything that decides which cases run and how (selection, profile, timing options)."""
    cases: list[str]
    """The case ids this run holds (its shard's, when sharded)."""
    matrix_cases: int
    """Cases in the whole matrix (all shards together)."""
    shard: str | None = None
    """'K/N' when this run is part K of N, else None."""
    machine_fingerprint: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    """Environment variables that change speed without changing code: glibc malloc's tunables, a
    preloaded allocator, thread counts (optbench.catalog.machine.speed_environment)."""
    merged_from: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    """The results format's version (optbench.results.SCHEMA_VERSION) this run was written in."""

    def write(self, run_dir: Path) -> None:
        (run_dir / MANIFEST).write_text(
            json.dumps(asdict(self), indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )

    @classmethod
    def read(cls, run_dir: Path) -> Manifest:
        path = run_dir / MANIFEST
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            version = data.get("schema_version", 1)  # first: a newer format may lack what this one needs
            if not isinstance(version, int):
                raise ValueError(f"schema_version {version!r} is not a whole number")
            refuse_newer_schema(version, path)
            manifest = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except FileNotFoundError:
            raise UsageProblem(f"{run_dir} has no {MANIFEST}: not an optbench run folder") from None
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise UsageProblem(f"{path} is not a run manifest optbench can read: {error}") from None
        except OSError as error:
            raise UsageProblem(f"cannot read {path}: {error.strerror or error}") from None
        return manifest


def manifest_near(path: str | Path) -> Manifest | None:
    """The manifest of the run whose results are at `path` (a run folder or a results file), or None
    when there is none or it cannot be read (a results file copied alone)."""
    from optbench.results import resolve

    try:
        return Manifest.read(resolve(path).parent)
    except (FileNotFoundError, UsageProblem):
        return None
