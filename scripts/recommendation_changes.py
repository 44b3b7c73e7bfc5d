"""Which recommendations of a run change under the noise-aware rule? Prints figures, asserts nothing.

    python scripts/recommendation_changes.py RESULTS_DIR_OR_RUN_FOLDER [--floor 0.99]

The old rule (before commit 93d0cba's series): the fastest candidate by point estimate, its
unadjusted 95% interval tested against 1, and accuracy by the point rule: held-out top-1 at least
`floor` x fp32's. The current rule (optbench.report.recommend): the intervals widened for the number
of candidates compared (Bonferroni), and only candidates whose paired accuracy verdict is "within
floor" qualify. Both rules read the same rows, so every difference comes from the rule.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from unittest import mock

import pandas as pd


def old_rule_rows(frame: pd.DataFrame, floor: float) -> pd.DataFrame:
    """The rows as the point accuracy rule saw them: within the floor when top-1 >= floor x fp32."""
    from optbench.results.schema import Status

    out = frame.copy()
    has = out["top1_ratio"].notna() if "top1_ratio" in out else pd.Series(False, index=out.index)
    within = has & (out["top1_ratio"] >= floor)
    out.loc[has, "accuracy_verdict"] = within[has].map({True: "within floor", False: "below floor"})
    judged = has & out["status"].isin([Status.PASSED, Status.FAIL_ACCURACY])
    out.loc[judged & within, "status"] = Status.PASSED
    out.loc[judged & ~within, "status"] = Status.FAIL_ACCURACY
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder, or a results folder (its latest run)")
    parser.add_argument("--floor", type=float, default=0.99, help="the point rule's relative floor")
    options = parser.parse_args()
    from optbench.report import recommend as rec
    from optbench.results import load

    frame = load(options.run)
    new = rec.recommend(frame)
    with mock.patch.object(rec, "_adjusted", lambda c, compared: c):
        old = rec.recommend(old_rule_rows(frame, options.floor))
    changed = 0
    for before, after in zip(old, new, strict=True):
        key = f"{after.model} {after.device} {after.mode} bs{after.batch_size}"
        same = (before.verdict, before.technique) == (after.verdict, after.technique)
        changed += not same
        print(f"{key}: {'same' if same else 'CHANGED'}")
        print(f"  old rule: {before.verdict} {before.technique or ''} - {before.reason}")
        if not same:
            print(f"  new rule: {after.verdict} {after.technique or ''} - {after.reason}")
            for why, names in after.excluded.items():
                print(f"    excluded now, {why}: {', '.join(names)}")
    print(f"\n{changed} of {len(new)} recommendations change")


if __name__ == "__main__":
    main()
