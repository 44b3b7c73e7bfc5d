"""The row columns of a timed case: latency statistics, throughput, preparation, memory, size,
FLOPs, and the columns its technique reported about itself."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from optbench.catalog.techniques import Prepared
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.results.derive import latency_stats

if TYPE_CHECKING:
    from optbench.measure.inference import Timed


def timed_columns(case: Case, timed: Timed, policy: TimingPolicy) -> dict[str, Any]:
    """Speed and cost columns of a timed case (its per-call latency is per step in training)."""
    stats = latency_stats(timed.samples, policy)
    throughput = case.batch_size / (stats["latency_ms_median"] / 1e3)
    prepared, memory, flops = timed.prepared, timed.memory, timed.flops_per_sample
    columns = {
        **stats,
        # The weights decide the timed shape (pretrained weights: their own crop size).
        "input_shape": timed.spec.input_shape,
        "resolution": timed.spec.resolution,
        "seq_len": timed.spec.seq_len,
        "dtype": prepared.dtype,
        "api": prepared.api or case.tech.api,
        "warmup_rounds": len(timed.pilot) + 1,
        "throughput": throughput,
        "prepare_s": timed.prepare_s,
        "prepare_cached": timed.ctx.from_cache,
        "compiled_graphs": timed.graphs,
        "first_call_ms": timed.first_call_s * 1e3,
        "peak_mem_mb": memory.peak_mb,
        "peak_mem_delta_mb": memory.delta_mb,
        "mem_source": memory.source,
        "params": timed.params,
        "nonzero_params": timed.nonzero,
        "size_bytes": timed.size,
        "size_compressed_bytes": timed.compressed,
        "flops_per_sample": int(flops) if flops else None,
        "gflops_per_s": flops * throughput / 1e9 if flops else None,
    }
    notes = dict(prepared.columns)
    notes.update({k: v for k, v in timed.extra.items() if v is not None})
    columns.update(technique_columns(replace(prepared, columns=notes), timed.params, timed.nonzero))
    return columns


def technique_columns(prepared: Prepared, params: int, nonzero: int) -> dict[str, Any]:
    """The columns a technique reported (unknown names go to technique_notes, as JSON), and the
    nonzero fraction of the prepared weights."""
    from optbench.results import TECHNIQUE_COLUMNS

    known = {k: v for k, v in prepared.columns.items() if k in TECHNIQUE_COLUMNS}
    notes = {k: v for k, v in prepared.columns.items() if k not in known}
    columns: dict[str, Any] = {**known, "nonzero_fraction": nonzero / params if params else None}
    if notes:
        columns["technique_notes"] = json.dumps(notes, sort_keys=True, default=str)
    return columns
