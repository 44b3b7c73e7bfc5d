"""`optbench merge SHARD_DIR... --out RUN`: the shards of a sharded run, combined into one run folder
with the same files as an unsharded run. Shards of different commits or configurations, shards that
overlap or leave a gap, are refused in one line before anything is written. Rows measured on
machines with different fingerprints are marked. Reads result files only: no torch."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from optbench.errors import UsageProblem
from optbench.results.manifest import Manifest


def _check(shards: list[tuple[Path, Manifest]]) -> int:
    """Raise a UsageProblem unless the shards are parts 1..N of one sharded run; return N."""
    first_dir, first = shards[0]
    for folder, manifest in shards:
        if manifest.shard is None:
            raise UsageProblem(f"{folder} is not a shard (it ran the whole matrix): nothing to merge")
    for folder, manifest in shards[1:]:
        if manifest.git_sha != first.git_sha:
            raise UsageProblem(
                f"{folder} ran commit {manifest.git_sha or '(none)'}, {first_dir} ran "
                f"{first.git_sha or '(none)'}: shards of different commits do not merge"
            )
        if manifest.config != first.config:
            differ = sorted(
                k for k in {*manifest.config, *first.config} if manifest.config.get(k) != first.config.get(k)
            )
            raise UsageProblem(
                f"{folder} and {first_dir} ran different configurations ({', '.join(differ)}): "
                "shards must run the same command"
            )
    counts = {int(m.shard.split("/")[1]) for _, m in shards}  # type: ignore[union-attr]
    if len(counts) > 1:
        raise UsageProblem(
            f"the shards split the matrix differently ({', '.join(sorted(map(str, counts)))} parts)"
        )
    (count,) = counts
    indices = Counter(int(m.shard.split("/")[0]) for _, m in shards)  # type: ignore[union-attr]
    twice = sorted(k for k, n in indices.items() if n > 1)
    if twice:
        raise UsageProblem(
            f"shards overlap: part {', '.join(map(str, twice))} of {count} is given more than once"
        )
    missing = sorted(set(range(1, count + 1)) - set(indices))
    if missing:
        raise UsageProblem(f"shards leave a gap: part {', '.join(map(str, missing))} of {count} is missing")
    seen: dict[str, Path] = {}
    for folder, manifest in shards:
        for case in manifest.cases:
            if case in seen:
                raise UsageProblem(f"shards overlap: {case} is in both {seen[case]} and {folder}")
            seen[case] = folder
    return count


def merge(
    folders: list[Path], out: Path, write_more: Callable[[pd.DataFrame, Path], None] | None = None
) -> Path:
    """Merge shard run folders into `out` (which must not exist yet); return the results file.

    `write_more(rows, folder)` adds files of a higher layer (the claims) to the merged folder before
    it appears under its name."""
    from optbench.results import ResultsWriter, load

    if not folders:
        raise UsageProblem("give the shards' run folders to merge")
    if out.exists():
        raise UsageProblem(f"--out {out} already exists: a merged run is never written over another")
    shards = [(Path(f), Manifest.read(Path(f))) for f in folders]
    _check(shards)
    frames = []
    for folder, manifest in shards:
        if not manifest.cases:
            continue  # more shards than groups of cases: this one had nothing to run
        frame = load(folder)  # raises one line for a shard with no results
        frame["shard"] = manifest.shard
        frames.append(frame)
    if not frames:
        raise UsageProblem("none of the shards holds any case: nothing to merge")
    rows = pd.concat(frames, ignore_index=True)
    fingerprints = set(rows["machine_fingerprint"].dropna().astype(str))
    rows["mixed_machines"] = len(fingerprints) > 1
    rows["run_id"] = out.name
    tmp = out.with_name(f".{out.name}.merging")
    shutil.rmtree(tmp, ignore_errors=True)
    writer = ResultsWriter(tmp)
    try:
        for row in rows.to_dict("records"):
            writer.append({k: (None if _missing(v) else v) for k, v in row.items()})
    finally:
        writer.close()
    merged = load(tmp)
    if write_more is not None:
        write_more(merged, tmp)
    _merge_benchmark_json([f for f, _ in shards], tmp / "benchmark.json")
    first = shards[0][1]
    Manifest(
        run_id=out.name,
        git_sha=first.git_sha,
        config=first.config,
        cases=[c for _, m in shards for c in m.cases],
        matrix_cases=first.matrix_cases,
        machine_fingerprint=",".join(sorted(fingerprints)),
        versions=first.versions,
        environment=_environment([m for _, m in shards]),
        merged_from=[f"{m.shard} {f}" for f, m in shards],
    ).write(tmp)
    tmp.rename(out)
    return out / "results.jsonl"


def _environment(manifests: list[Manifest]) -> dict[str, str]:
    """The shards' speed-relevant environment: each variable's value, or every shard's where they
    differ (a merged run whose shards ran under different allocators says so)."""
    names = sorted({k for m in manifests for k in m.environment})
    merged = {}
    for name in names:
        values = [m.environment.get(name, "(unset)") for m in manifests]
        same = len(set(values)) == 1
        merged[name] = (
            values[0]
            if same
            else "; ".join(f"shard {m.shard}: {v}" for m, v in zip(manifests, values, strict=True))
        )
    return merged


def _missing(value: object) -> bool:
    try:
        return bool(pd.isna(value))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return False  # a list (samples_ms)


def _merge_benchmark_json(folders: list[Path], target: Path) -> None:
    """pytest-benchmark's JSON of every shard in one file (the first shard's machine and commit info)."""
    merged: dict | None = None
    for folder in folders:
        path = folder / "benchmark.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        if merged is None:
            merged = data
        else:
            merged["benchmarks"].extend(data.get("benchmarks", []))
    if merged is not None:
        target.write_text(json.dumps(merged, indent=2) + "\n")
