"""`optbench ab`'s rows: each session's rows with the round, test item and timing slices they came
from (beside the row, never inside it), pooled per case over the rounds, paired slice by slice
between base and head, and written as run folders. The speedup and latency columns of a pooled row
come from optbench.results.derive, as the runner's do. No torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optbench.results.manifest import Manifest, manifest_near
from optbench.results.schema import Status

if TYPE_CHECKING:
    from optbench.gate.paired import Pair

PRIVATE = "_"
"""Keys that start with this are never row columns: a row arriving with any (an older optbench's
rows, or rows tagged the way `optbench ab` once tagged them) loses them on arrival."""


@dataclass
class SessionRow:
    """One row a session wrote, and where it came from."""

    row: dict[str, Any]
    round: int
    nodeid: str
    """The test item that wrote it."""
    slice_ends: list[int] = field(default_factory=list)
    """Sample counts at which the item's timer paused (empty: timed whole)."""

    @classmethod
    def arrived(
        cls, row: Mapping[str, Any], round_: int, nodeid: str, slice_ends: list[int] | None = None
    ) -> SessionRow:
        """A row as a session's results file holds it, private keys dropped."""
        clean = {k: v for k, v in row.items() if not str(k).startswith(PRIVATE)}
        # An eager baseline the selection left out is measured inside the item, unpaced: the pauses
        # belong to the item's own (selected) case only.
        ends = list(slice_ends or []) if clean.get("selected", True) else []
        return cls(clean, round_, nodeid, ends)

    @classmethod
    def tagged(cls, row: Mapping[str, Any]) -> SessionRow:
        """A row dict that carries its round, item and slice ends inside, as `_round`, `_nodeid` and
        `_slice_ends` (the form `optbench ab` used before SessionRow), taken apart."""
        ends = [int(e) for e in row.get("_slice_ends") or []]
        return cls(
            {k: v for k, v in row.items() if not str(k).startswith(PRIVATE)},
            int(row.get("_round", 1)),
            str(row.get("_nodeid", "")),
            ends,
        )


def _session_rows(rows: Iterable[SessionRow | Mapping[str, Any]]) -> list[SessionRow]:
    return [r if isinstance(r, SessionRow) else SessionRow.tagged(r) for r in rows]


def _numbers(row: Mapping[str, Any]) -> list[float]:
    samples = row.get("samples_ms")
    return [float(s) for s in samples] if isinstance(samples, list) else []


def pool(rows: Iterable[Mapping[str, Any]], profile: str | None) -> list[dict[str, Any]]:
    """One row per case: the samples of every round together and the latency, speedup and throughput
    columns computed from them; other columns from the first round (from the first round that did
    not pass, if any). Private keys (see PRIVATE) are dropped."""
    import statistics

    from optbench.matrix.profiles import PROFILES, TimingPolicy
    from optbench.results.derive import latency_stats, speedup_columns

    policy = PROFILES[profile].timing if profile in PROFILES else TimingPolicy()
    by_case: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(str(row["case_id"]), []).append(row)
    pooled: dict[str, dict[str, Any]] = {}
    for case_id, runs in by_case.items():
        bad = [r for r in runs if r.get("status") != Status.PASSED]
        row = {k: v for k, v in (bad[0] if bad else runs[0]).items() if not str(k).startswith(PRIVATE)}
        samples = [s for r in runs for s in _numbers(r)] if not bad else _numbers(row)
        if samples:
            row.update(latency_stats([s / 1e3 for s in samples], policy))
            row["samples_ms"] = samples
        references = [float(r["reference_ms"]) for r in runs if r.get("reference_ms")]
        if references and not bad:  # the fixed workload timed beside the case, once per round
            row["reference_ms"] = statistics.median(references)
        pooled[case_id] = row
    for row in pooled.values():  # speedup against the pooled eager case of the same side
        base = pooled.get(str(row.get("baseline_case_id")))
        if (
            not base
            or not base.get("samples_ms")
            or not row.get("samples_ms")
            or row.get("status") != Status.PASSED
        ):
            continue
        row["baseline_latency_ms"] = base["latency_ms_median"]  # as the runner does, data rows too
        statistic = "mean" if row.get("mode") == "data" else "median"
        row.update(
            speedup_columns(
                row["samples_ms"],
                None if base is row else base["samples_ms"],
                row.get("batch_size"),
                statistic,
            )
        )
    return list(pooled.values())


def paired_slices(
    base_rows: Iterable[SessionRow | Mapping[str, Any]], head_rows: Iterable[SessionRow | Mapping[str, Any]]
) -> dict[str, list[Pair]]:
    """Per case, (base samples, head samples) pairs: slice by slice where both sides' timers paused
    alike, otherwise one pair per round both sides passed; in round order. Rows are SessionRows (a
    dict tagged the old way is taken apart: SessionRow.tagged)."""
    from optbench.gate.paired import pair_slices

    def index(rows: Iterable[SessionRow | Mapping[str, Any]]) -> dict[tuple[str, int], SessionRow]:
        return {(str(r.row["case_id"]), r.round): r for r in _session_rows(rows)}

    base, head = index(base_rows), index(head_rows)
    pairs: dict[str, list[Pair]] = {}
    for (case_id, round_), h in sorted(head.items(), key=lambda kv: kv[0][1]):
        b = base.get((case_id, round_))
        if b is None or b.row.get("status") != Status.PASSED or h.row.get("status") != Status.PASSED:
            continue
        bs, hs = _numbers(b.row), _numbers(h.row)
        if not (bs and hs):
            continue
        sliced = pair_slices(bs, b.slice_ends, hs, h.slice_ends)
        pairs.setdefault(case_id, []).extend(sliced or [(bs, hs)])
    return pairs


def write_run(folder: Path, rows: list[dict[str, Any]], manifest: Manifest | None, run_id: str) -> None:
    """A run folder of `rows` (their known columns), with the session's manifest under `run_id`."""
    from optbench.results import COLUMN_NAMES, JSON_ONLY, ResultsWriter

    known = set(COLUMN_NAMES) | set(JSON_ONLY)
    writer = ResultsWriter(folder)
    try:
        for row in rows:
            writer.append({k: v for k, v in row.items() if k in known})
    finally:
        writer.close()
    if manifest is not None:
        replace(manifest, run_id=run_id, cases=[str(r["case_id"]) for r in rows]).write(folder)


def write_rounds(out: Path, name: str, rows: list[SessionRow], manifest: Manifest | None) -> None:
    """One run folder per round (out/rounds/<name>-<r>/)."""
    for r in sorted({row.round for row in rows}):
        these = [row.row for row in rows if row.round == r]
        write_run(out / "rounds" / f"{name}-{r}", these, manifest, f"{name}-{r}")


def read_manifest(results: Path) -> Manifest | None:
    """The run.json beside a session's results file, None if it has none (or one this optbench cannot
    read: that side's folders are then written without it)."""
    return manifest_near(results)
