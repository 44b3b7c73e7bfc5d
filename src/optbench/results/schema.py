"""The row's typed home: every column of a results row with its dtype, group, unit and one-line doc,
and the `Status` of a case. The writer, the reader, pandas dtypes and the docs' column table all come
from here, so a column is added with one declaration. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1
"""The results format's version, written into every row. Bump it when a column changes meaning or
goes away: an older optbench then refuses the newer files in one line instead of misreading them
(rows without it are version 1)."""


class Status(str, Enum):
    """What became of a case. A str, so rows and frames compare it with plain strings too."""

    PASSED = "passed"
    SKIPPED = "skipped"
    FAILED = "failed"
    OOM = "oom"
    TIMEOUT = "timeout"
    NAN_OUTPUT = "nan_output"
    FAIL_ACCURACY = "fail_accuracy"
    NONDETERMINISTIC_BASELINE = "nondeterministic_baseline"
    DIVERGED = "diverged"

    def __str__(self) -> str:  # the value, in CSV cells and f-strings alike
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class AccuracyVerdict(str, Enum):
    """The paired accuracy verdict of a row against its fp32 reference (column `accuracy_verdict`)."""

    WITHIN = "within floor"
    BELOW = "below floor"
    UNCLEAR = "unclear"
    NO_EVIDENCE = "no evidence"
    """The fp32 model itself is at chance: a change against it says nothing about the technique."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


STATUS_DOC = "(training: non-finite loss, or held-out top-1 at chance after the short training)"
BROKEN = (Status.FAILED, Status.OOM, Status.TIMEOUT, Status.NAN_OUTPUT, Status.DIVERGED)
"""A case that stopped working: after a pass, a regression."""

DTYPES = {"str": "object", "int": "Int64", "float": "float64", "bool": "boolean", "list[float]": "object"}
"""Schema dtype -> the pandas dtype `load` gives the column."""
GROUPS = ("identity", "status", "speed", "cost", "training", "data pipeline", "quality", "context")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str
    """str, int, float, bool or list[float]."""
    group: str
    unit: str
    doc: str
    json_only: bool = False
    """Written to results.jsonl only (not to the CSV): the raw per-round latencies."""


# Order is the CSV's column order; one line a column.
# fmt: off
COLUMNS: tuple[Column, ...] = (
    Column("run_id", "str", "identity", "", "the run this row belongs to"),
    Column("case_id", "str", "identity", "", "readable case id: model-technique-device-bsN (the pytest parameter id)"),
    Column("test", "str", "identity", "", "the benchmark test that ran it (inference, training, data_pipeline)"),
    Column("model", "str", "identity", "", "model name in the registry"),
    Column("task", "str", "identity", "", "the model's task (image_classification, text_classification)"),
    Column("technique", "str", "identity", "", "technique name in the registry, or a stack of them joined by '+'"),
    Column("family", "str", "identity", "", "technique family (baseline, precision, layout, compile, ...); a stack's joined by '+'"),
    Column("device", "str", "identity", "", "cpu, cuda or mps"),
    Column("device_name", "str", "identity", "", "CPU model or GPU name"),
    Column("mode", "str", "identity", "", "inference (forward calls), training (optimizer steps) or data (the input pipeline feeding training steps)"),
    Column("batch_size", "int", "identity", "", "samples per call (training: per optimizer step, the effective batch)"),
    Column("input_shape", "str", "identity", "", "one sample's timed input shape: 3xHxW for images, seqN for token sequences"),
    Column("eval_input_shape", "str", "identity", "", "one sample's input shape on the held-out split (empty without evaluation)"),
    Column("resolution", "int", "identity", "", "timed image side in pixels (empty for text models)"),
    Column("seq_len", "int", "identity", "", "timed tokens per sequence (empty for image models)"),
    Column("dtype", "str", "identity", "", "compute dtype the technique runs in"),
    Column("api", "str", "identity", "", "the API that produced the prepared model (these APIs move fast)"),
    Column("selected", "bool", "identity", "", "False for an eager reference measured only because its case was deselected"),
    Column("weights", "str", "identity", "", "random, trained (on the embedded task or --data-dir) or pretrained"),
    Column("weights_source", "str", "identity", "", "where the weights came from: seed, checkpoint file (cache hit or miss), pretrained file"),
    Column("trained_top1", "float", "identity", "", "held-out top-1 the trained weights reached when training stopped (trained weights only)"),
    Column("target_top1", "float", "identity", "", "the top-1 the model's training recipe aims for"),
    Column("below_target", "bool", "identity", "", "True when training stopped below target_top1: these rows compare techniques on a weak model"),
    Column("status", "str", "status", "", ", ".join(s.value for s in Status)[: -len(", diverged")] + " or diverged " + STATUS_DOC),
    Column("reason", "str", "status", "", "why a case was not passed: skip reason, exception type and message, or the accuracy numbers"),
    Column("hardware_note", "str", "status", "", "the hardware the technique needs to pay off, when this machine lacks it (native bf16, VNNI, CUDA, 2:4 tensor cores): measured anyway, read with that in mind"),
    Column("kernel_note", "str", "status", "", "a slow kernel the prepared model is known to hit, and how to avoid it (int8 depthwise convolutions whose channel counts are not multiples of 8)"),
    Column("latency_ms_min", "float", "speed", "ms", "fastest call, ms"),
    Column("latency_ms_median", "float", "speed", "ms", "median call, ms (training: one optimizer step; data: one batch fed to a training step): the number speedup and throughput use (data rows: the mean)"),
    Column("latency_ms_mean", "float", "speed", "ms", "mean call, ms"),
    Column("latency_ms_stddev", "float", "speed", "ms", "standard deviation of calls, ms"),
    Column("latency_ms_iqr", "float", "speed", "ms", "interquartile range of calls, ms"),
    Column("latency_ms_p90", "float", "speed", "ms", "90th percentile call, ms"),
    Column("latency_ms_p99", "float", "speed", "ms", "99th percentile call, ms"),
    Column("rounds", "int", "speed", "", "timed calls"),
    Column("warmup_rounds", "int", "speed", "", "untimed warm-up calls before them (after the first call)"),
    Column("rel_ci95", "float", "speed", "", "half-width of the median's 95% confidence interval, as a fraction of the median"),
    Column("precision_met", "bool", "speed", "", "rel_ci95 within the profile's target precision"),
    Column("noisy", "bool", "speed", "", "IQR above 10% of the median: treat this row's latency with care"),
    Column("throughput", "float", "speed", "samples/s", "samples per second at the median latency (data rows: samples over the whole epoch's time, stalls included)"),
    Column("speedup", "float", "speed", "x", "eager fp32 median / this median, same model, device, mode and batch, same run"),
    Column("speedup_ci95_low", "float", "speed", "x", "lower end of the speedup's 95% interval (speedup_method says how it was found)"),
    Column("speedup_ci95_high", "float", "speed", "x", "upper end of that interval; an interval reaching within 3% of 1.0 is no clear difference"),
    Column("speedup_method", "str", "speed", "", "how the speedup and its interval were found: paired (the case timed in ABBA blocks against eager in one process; median of the pairs' ratios, distribution-free order-statistic interval at 95% or more over the looks), bootstrap (the two cases timed apart; percentile bootstrap of the ratio of medians, assumes independent samples) or baseline (eager itself)"),
    Column("pairs", "int", "speed", "", "paired timing: pairs of blocks (case and eager) timed"),
    Column("preparations", "int", "speed", "", "paired timing: independent preparations of the case that took turns against eager (2 for the compile and quantization families, whose prepared speed varies from one preparation to the next; 1 in the smoke and gate profiles, which cap it)"),
    Column("preparation_spread", "float", "speed", "x", "with 2 or more preparations: the highest of their median speedups over the lowest (1.0: they agree); the speedup's interval holds this spread"),
    Column("stop_reason", "str", "speed", "", "paired timing: why it stopped: precise (interval within the target), decided (clearly above or below 1, or within 3% of it), hopeless (3x slower than eager or worse), budget, max_pairs"),
    Column("baseline_case_id", "str", "speed", "", "the eager case the speedup is against"),
    Column("baseline_latency_ms", "float", "speed", "ms", "that eager case's median, ms"),
    Column("prepare_s", "float", "speed", "s", "seconds to apply the technique plus the first call (compilation, calibration)"),
    Column("prepare_cached", "bool", "speed", "", "True when the technique's expensive preparation came from the cache (empty: none)"),
    Column("compiled_graphs", "int", "speed", "", "graphs torch.compile compiled while preparing (more than 1: graph breaks)"),
    Column("prepared_per_shape", "bool", "speed", "", "True when the technique was applied again at eval_input_shape (the prepared object is shape-tied)"),
    Column("first_call_ms", "float", "speed", "ms", "the first call alone, ms"),
    Column("peak_mem_mb", "float", "cost", "MiB", "peak memory during the case, MiB: process RSS high-water mark (cpu) or max allocated (cuda)"),
    Column("peak_mem_delta_mb", "float", "cost", "MiB", "peak_mem_mb minus the level when the case started, MiB"),
    Column("peak_mem_vs_fp32", "float", "cost", "x", "peak_mem_delta_mb / that of eager fp32 in the same group (below 1: memory saved, as by gradient accumulation or activation checkpointing)"),
    Column("mem_source", "str", "cost", "", "how peak memory was measured (cpu_rss_peak, cuda_max_allocated)"),
    Column("params", "int", "cost", "", "parameters of the prepared model"),
    Column("nonzero_params", "int", "cost", "", "parameters that are not zero"),
    Column("size_bytes", "int", "cost", "bytes", "bytes of torch.save(state_dict)"),
    Column("size_compressed_bytes", "int", "cost", "bytes", "those bytes after zlib (level 1)"),
    Column("size_reduction", "float", "cost", "%", "percent smaller than eager fp32 of the same group, compressed bytes against compressed bytes (so zeroed weights count as saved, as in a zipped deployment file)"),
    Column("nonzero_fraction", "float", "cost", "", "nonzero_params / params (1.0 for a dense model)"),
    Column("sparsity", "float", "cost", "", "pruning techniques: fraction of the pruned layers' weights that are zero (or channels removed)"),
    Column("calibration_samples", "int", "cost", "", "static quantization: training samples the observers saw"),
    Column("finetune_samples", "int", "cost", "", "pruning: training samples of the seeded fine-tune (0: none at this shape)"),
    Column("technique_notes", "str", "cost", "", "other columns a technique reported, as JSON"),
    Column("converge_steps", "int", "training", "", "training: optimizer steps of the short seeded training from a fresh initialization"),
    Column("converge_batch_size", "int", "training", "", "training: its batch size (the model's recipe's)"),
    Column("converge_loss", "float", "training", "", "training: mean loss of its last 10 steps (NaN or inf: diverged)"),
    Column("converge_top1", "float", "training", "", "training: held-out top-1 after it"),
    Column("converge_top1_fp32", "float", "training", "", "training: the same for eager fp32 in the same group"),
    Column("converge_top1_delta", "float", "training", "", "training: converge_top1 - converge_top1_fp32"),
    Column("converge_s", "float", "training", "s", "training: seconds the short training and its evaluation took (reused: in the run that made it)"),
    Column("converge_cached", "bool", "training", "", "training: True when the short training's result came from an earlier run with the same code, technique, data and machine (empty: reuse off)"),
    Column("converge_task", "str", "training", "", "training: the task it learned and was evaluated on (the plain digits where the image task is hard digits)"),
    Column("num_workers", "int", "data pipeline", "", "data: DataLoader worker processes"),
    Column("workers_over_cores", "bool", "data pipeline", "", "data: True when num_workers exceeds the CPU cores this process may use"),
    Column("pin_memory", "bool", "data pipeline", "", "data: DataLoader(pin_memory=...)"),
    Column("pin_memory_effective", "bool", "data pipeline", "", "data: False when pin_memory was asked for but there is no CUDA to pin for"),
    Column("persistent_workers", "bool", "data pipeline", "", "data: workers kept across epochs"),
    Column("prefetch_factor", "int", "data pipeline", "", "data: batches each worker loads ahead (empty: DataLoader's default, 2)"),
    Column("shuffle", "bool", "data pipeline", "", "data: shuffled order"),
    Column("augment", "bool", "data pipeline", "", "data: RandomResizedCrop + flip (False: resize + center crop)"),
    Column("decoder", "str", "data pipeline", "", "data: pil (PIL.Image) or torchvision (torchvision.io.decode_jpeg)"),
    Column("dataset_images", "int", "data pipeline", "", "data: images in the ImageFolder read"),
    Column("dataset_dir", "str", "data pipeline", "", "data: the folder read (generated JPEGs in the cache, or --pipeline-data)"),
    Column("loader_samples_per_s", "float", "data pipeline", "samples/s", "data: samples per second of the loader alone over 2 epochs, worker start-up included"),
    Column("flops_per_sample", "int", "data pipeline", "FLOP", "FLOPs of one sample's forward pass in the fp32 model (torch.utils.flop_counter); for techniques that remove channels, in the pruned fp32 model; training rows: forward and backward"),
    Column("gflops_per_s", "float", "data pipeline", "GFLOP/s", "achieved GFLOP/s: flops_per_sample x throughput / 1e9"),
    Column("pct_of_peak", "float", "data pipeline", "%", "gflops_per_s as a percentage of the machine's measured ceiling for peak_dtype"),
    Column("peak_gflops_per_s", "float", "data pipeline", "GFLOP/s", "that ceiling: best dense GEMM or convolution GFLOP/s measured on this machine"),
    Column("peak_dtype", "str", "data pipeline", "", "the compute dtype the row is compared in (float32, tfloat32, bfloat16, float16, int8)"),
    Column("eval_samples", "int", "quality", "", "held-out samples the prepared (timed) model was evaluated on"),
    Column("eval_batch_size", "int", "quality", "", "batch size of evaluation: the timed one, or 32 at an eval_input_shape that differs"),
    Column("eval_s", "float", "quality", "s", "seconds that evaluation took (or reading it back, when eval_cached)"),
    Column("eval_cached", "bool", "quality", "", "True when the held-out logits came from an earlier run with the same code, weights, technique, inputs and machine (empty: reuse off)"),
    Column("top1", "float", "quality", "", "held-out top-1 accuracy of the prepared model"),
    Column("top5", "float", "quality", "", "held-out top-5 accuracy (empty with fewer than 5 classes)"),
    Column("top1_fp32", "float", "quality", "", "held-out top-1 of the eager fp32 model of the same group"),
    Column("top1_delta", "float", "quality", "", "top1 - top1_fp32"),
    Column("top1_delta_ci95_low", "float", "quality", "fraction", "lower end of the 95% interval of top1_delta, paired on the same held-out samples (exact, from the samples only one of the two gets right; assumes independent samples)"),
    Column("top1_delta_ci95_high", "float", "quality", "fraction", "upper end of that interval"),
    Column("accuracy_floor_delta", "float", "quality", "fraction", "the floor as a top-1 change: -(1 - accuracy_floor) x top1_fp32, or -points/100 with --accuracy-floor-points"),
    Column("accuracy_verdict", "str", "quality", "", "within floor (the paired interval lies above the floor), below floor (below it: fail_accuracy), unclear (it straddles the floor), or no evidence (the fp32 model is at chance on the task, or in training rows fp32's short training is, so no change can show)"),
    Column("accuracy_note", "str", "quality", "", "unclear accuracy: how many more held-out samples would decide it; no evidence: why the fp32 model shows nothing"),
    Column("accuracy_source", "str", "quality", "", "where the accuracy figures come from: the embedded task (name), or your data (--data-dir) with trained, pretrained or own weights (own: the file or loader, named on the embedded task too); training rows: the short training's task"),
    Column("top1_ratio", "float", "quality", "", "top1 / top1_fp32"),
    Column("accuracy_floor", "float", "quality", "", "the relative floor: top-1 at least this fraction of fp32's (default 0.99, as MLPerf); fail_accuracy when the paired interval of the change lies below it"),
    Column("agreement", "float", "quality", "", "fraction of held-out samples where the top-1 prediction equals fp32's"),
    Column("agreement_ci95_low", "float", "quality", "fraction", "lower end of agreement's exact 95% interval (Clopper-Pearson; assumes independent samples)"),
    Column("agreement_ci95_high", "float", "quality", "fraction", "upper end of that interval"),
    Column("max_abs_error", "float", "quality", "", "largest absolute difference from fp32's logits"),
    Column("mean_abs_error", "float", "quality", "", "mean absolute difference from fp32's logits"),
    Column("cosine_similarity", "float", "quality", "", "mean cosine similarity of each sample's logits with fp32's"),
    Column("threads", "int", "context", "", "torch.get_num_threads()"),
    Column("tf32", "bool", "context", "", "CUDA rows: True when TF32 is allowed for matmuls or cuDNN convolutions (empty on cpu)"),
    Column("torch_version", "str", "context", "", "torch.__version__"),
    Column("torchvision_version", "str", "context", "", "torchvision version"),
    Column("python_version", "str", "context", "", "Python version"),
    Column("machine_fingerprint", "str", "context", "", "hash of CPU model, cores, memory, ISA flags, CPU family/model/stepping, torch's CPU capability and GPU with its compute capability: rows with equal fingerprints ran on alike machines"),
    Column("cpu_capability", "str", "context", "", "the CPU capability torch dispatches kernels for (torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...; unknown when it cannot tell)"),
    Column("cpu_isa", "str", "context", "", "the ISA flags that decide which CPU kernels run, of avx2, avx512f, avx512_vnni, avx_vnni, avx512_bf16, amx_bf16, amx_int8, amx_tile (unknown: /proc/cpuinfo unreadable)"),
    Column("cpu_id", "str", "context", "", "CPU family/model/stepping from /proc/cpuinfo (unknown when unreadable)"),
    Column("cuda_capability", "str", "context", "", "CUDA rows: the GPU's compute capability (9.0 for an H100)"),
    Column("git_sha", "str", "context", "", "commit of the benchmark repository"),
    Column("shard", "str", "context", "", "merged runs: the part K/N of the sharded run that measured this row (empty: not sharded)"),
    Column("mixed_machines", "bool", "context", "", "merged runs: True when the shards ran on machines with different fingerprints (each speedup still compares cases of one shard, on one machine)"),
    Column("model_code_hash", "str", "context", "", "hash of the file that registered the model"),
    Column("technique_code_hash", "str", "context", "", "hash of the file that defines the technique"),
    Column("timestamp", "str", "context", "", "when the case finished (UTC, ISO 8601)"),
    Column("duration_s", "float", "context", "s", "wall time of the whole case: build, prepare, warm-up, timing, costs"),
    Column("reference_ms", "float", "context", "ms", "median ms of a fixed reference workload (384x384 fp32 matmul) timed right after the case, on its device: the gate's latency_vs_reference divides by it"),
    Column("schema_version", "int", "context", "", "the results format's version (this optbench writes and reads up to " f"{SCHEMA_VERSION}): a file of a newer one is refused, not misread"),
)
# fmt: on
RAW_COLUMNS: tuple[Column, ...] = (
    Column("samples_ms", "list[float]", "speed", "ms", "every timed call, in order (JSONL only)", True),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
JSON_ONLY: tuple[str, ...] = tuple(c.name for c in RAW_COLUMNS)
"""Columns written to the JSONL only: the raw per-round latencies."""
BY_NAME: dict[str, Column] = {c.name: c for c in (*COLUMNS, *RAW_COLUMNS)}
TECHNIQUE_COLUMNS = ("sparsity", "calibration_samples", "finetune_samples", "kernel_note")
"""Columns a technique may fill itself (Prepared.columns); anything else goes to technique_notes."""


def typed(name: str, value: Any) -> Any:
    """`value` as column `name`'s dtype (a numpy scalar as the Python one, 8.0 as 8 in an int column),
    or a TypeError naming the column: a producer bug, never written."""
    if value is None:
        return None
    kind = BY_NAME[name].dtype
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (str, list)):
        value = item()  # numpy scalars
    if kind == "str":
        if isinstance(value, Enum):
            return str(value.value)
        if isinstance(value, str):
            return value
    elif kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind == "list[float]":
        if isinstance(value, (list, tuple)):
            return [float(v) for v in value]
    raise TypeError(f"column {name} is {kind}; got {type(value).__name__} {value!r:.60}")


def columns_markdown() -> str:
    """The docs' table of columns, grouped, generated from COLUMNS."""
    lines = []
    for group in GROUPS:
        lines += [f"### {group}", "", "| column | dtype | unit | meaning |", "|---|---|---|---|"]
        for c in (*COLUMNS, *RAW_COLUMNS):
            if c.group == group:
                doc = c.doc.replace("|", "\\|")
                lines.append(f"| `{c.name}` | {c.dtype} | {c.unit} | {doc} |")
        lines.append("")
    return "\n".join(lines)
