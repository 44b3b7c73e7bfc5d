"""The machine's dense ceilings (measured, cached per machine) and a row's distance from them."""

import json

import pytest

import optbench.measure.ceilings as ceilings
from optbench.measure.ceilings import Ceilings, compute_dtype


def test_ceilings_are_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    # Small workloads keep the test short; the measuring code is the real one.
    monkeypatch.setattr(ceilings, "GEMM_SIZES", {"cpu": (256,), "cuda": (1024,)})
    monkeypatch.setattr(ceilings, "MIN_RUN_S", 0.02)
    monkeypatch.setattr(ceilings, "CONVS", ((16, 14, 3),))
    found = Ceilings(tmp_path).workloads("cpu")
    assert set(found) == {"float32", "bfloat16", "int8"}
    assert set(found["float32"]) == {"gemm256", "conv3x3_c16_14", "conv3x3_c16_14_nhwc"}
    assert all(v > 0 for workloads in found.values() for v in workloads.values())
    files = list((tmp_path / "ceilings").glob("v*-cpu-t*-torch*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["gflops_per_s"] == found

    def no_measuring(device):
        raise AssertionError("measured again despite the cache")

    monkeypatch.setattr(ceilings, "measure", no_measuring)
    again = Ceilings(tmp_path)
    assert again.peak("cpu", "float32") == max(found["float32"].values())
    columns = again.columns("cpu", "bfloat16 (autocast)", 10.0)
    assert columns["peak_dtype"] == "bfloat16"
    assert columns["pct_of_peak"] == pytest.approx(100 * 10.0 / max(found["bfloat16"].values()))
    assert again.columns("cpu", "float32", None)["pct_of_peak"] is None


@pytest.mark.parametrize(
    "dtype, device, tf32, expected",
    [
        ("float32", "cpu", None, "float32"),
        ("bfloat16 (autocast)", "cpu", None, "bfloat16"),
        ("float16 (autocast)", "cuda", False, "float16"),
        ("int8", "cpu", None, "int8"),
        ("float32", "cuda", True, "tfloat32"),
        ("float32", "cuda", False, "float32"),
        ("float32 (int8-rounded activations)", "cpu", None, "float32"),
    ],
)
def test_a_rows_dtype_picks_its_ceiling(dtype, device, tf32, expected):
    assert compute_dtype(dtype, device, tf32) == expected
