import json
import re
from pathlib import Path

import pandas as pd
import pytest

from optbench.results import COLUMN_NAMES, ResultsWriter, load

ROOT = Path(__file__).resolve().parents[1]


def _row(**kw):
    row = {
        "run_id": "r1",
        "case_id": "m-eager-cpu-bs2",
        "model": "m",
        "technique": "eager",
        "status": "passed",
        "batch_size": 2,
        "latency_ms_median": 1.5,
        "selected": True,
        "noisy": False,
        "samples_ms": [1.4, 1.5, 1.6],
    }
    row.update(kw)
    return row


def test_rows_are_on_disk_before_the_writer_is_closed(tmp_path):
    writer = ResultsWriter(tmp_path / "run")
    writer.append(_row())
    writer.append(
        _row(
            case_id="m-bf16-cpu-bs2",
            technique="bf16",
            status="failed",
            reason="RuntimeError: boom",
            latency_ms_median=float("nan"),
        )
    )
    # Not closed: an interrupted run must still have every finished row.
    frame = load(tmp_path / "run" / "results.csv")
    assert list(frame["case_id"]) == ["m-eager-cpu-bs2", "m-bf16-cpu-bs2"]
    assert list(frame.columns[: len(COLUMN_NAMES)]) == list(COLUMN_NAMES)
    assert frame["batch_size"].dtype == "Int64"
    assert frame["selected"].tolist() == [True, True]
    assert pd.isna(frame.loc[1, "latency_ms_median"])
    assert frame.loc[1, "reason"] == "RuntimeError: boom"
    lines = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["samples_ms"] == [1.4, 1.5, 1.6]
    assert json.loads(lines[1])["latency_ms_median"] is None  # NaN is written as null, valid JSON
    writer.close()


def test_load_accepts_a_run_folder_and_reads_samples_from_jsonl(tmp_path):
    writer = ResultsWriter(tmp_path)
    writer.append(_row())
    writer.close()
    frame = load(tmp_path)
    assert frame.loc[0, "samples_ms"] == [1.4, 1.5, 1.6]
    assert frame.loc[0, "selected"] == True  # noqa: E712 (pandas boolean)
    with pytest.raises(FileNotFoundError, match="no such results file or folder"):
        load(tmp_path / "nowhere")


def test_rows_carry_the_schema_version_and_a_newer_one_is_refused(tmp_path):
    from optbench.errors import UsageProblem
    from optbench.results import SCHEMA_VERSION

    writer = ResultsWriter(tmp_path)
    writer.append(_row())
    writer.close()
    assert load(tmp_path).loc[0, "schema_version"] == SCHEMA_VERSION
    assert load(tmp_path / "results.csv").loc[0, "schema_version"] == SCHEMA_VERSION
    newer = tmp_path / "newer.jsonl"
    newer.write_text(
        json.dumps({**json.loads((tmp_path / "results.jsonl").read_text()), "schema_version": 2})
    )
    with pytest.raises(UsageProblem, match="written by a newer optbench"):
        load(newer)
    # appending to a table of other columns (an older optbench's) would misalign it: refused
    (tmp_path / "results.csv").write_text("run_id,case_id\nr,c\n")
    with pytest.raises(UsageProblem, match="has other columns"):
        ResultsWriter(tmp_path)


def test_undocumented_columns_are_rejected(tmp_path):
    writer = ResultsWriter(tmp_path)
    with pytest.raises(KeyError, match="undocumented"):
        writer.append(_row(surprise=1))


def test_every_column_is_documented_in_the_generated_reference():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (ROOT / "docs" / "reference" / "columns.md").read_text()
    assert "<!-- generated: columns -->" in page
    table = hooks.on_page_markdown(page, None, None, None)
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.M))
    assert set(COLUMN_NAMES) <= documented, sorted(set(COLUMN_NAMES) - documented)
    assert "| `status` | str |  | passed, skipped, failed, oom, timeout," in table
