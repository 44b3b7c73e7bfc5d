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
    monkeypatch.setattr(ceilings, "MAX_CALL_S", 60.0)  # a loaded machine's slow probe leaves none out here
    found = Ceilings(tmp_path).workloads("cpu")
    assert set(found) == {"float32", "bfloat16", "int8"}
    assert set(found["float32"]) == {"probe", "gemm256", "conv3x3_c16_14", "conv3x3_c16_14_nhwc"}
    # int8 through the quantized engine's kernels (what int8_dynamic and FX int8 run), not _int_mm alone
    assert {"qconv3x3_c16_14", "qlinear256", "int_mm256"} <= set(found["int8"])
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


class _Simulated:
    """A workload on a simulated machine: each run advances the clock by what it would take."""

    def __init__(self, clock, flops, gflops_per_s):
        self.clock, self.flops, self.rate = clock, flops, gflops_per_s

    def run(self):
        self.clock.now += 2 * ceilings.MIN_RUN_S + self.flops / (self.rate * 1e9)
        return self.rate


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_ceilings_keep_their_time_bound_on_a_cpu_that_is_200x_slower_at_one_dtype():
    """An AVX2-only CPU: bf16 GEMMs at 0.5 GFLOP/s against 170 in fp32. The slow dtype keeps its probe
    and leaves out what does not fit; the whole measurement stays within its budget."""
    clock = _Clock()
    rates = {"float32": 170.0, "bfloat16": 0.5, "int8": 2.0}
    probes = {d: _Simulated(clock, 2 * 256**3, r) for d, r in rates.items()}
    workloads = {
        d: {f"gemm{n}": _Simulated(clock, 2 * n**3, r) for n in (1024, 2048, 3072)}
        | {f"conv{i}": _Simulated(clock, 1.85e9, r) for i in range(8)}
        for d, r in rates.items()
    }
    found = ceilings.measure("cpu", budget_s=10.0, clock=clock, workloads=workloads, probes=probes,
                             show_progress=False)  # fmt: skip
    longest_call = ceilings.MAX_CALL_S + 2 * ceilings.MIN_RUN_S
    assert clock.now <= 10.0 + longest_call + len(probes) * (2 * ceilings.MIN_RUN_S + 0.07)
    assert set(found["bfloat16"]) == {"probe"} and set(found["int8"]) == {"probe"}
    assert "gemm1024" in found["float32"]  # the fast dtype's workloads fit
    # Without a bound the same workloads would take over a minute on the slow dtypes alone.
    assert sum(w.flops / (w.rate * 1e9) for w in workloads["bfloat16"].values()) > 60
