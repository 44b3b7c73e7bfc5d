"""The run knows its hardware: ISA flags in the fingerprint and in every row, and a note on rows of
techniques that need hardware this machine lacks."""

from __future__ import annotations

import pytest

from optbench.catalog import hardware, machine
from optbench.catalog.techniques import Technique, register_technique
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, RunState
from optbench.results import ResultsWriter, load

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)
AVX512 = {"cpu": "AMD EPYC", "cores": "2", "memory_gb": "24", "cuda_device": "", "cuda_capability": "",
          "cpu_capability": "AVX512", "cpu_isa": "avx2 avx512f avx512_vnni avx512_bf16", "cpu_id": "25/17/1"}  # fmt: skip


@register_technique
class NeedsBf16AndBreaks(Technique):
    name = "test_needs_bf16_breaks"
    family = "precision"
    api = "test"
    hardware = ("bf16",)

    def apply(self, prepared, ctx):
        raise RuntimeError("could not create a primitive descriptor")


@register_technique
class NeedsInt8(Technique):
    name = "test_needs_int8"
    family = "quantization"
    api = "test"
    hardware = ("int8",)

    def apply(self, prepared, ctx):
        return prepared.then(self.api)


def test_the_fingerprint_tells_apart_cpus_that_differ_only_in_their_isa():
    avx2 = {**AVX512, "cpu_capability": "AVX2", "cpu_isa": "avx2", "cpu_id": "25/1/1"}
    assert machine.fingerprint(AVX512) != machine.fingerprint(avx2)
    assert machine.fingerprint(AVX512) != machine.fingerprint({**AVX512, "cpu_isa": "avx2 avx512f"})
    assert machine.fingerprint(AVX512) == machine.fingerprint(dict(AVX512))
    info = machine.machine_info()
    assert info["fingerprint"] == machine.fingerprint(info)
    assert info["cpu_capability"] and info["cpu_isa"] and info["cpu_id"]


def test_an_unreadable_cpuinfo_is_unknown_and_never_a_failure(monkeypatch):
    monkeypatch.setattr(machine, "_cpuinfo_field", lambda name: None)
    for probe in (machine.cpu_isa, machine.cpu_id):
        probe.cache_clear()
    try:
        assert machine.cpu_isa() == machine.UNKNOWN == machine.cpu_id()
        assert hardware.missing("bf16", "cpu") is None  # cannot tell: no note
    finally:
        machine.cpu_isa.cache_clear()
        machine.cpu_id.cache_clear()


@pytest.mark.parametrize(
    "need, device, isa, capability, noted",
    [
        ("bf16", "cpu", "avx2", None, True),
        ("bf16", "cpu", "avx2 avx512f avx512_bf16", None, False),
        ("bf16", "cpu", "avx2 amx_bf16", None, False),
        ("int8", "cpu", "avx2 avx512f", None, True),
        ("int8", "cpu", "avx2 avx_vnni", None, False),
        ("fp16", "cpu", "avx2 avx512f avx512_bf16", None, True),
        ("2:4", "cuda", None, "7.5", True),
        ("2:4", "cuda", None, "9.0", False),
        ("bf16", "cuda", None, "8.0", False),
        (None, "cpu", "avx2", None, False),
    ],
)
def test_what_each_need_pays_off_on(need, device, isa, capability, noted):
    note = hardware.missing(need, device, isa=isa, capability=capability, torch_capability="AVX2")
    assert (note is not None) == noted
    if noted:
        assert note.startswith(f"{need} pays off with ")


def test_rows_carry_the_hardware_and_a_note_where_it_is_missing(tmp_path, registries, monkeypatch):
    monkeypatch.setattr(hardware, "cpu_isa", lambda: "avx2")  # an AVX2-only CPU (Zen 3)
    state = RunState(run_id="t", writer=ResultsWriter(tmp_path), timing=FAST)
    runner = CaseRunner(state)
    row = runner.run(Case("tiny_mlp", "test_needs_int8", "cpu", 2))
    assert row["status"] == "passed"  # still measured: users want the number
    assert row["hardware_note"].startswith("int8 pays off with int8 dot-product instructions")
    with pytest.raises(CaseFailed):
        runner.run(Case("tiny_mlp", "test_needs_bf16_breaks", "cpu", 2))
    state.writer.close()
    rows = load(tmp_path).set_index("technique")
    broken = rows.loc["test_needs_bf16_breaks"]
    assert broken["reason"].startswith("RuntimeError: could not create a primitive descriptor")
    assert "likely the hardware: bf16 pays off with native bf16" in broken["reason"]
    eager = rows.loc["eager"]
    assert eager["hardware_note"] is None or eager["hardware_note"] != eager["hardware_note"]  # none/NaN
    info = machine.machine_info()
    for name in ("cpu_capability", "cpu_isa", "cpu_id"):
        assert set(rows[name]) == {info[name]}
    assert set(rows["machine_fingerprint"]) == {info["fingerprint"]}


@pytest.mark.parametrize(
    "isa, expected", [("avx2", None), ("avx2 avx512f avx512_bf16", "bfloat16"), ("unknown", "bfloat16")]
)
def test_training_recipes_use_bf16_only_where_the_cpu_has_it(monkeypatch, isa, expected):
    monkeypatch.setattr(hardware, "cpu_isa", lambda: isa)
    assert hardware.train_autocast("bfloat16") == expected
    assert hardware.train_autocast(None) is None
