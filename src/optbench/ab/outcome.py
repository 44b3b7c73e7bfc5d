"""`optbench ab`'s outcome: the gate's verdicts on what the two sessions measured (those of `optbench
compare` on the pooled rows, latency on the pairs of slices: optbench/gate/paired.py), the
confirmation of a flagged regression, and gate.md / gate.json. No torch."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optbench.ab.allocator import Allocator
from optbench.ab.options import AbOptions
from optbench.ab.pooling import paired_slices, pool, read_manifest, write_rounds, write_run
from optbench.ab.sessions import Measured, Side, short
from optbench.errors import UsageProblem
from optbench.results.schema import Status

EXIT_OK, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 130
GATED = "latency_ms"
"""The latency metric A/B gates on. Both sides run on one machine, interleaved, so absolute latency
needs no normalizing; latency_vs_eager and latency_vs_reference divide all of a case's samples by one
other measured number, whose own noise shifts the whole distribution (a false alarm on identical code
in our measurements), so they are not computed here."""
NORMALIZERS = ("baseline_latency_ms", "reference_ms")


@dataclass
class AbRun:
    """What one A/B run measured, for the verdicts and the outputs."""

    options: AbOptions
    measured: Measured
    out: Path
    base_sha: str
    head_sha: str
    dirty: bool
    note: str
    """Which optbench each side imported."""
    wall_s: float
    confirmation: dict[str, Any] | None = None
    """What the confirmation measured again and found (gate.json's ab.confirmation)."""
    allocator: Allocator = field(default_factory=lambda: Allocator("inherit"))
    """What both sessions' allocator ran with (gate.json's ab.allocator); the driver sets it, and a
    run built without the driver started no session with settings of ours."""

    @property
    def sides(self) -> dict[str, Side]:
        return self.measured.sides

    @property
    def common(self) -> list[str]:
        return self.measured.common


Remeasure = Callable[[list[str]], Measured]
"""Measures the given test items again in a fresh pair of sessions."""


def gate(run: AbRun, config: Any, remeasure: Remeasure | None = None) -> int:
    """Pool and write each side's rows, judge them, write gate.md and gate.json; the exit code."""
    from optbench.gate import paired
    from optbench.gate.render import verdicts_json
    from optbench.gate.verdicts import NOT_COMPARABLE, REGRESSED, Verdict, acknowledge, compare, failed
    from optbench.results import load

    base, head = run.sides["base"], run.sides["head"]
    manifests = {name: read_manifest(side.results) for name, side in run.sides.items()}
    profile = manifests["head"].config.get("profile") if manifests["head"] else None
    for side in run.sides.values():
        write_rounds(run.out, side.name, side.rows, manifests[side.name])
        pooled = pool([r.row for r in side.rows], profile)
        write_run(run.out / side.name, pooled, manifests[side.name], side.name)
    if not base.rows or not head.rows:
        raise UsageProblem(
            f"no rows from the {'base' if not base.rows else 'head'} session: are these optbench benchmarks? "
            f"(logs: {base.log}, {head.log})"
        )
    base_frame, head_frame = load(run.out / "base"), load(run.out / "head")
    changed = code_changes(base_frame, head_frame)
    for frame in (base_frame, head_frame):
        frame["model_code_hash"] = frame["technique_code_hash"] = ""  # changed code is what A/B measures
        for column in NORMALIZERS:  # latency is gated as latency_ms only (see GATED)
            if column in frame:
                frame[column] = None
    # Both sides ran the same pytest arguments: every case of base is asked of head as well.
    asked = set(base_frame["case_id"].astype(str))
    verdicts = compare(base_frame, head_frame, config, asked)
    verdicts = [v for v in verdicts if not v.metric.startswith("latency") or v.metric == GATED]
    pairs = paired_slices(base.rows, head.rows)
    ratios = {case_id: paired.ratios(found) for case_id, found in pairs.items()}
    gated = [v for v in verdicts if v.metric == GATED and v.p_value is not None]
    confirming = remeasure is not None and run.options.confirm_budget > 0
    judged = paired.decide(gated, pairs, config.correction, config.for_case, screen=confirming)
    unpaired = sorted({v.case_id for v in gated} - judged)
    for v in gated:
        if v.case_id in unpaired:
            # Not gated: a test on pooled samples false-alarmed on shared machines (16% in our runs),
            # and a case with too few pairs cannot be judged on them. Its rows still show.
            v.verdict = NOT_COMPARABLE
            v.reason = (
                f"not gated: fewer than {paired.MIN_PAIRS} pairs of timing slices (a loader epoch is "
                "timed whole; a base older than the slices times its cases whole)"
            )
    acknowledge(gated, config)  # the paired test decided these after compare() read the ignore list
    interrupted = False
    if remeasure is not None:
        interrupted = confirm(run, verdicts, judged, pairs, config, remeasure, profile)
    if head.crashed_on:  # a head that crashes or hangs on a case has regressed there
        crashed = short(head.crashed_on)
        verdicts = [v for v in verdicts if not (v.case_id == crashed and v.metric == "case")]
        verdicts.append(Verdict(crashed, "status", REGRESSED, reason=f"the head session {head.dead}"))
    text = markdown(run, verdicts, base_frame, head_frame, ratios, changed, config, unpaired)
    payload = json.loads(verdicts_json(verdicts))
    payload["ab"] = {
        "base_ref": run.options.base,
        "base_sha": run.base_sha,
        "head_sha": run.head_sha,
        "head_uncommitted_changes": run.dirty,
        "rounds": run.options.rounds,
        "slices": run.options.slices,
        "slice_rounds": run.options.slice_rounds,
        "pytest_args": run.options.pytest_args,
        "common_items": len(run.common),
        "wall_s": run.wall_s,
        "sessions": {
            n: {"returncode": s.returncode, "stopped": s.dead, "log": str(s.log)}
            for n, s in run.sides.items()
        },
        "paired_ratios": ratios,
        "confirmation": run.confirmation,
        "code_changed": changed,
        "imports": run.note,
        "allocator": run.allocator.record(),
    }
    data = json.dumps(payload, indent=2) + "\n"
    for target, content in (
        (run.out / "gate.md", text),
        (run.out / "gate.json", data),
        (run.options.markdown, text),
        (run.options.json, data),
    ):
        if target is not None:
            try:
                Path(target).write_text(content, encoding="utf-8")
            except OSError as error:
                raise UsageProblem(f"could not write {target}: {error.strerror}") from None
    print(text, end="")
    print(f"optbench ab: wrote {run.out} (base/, head/, rounds/, gate.md, gate.json)", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    if failed(verdicts):
        return EXIT_REGRESSION
    both = set(base_frame.loc[base_frame["status"] == Status.PASSED, "case_id"]) & set(
        head_frame.loc[head_frame["status"] == Status.PASSED, "case_id"]
    )
    if not both:
        raise UsageProblem(
            "no case passed on both base and head (skipped or failed on one side): nothing was gated "
            f"(see {run.out / 'gate.md'})"
        )
    return EXIT_OK


def confirm(
    run: AbRun,
    verdicts: list[Any],
    judged: set[str],
    first: dict[str, list[Any]],
    config: Any,
    remeasure: Remeasure,
    profile: str | None,
) -> bool:
    """Measure the flagged latency regressions again in fresh sessions, within the budget, and mark
    them confirmed or not on both measurements' pairs (`first` and the fresh ones; see
    optbench/ab/confirmation.py); the second runs go to confirm/base and confirm/head. Returns True
    when Ctrl-C stopped it (the first verdicts stand, unconfirmed)."""
    from optbench.ab import confirmation as ab_confirm
    from optbench.gate import paired

    item_of = {str(r.row["case_id"]): r.nodeid for r in run.sides["head"].rows}
    measured = run.measured
    plan = ab_confirm.choose(
        verdicts, judged, item_of, measured.item_seconds, measured.start_s, run.options.confirm_budget
    )
    if not plan.cases and not plan.left_out and not plan.unscreened:
        return False
    record: dict[str, Any] = {
        "budget_s": run.options.confirm_budget,
        "estimate_s": round(plan.estimate_s, 1),
        "cases": plan.cases,
        "screened": [v.case_id for v in verdicts if v.screened and v.case_id in plan.cases],
        "left_out": plan.left_out,
        "unscreened": plan.unscreened,
    }
    run.confirmation = record
    if not plan.cases:
        return False
    print(
        f"optbench ab: {len(plan.cases)} latency regression(s) flagged; measuring again in fresh sessions "
        f"(about {plan.estimate_s:.0f} s): {', '.join(plan.cases)}",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    try:
        second = remeasure(plan.items)
    except KeyboardInterrupt:
        record["error"] = "interrupted: the first verdicts stand, unconfirmed"
        print(f"optbench ab: confirmation {record['error']}", file=sys.stderr)
        return True
    except UsageProblem as problem:
        record["error"] = f"could not measure again: {problem}"
        print(f"optbench ab: confirmation {record['error']}", file=sys.stderr)
        return False
    finally:
        record["wall_s"] = round(time.monotonic() - started, 1)
    for side in second.sides.values():
        folder = run.out / "confirm" / side.name
        rows = pool([r.row for r in side.rows], profile)
        write_run(folder, rows, read_manifest(side.results), f"confirm-{side.name}")
    pairs = paired_slices(second.sides["base"].rows, second.sides["head"].rows)
    again = ab_confirm.judge(verdicts, plan.cases, first, pairs, config)
    record["paired_ratios"] = {c: paired.ratios(pairs.get(c, [])) for c in plan.cases}
    record["verdicts"] = {c: again[c].verdict if c in again else None for c in plan.cases}
    # The size of the change both measurements agree on (ab_confirm: geometric mean of their medians).
    record["ratios"] = {c: round(again[c].ratio, 4) for c in plan.cases if c in again}
    return False


def code_changes(base: Any, head: Any) -> list[str]:
    """Cases whose model or technique code differs between base and head (what A/B measures)."""
    changed = []
    base_hashes = {
        str(r["case_id"]): (r.get("model_code_hash"), r.get("technique_code_hash"))
        for _, r in base.iterrows()
    }
    for _, r in head.iterrows():
        before = base_hashes.get(str(r["case_id"]))
        if before is None:
            continue
        what = [
            name
            for name, old, new in zip(
                ("model", "technique"),
                before,
                (r.get("model_code_hash"), r.get("technique_code_hash")),
                strict=True,
            )
            if str(old) != str(new)
        ]
        if what:
            changed.append(f"`{r['case_id']}` ({' and '.join(what)} code)")
    return changed


def markdown(
    run: AbRun,
    verdicts: list[Any],
    base: Any,
    head: Any,
    ratios: dict[str, list[float]],
    changed: list[str],
    config: Any,
    unpaired: list[str],
) -> str:
    """gate.md: the A/B run in a line, `optbench compare`'s tables, the paired ratios and notes."""
    from optbench.gate.render import markdown as verdicts_markdown

    rounds = run.options.rounds
    lines = [
        f"# optbench ab: base `{run.options.base}` ({run.base_sha[:12]}) vs head {run.head_sha[:12]}"
        f"{' + uncommitted changes' if run.dirty else ''}",
        "",
        f"{rounds} round{'s' if rounds != 1 else ''}, {len(run.common)} test items on both sides, "
        f"interleaved case by case on one machine, each case's timing in {run.options.slices} "
        f"alternating slices; {run.wall_s:.0f} s in all. "
        f"{run.note[0].upper() + run.note[1:]}. Allocator: {run.allocator.describe()}.",
        "",
        *verdicts_markdown(verdicts, base, head).rstrip("\n").split("\n"),
        *_pairs_markdown(ratios, config),
    ]
    notes = []
    for side in run.sides.values():
        if side.dead:
            notes.append(f"- the {side.name} session {side.dead} (log: `{side.log}`)")
        elif side.returncode not in (0, 1, None):
            notes.append(
                f"- the {side.name} session ended with pytest exit code {side.returncode} (log: `{side.log}`)"
            )
    for name, side in run.sides.items():
        only = [i for i in side.items if i not in set(run.common)]
        if only:
            shown = ", ".join(f"`{short(i)}`" for i in only[:10])
            notes.append(f"- {len(only)} test item(s) only on {name}, run once: {shown}")
    if unpaired:
        shown = ", ".join(f"`{c}`" for c in unpaired[:10]) + (" ..." if len(unpaired) > 10 else "")
        notes.append(
            f"- {len(unpaired)} case(s) not gated on latency: too few pairs of timing slices to judge on "
            f"pairs (data-pipeline epochs are timed whole), and a test on pooled samples false-alarms on "
            f"a shared machine: {shown}. Their accuracy, size and status are still gated."
        )
    notes += confirmation_notes(run.confirmation)
    if changed:
        more = f" and {len(changed) - 20} more" if len(changed) > 20 else ""
        notes.append(
            f"- code changed (compared anyway: the change is what A/B measures): {', '.join(changed[:20])}{more}"
        )
    if notes:
        lines += ["", "**Notes:**", *notes]
    return "\n".join(lines) + "\n"


def _pairs_markdown(ratios: dict[str, list[float]], config: Any) -> list[str]:
    import statistics

    from optbench.gate.paired import MIN_PAIRS

    if not ratios:
        return []
    lines = [
        "",
        "### Paired ratios",
        "",
        "Head's median latency over base's in each pair of timing slices (or each round, where a side "
        "could not slice), the two measured moments apart on this machine. A latency change fails only "
        "when the one-sided signed-rank test on the pairs is significant (after correction, or before "
        "it for a case measured again), the median ratio passes the A/B threshold, and it holds when a "
        "fresh pair of sessions measures it again (both measurements weighed together for its size; "
        "the fresh one's own test, corrected, for its significance). (In "
        "the verdicts above, baseline and this run are the pooled medians; the latency ratio and its "
        "interval are the pairs'.)",
        "",
        "| case | pairs | median | range | past the threshold |",
        "|---|---|---|---|---|",
    ]
    for case_id in sorted(ratios):
        found = ratios[case_id]
        if not found:
            continue
        t = config.for_case(case_id)
        slower = 1 + (t.ab_latency_pct if len(found) >= MIN_PAIRS else t.latency_pct) / 100
        up, down = sum(r > slower for r in found), sum(r < 1 / slower for r in found)
        past = f"{up} slower, {down} faster" if up or down else "none"
        lines.append(
            f"| `{case_id}` | {len(found)} | {statistics.median(found):.3f} | "
            f"{min(found):.3f} to {max(found):.3f} | {past} |"
        )
    return lines


def confirmation_notes(record: dict[str, Any] | None) -> list[str]:
    """gate.md's notes on the confirmation (gate.json's ab.confirmation)."""
    if not record:
        return []
    notes = []
    if record.get("cases"):
        found, both = record.get("verdicts") or {}, record.get("ratios") or {}
        shown = ", ".join(
            f"`{c}` ({found.get(c) or 'not judged'}"
            + (f", {both[c]:.3g}x over both measurements)" if c in both else ")")
            for c in record["cases"]
        )
        took = f" in {record['wall_s']:.0f} s" if "wall_s" in record else ""
        notes.append(
            f"- latency regressions measured again in a fresh pair of sessions{took} (a regression fails "
            f"only if it holds over both measurements): {shown}"
        )
        if record.get("screened"):
            notes.append(
                "- of which screened (significant before the correction only; they fail only if the "
                f"fresh sessions confirm them): {', '.join(f'`{c}`' for c in record['screened'])}"
            )
    if record.get("error"):
        notes.append(f"- confirmation: {record['error']}")
    if record.get("left_out"):
        shown = ", ".join(f"`{c}`" for c in record["left_out"])
        notes.append(
            f"- not measured again within the {record['budget_s']:g} s confirmation budget (they fail "
            f"unconfirmed; raise `--confirm-budget`): {shown}"
        )
    if record.get("unscreened"):
        shown = ", ".join(f"`{c}`" for c in record["unscreened"])
        notes.append(
            f"- screened but not measured again within the {record['budget_s']:g} s confirmation budget "
            f"(they stay unchanged): {shown}"
        )
    return notes
