"""Results: one row per case, appended to the run's CSV and JSONL as the run goes; read back with pandas.

The columns are a public interface: keep them stable, and keep the README's table of them in step
(a test checks that every column here is documented there).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

SCHEMA_VERSION = 1
"""The results format's version, written into every row. Bump it when a column changes meaning or
goes away: an older optbench then refuses the newer files in one line instead of misreading them
(rows without it are version 1)."""

# (column, meaning). Order is the CSV's column order.
COLUMNS: tuple[tuple[str, str], ...] = (
    # identity
    ("run_id", "the run this row belongs to"),
    ("case_id", "readable case id: model-technique-device-bsN (the pytest parameter id)"),
    ("test", "the benchmark test that ran it (inference, training, data_pipeline)"),
    ("model", "model name in the registry"),
    ("task", "the model's task (image_classification, text_classification)"),
    ("technique", "technique name in the registry, or a stack of them joined by '+'"),
    ("family", "technique family (baseline, precision, layout, compile, ...); a stack's joined by '+'"),
    ("device", "cpu, cuda or mps"),
    ("device_name", "CPU model or GPU name"),
    (
        "mode",
        "inference (forward calls), training (optimizer steps) or data (the input pipeline feeding "
        "training steps)",
    ),
    ("batch_size", "samples per call (training: per optimizer step, the effective batch)"),
    ("input_shape", "one sample's timed input shape: 3xHxW for images, seqN for token sequences"),
    ("eval_input_shape", "one sample's input shape on the held-out split (empty without evaluation)"),
    ("resolution", "timed image side in pixels (empty for text models)"),
    ("seq_len", "timed tokens per sequence (empty for image models)"),
    ("dtype", "compute dtype the technique runs in"),
    ("api", "the API that produced the prepared model (these APIs move fast)"),
    ("selected", "False for an eager reference measured only because its case was deselected"),
    ("weights", "random, trained (on the embedded task or --data-dir) or pretrained"),
    (
        "weights_source",
        "where the weights came from: seed, checkpoint file (cache hit or miss), pretrained file",
    ),
    (
        "trained_top1",
        "held-out top-1 the trained weights reached when training stopped (trained weights only)",
    ),
    ("target_top1", "the top-1 the model's training recipe aims for"),
    (
        "below_target",
        "True when training stopped below target_top1: these rows compare techniques on a weak model",
    ),
    # status
    (
        "status",
        "passed, skipped, failed, oom, nan_output, fail_accuracy, nondeterministic_baseline or diverged "
        "(training: non-finite loss, or held-out top-1 at chance after the short training)",
    ),
    ("reason", "why a case was not passed: skip reason, exception type and message, or the accuracy numbers"),
    # speed
    ("latency_ms_min", "fastest call, ms"),
    (
        "latency_ms_median",
        "median call, ms (training: one optimizer step; data: one batch fed to a training step): the "
        "number speedup and throughput use (data rows: the mean)",
    ),
    ("latency_ms_mean", "mean call, ms"),
    ("latency_ms_stddev", "standard deviation of calls, ms"),
    ("latency_ms_iqr", "interquartile range of calls, ms"),
    ("latency_ms_p90", "90th percentile call, ms"),
    ("latency_ms_p99", "99th percentile call, ms"),
    ("rounds", "timed calls"),
    ("warmup_rounds", "untimed warm-up calls before them (after the first call)"),
    ("rel_ci95", "half-width of the median's 95% confidence interval, as a fraction of the median"),
    ("precision_met", "rel_ci95 within the profile's target precision"),
    ("noisy", "IQR above 10% of the median: treat this row's latency with care"),
    (
        "throughput",
        "samples per second at the median latency (data rows: samples over the whole epoch's time, "
        "stalls included)",
    ),
    ("speedup", "eager fp32 median / this median, same model, device, mode and batch, same run"),
    ("speedup_ci95_low", "lower end of the speedup's 95% bootstrap interval (raw samples of both cases)"),
    ("speedup_ci95_high", "upper end of that interval; an interval holding 1.0 is no clear difference"),
    ("baseline_case_id", "the eager case the speedup is against"),
    ("baseline_latency_ms", "that eager case's median, ms"),
    ("prepare_s", "seconds to apply the technique plus the first call (compilation, calibration)"),
    ("prepare_cached", "True when the technique's expensive preparation came from the cache (empty: none)"),
    ("compiled_graphs", "graphs torch.compile compiled while preparing (more than 1: graph breaks)"),
    (
        "prepared_per_shape",
        "True when the technique was applied again at eval_input_shape (the prepared object is shape-tied)",
    ),
    ("first_call_ms", "the first call alone, ms"),
    # cost
    (
        "peak_mem_mb",
        "peak memory during the case, MiB: process RSS high-water mark (cpu) or max allocated (cuda)",
    ),
    ("peak_mem_delta_mb", "peak_mem_mb minus the level when the case started, MiB"),
    (
        "peak_mem_vs_fp32",
        "peak_mem_delta_mb / that of eager fp32 in the same group (below 1: memory saved, as by "
        "gradient accumulation or activation checkpointing)",
    ),
    ("mem_source", "how peak memory was measured (cpu_rss_peak, cuda_max_allocated)"),
    ("params", "parameters of the prepared model"),
    ("nonzero_params", "parameters that are not zero"),
    ("size_bytes", "bytes of torch.save(state_dict)"),
    ("size_compressed_bytes", "those bytes after zlib (level 1)"),
    (
        "size_reduction",
        "percent smaller than eager fp32 of the same group, compressed bytes against compressed bytes "
        "(so zeroed weights count as saved, as in a zipped deployment file)",
    ),
    ("nonzero_fraction", "nonzero_params / params (1.0 for a dense model)"),
    (
        "sparsity",
        "pruning techniques: fraction of the pruned layers' weights that are zero (or channels removed)",
    ),
    ("calibration_samples", "static quantization: training samples the observers saw"),
    ("finetune_samples", "pruning: training samples of the seeded fine-tune (0: none at this shape)"),
    ("technique_notes", "other columns a technique reported, as JSON"),
    # training
    ("converge_steps", "training: optimizer steps of the short seeded training from a fresh initialization"),
    ("converge_batch_size", "training: its batch size (the model's recipe's)"),
    ("converge_loss", "training: mean loss of its last 10 steps (NaN or inf: diverged)"),
    ("converge_top1", "training: held-out top-1 after it"),
    ("converge_top1_fp32", "training: the same for eager fp32 in the same group"),
    ("converge_top1_delta", "training: converge_top1 - converge_top1_fp32"),
    ("converge_s", "training: seconds the short training and its evaluation took"),
    # data pipeline
    ("num_workers", "data: DataLoader worker processes"),
    ("workers_over_cores", "data: True when num_workers exceeds the CPU cores this process may use"),
    ("pin_memory", "data: DataLoader(pin_memory=...)"),
    ("pin_memory_effective", "data: False when pin_memory was asked for but there is no CUDA to pin for"),
    ("persistent_workers", "data: workers kept across epochs"),
    ("prefetch_factor", "data: batches each worker loads ahead (empty: DataLoader's default, 2)"),
    ("shuffle", "data: shuffled order"),
    ("augment", "data: RandomResizedCrop + flip (False: resize + center crop)"),
    ("decoder", "data: pil (PIL.Image) or torchvision (torchvision.io.decode_jpeg)"),
    ("dataset_images", "data: images in the ImageFolder read"),
    ("dataset_dir", "data: the folder read (generated JPEGs in the cache, or --pipeline-data)"),
    (
        "loader_samples_per_s",
        "data: samples per second of the loader alone over 2 epochs, worker start-up included",
    ),
    (
        "flops_per_sample",
        "FLOPs of one sample's forward pass in the fp32 model (torch.utils.flop_counter); for "
        "techniques that remove channels, in the pruned fp32 model; training rows: forward and backward",
    ),
    ("gflops_per_s", "achieved GFLOP/s: flops_per_sample x throughput / 1e9"),
    ("pct_of_peak", "gflops_per_s as a percentage of the machine's measured ceiling for peak_dtype"),
    ("peak_gflops_per_s", "that ceiling: best dense GEMM or convolution GFLOP/s measured on this machine"),
    ("peak_dtype", "the compute dtype the row is compared in (float32, tfloat32, bfloat16, float16, int8)"),
    # quality
    ("eval_samples", "held-out samples the prepared (timed) model was evaluated on"),
    ("eval_batch_size", "batch size of evaluation: the timed one, or 32 at an eval_input_shape that differs"),
    ("eval_s", "seconds that evaluation took"),
    ("top1", "held-out top-1 accuracy of the prepared model"),
    ("top5", "held-out top-5 accuracy (empty with fewer than 5 classes)"),
    ("top1_fp32", "held-out top-1 of the eager fp32 model of the same group"),
    ("top1_delta", "top1 - top1_fp32"),
    ("top1_ratio", "top1 / top1_fp32 (fail_accuracy below accuracy_floor)"),
    ("accuracy_floor", "the ratio under which a case is fail_accuracy (default 0.99, as MLPerf)"),
    ("agreement", "fraction of held-out samples where the top-1 prediction equals fp32's"),
    ("max_abs_error", "largest absolute difference from fp32's logits"),
    ("mean_abs_error", "mean absolute difference from fp32's logits"),
    ("cosine_similarity", "mean cosine similarity of each sample's logits with fp32's"),
    # context
    ("threads", "torch.get_num_threads()"),
    ("tf32", "CUDA rows: True when TF32 is allowed for matmuls or cuDNN convolutions (empty on cpu)"),
    ("torch_version", "torch.__version__"),
    ("torchvision_version", "torchvision version"),
    ("python_version", "Python version"),
    (
        "machine_fingerprint",
        "hash of CPU model, cores, memory and GPU: rows with equal fingerprints ran on alike machines",
    ),
    ("git_sha", "commit of the benchmark repository"),
    ("shard", "merged runs: the part K/N of the sharded run that measured this row (empty: not sharded)"),
    (
        "mixed_machines",
        "merged runs: True when the shards ran on machines with different fingerprints (each speedup "
        "still compares cases of one shard, on one machine)",
    ),
    ("model_code_hash", "hash of the file that registered the model"),
    ("technique_code_hash", "hash of the file that defines the technique"),
    ("timestamp", "when the case finished (UTC, ISO 8601)"),
    ("duration_s", "wall time of the whole case: build, prepare, warm-up, timing, costs"),
    (
        "reference_ms",
        "median ms of a fixed reference workload (384x384 fp32 matmul) timed right after the case, on "
        "its device: the gate's latency_vs_reference divides by it",
    ),
    (
        "schema_version",
        "the results format's version (this optbench writes and reads up to "
        f"{SCHEMA_VERSION}): a file of a newer one is refused, not misread",
    ),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)
TECHNIQUE_COLUMNS = ("sparsity", "calibration_samples", "finetune_samples")
"""Columns a technique may fill itself (Prepared.columns); anything else goes to technique_notes."""
JSON_ONLY = ("samples_ms",)
"""Columns written to the JSONL only: the raw per-round latencies."""

STATUSES = (
    "passed",
    "skipped",
    "failed",
    "oom",
    "timeout",
    "nan_output",
    "fail_accuracy",
    "nondeterministic_baseline",
    "diverged",
)

_INT_COLUMNS = (
    "schema_version",
    "batch_size",
    "resolution",
    "seq_len",
    "rounds",
    "warmup_rounds",
    "threads",
    "params",
    "nonzero_params",
    "size_bytes",
    "size_compressed_bytes",
    "calibration_samples",
    "finetune_samples",
    "flops_per_sample",
    "eval_samples",
    "eval_batch_size",
    "compiled_graphs",
    "converge_steps",
    "converge_batch_size",
    "num_workers",
    "prefetch_factor",
    "dataset_images",
)
_BOOL_COLUMNS = (
    "below_target",
    "selected",
    "precision_met",
    "noisy",
    "prepare_cached",
    "prepared_per_shape",
    "tf32",
    "workers_over_cores",
    "pin_memory",
    "pin_memory_effective",
    "persistent_workers",
    "shuffle",
    "augment",
    "mixed_machines",
)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


class ResultsWriter:
    """Appends rows to results.csv and results.jsonl in a run folder, flushing after each row so an
    interrupted run keeps every finished case."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.run_dir / "results.csv"
        self.jsonl_path = self.run_dir / "results.jsonl"
        new = not self.csv_path.exists()
        if not new:  # appending (the same --run-id again): only to a table of the same columns
            with self.csv_path.open(encoding="utf-8", newline="") as existing:
                header = next(csv.reader(existing), [])
            if header and header != list(COLUMN_NAMES):
                from optbench.errors import UsageProblem

                raise UsageProblem(
                    f"{self.csv_path} has other columns (written by another optbench version): "
                    "rows cannot be added to it; use another --run-id"
                )
        self._csv_file = self.csv_path.open("a", newline="", encoding="utf-8")
        self._csv = csv.DictWriter(self._csv_file, fieldnames=COLUMN_NAMES, extrasaction="ignore")
        if new:
            self._csv.writeheader()
            self._csv_file.flush()
        self._jsonl_file = self.jsonl_path.open("a", encoding="utf-8")

    def append(self, row: Mapping[str, Any]) -> None:
        unknown = set(row) - set(COLUMN_NAMES) - set(JSON_ONLY)
        if unknown:
            raise KeyError(f"row has undocumented columns: {sorted(unknown)}")
        full = {name: _clean(row.get(name)) for name in (*COLUMN_NAMES, *JSON_ONLY)}
        full["schema_version"] = SCHEMA_VERSION
        self._csv.writerow({k: ("" if v is None else v) for k, v in full.items()})
        self._csv_file.flush()
        self._jsonl_file.write(json.dumps(full) + "\n")
        self._jsonl_file.flush()

    def close(self) -> None:
        self._csv_file.close()
        self._jsonl_file.close()


def resolve(path: str | os.PathLike[str]) -> Path:
    """A run folder, `results/latest`, or a results.csv/.jsonl file -> the file to read."""
    p = Path(path)
    if p.is_dir():
        for name in ("results.jsonl", "results.csv"):
            if (p / name).exists():
                return p / name
        raise FileNotFoundError(f"no results.csv or results.jsonl in {p}")
    if not p.exists():
        raise FileNotFoundError(f"no such results file or folder: {p}")
    return p


def _read(file: Path) -> pd.DataFrame:
    """The rows of one results file; a file that is empty, truncated, corrupt or not optbench's is a
    UsageProblem naming it (one line), never a parser traceback."""
    from optbench.errors import UsageProblem

    try:
        size = file.stat().st_size
        if file.is_dir():
            raise IsADirectoryError(21, "is a folder, not a file")
    except OSError as error:
        raise UsageProblem(f"cannot read {file}: {error.strerror or error}") from None
    if size == 0:
        raise UsageProblem(f"{file} is empty: no rows to read (the run wrote nothing yet?)")
    try:
        if file.suffix == ".jsonl":
            rows = []
            with file.open(encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except ValueError:
                            raise UsageProblem(
                                f"{file} line {number} is truncated or corrupt; the other rows are intact "
                                "(read results.csv beside it, or remove that line)"
                            ) from None
            frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=[*COLUMN_NAMES, *JSON_ONLY])
        else:
            frame = pd.read_csv(file, keep_default_na=True)
    except UsageProblem:
        raise
    except OSError as error:  # unreadable (permissions, a folder where the file should be, I/O)
        raise UsageProblem(f"cannot read {file}: {error.strerror or error}") from None
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageProblem(f"{file} is not a results file optbench can read: {message}") from None
    if "case_id" not in frame.columns:
        raise UsageProblem(f"{file} is not an optbench results file: it has no case_id column")
    if "schema_version" in frame.columns:
        versions = pd.to_numeric(frame["schema_version"], errors="coerce")
        newest = versions.max()
        if pd.notna(newest) and newest > SCHEMA_VERSION:
            raise UsageProblem(
                f"{file} was written by a newer optbench (results schema {newest:g}; this one reads up "
                f"to {SCHEMA_VERSION}): upgrade optbench to read it"
            )
    return frame


def load(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read one run's rows (a run folder, `results/latest`, results.csv or results.jsonl) as a DataFrame.

    From JSONL the frame also has `samples_ms`, the raw per-round latencies."""
    file = resolve(path)
    frame = _read(file)
    missing = [name for name in COLUMN_NAMES if name not in frame.columns]
    if missing:  # all at once: one column at a time fragments the frame (pandas warns)
        frame = pd.concat(
            [frame, pd.DataFrame(pd.NA, index=frame.index, columns=missing, dtype=object)], axis=1
        )
    for name in _INT_COLUMNS:
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("Int64")
    for name in _BOOL_COLUMNS:
        frame[name] = (
            frame[name]
            .map(
                lambda v: pd.NA if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) == "True"
            )
            .astype("boolean")
        )
    extra = [c for c in frame.columns if c not in COLUMN_NAMES]
    return frame[[*COLUMN_NAMES, *extra]]
