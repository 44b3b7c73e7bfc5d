"""Profiles: how big a run is. Models join a profile through their spec's batch sizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class TimingPolicy:
    warmup_s: float = 1.0
    """Warm up for at least this long (after the first call, which is timed as preparation)."""
    warmup_rounds: int = 3
    """... and for at least this many calls."""
    warmup_max_s: float = 10.0
    """... and past that until calls stop getting faster, for at most this long."""
    budget_s: float = 5.0
    """Time the case for at most about this long (min_rounds wins for very slow calls)."""
    min_rounds: int = 10
    max_rounds: int = 2000
    target_rel_ci: float = 0.02
    """Aim: the 95% confidence interval of the median within +-2% of it."""
    noisy_rel_iqr: float = 0.10
    """Flag a case noisy when its IQR exceeds this fraction of its median."""
    max_preparations: int | None = None
    """At most this many independent preparations of a case (Technique.preparations; None: as many
    as the technique asks). A second one costs a second compile or calibration per case."""

    def with_overrides(
        self, budget_s: float | None = None, target_rel_ci: float | None = None
    ) -> TimingPolicy:
        changes: dict[str, float] = {}
        if budget_s is not None:
            changes["budget_s"] = budget_s
        if target_rel_ci is not None:
            changes["target_rel_ci"] = target_rel_ci
        return replace(self, **changes)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    timing: TimingPolicy
    converge_steps: int = 50
    """Training cases: steps of the short seeded training (--converge-steps)."""
    pipeline_images: int = 256
    """Data cases: JPEGs in the generated dataset (--pipeline-images)."""
    pipeline_block_batches: int = 2
    """Data cases paired with eager: batches in each block's epoch (optbench.measure.data_paired)."""
    image_task: str = "hard_digits"
    """The embedded image task trained weights learn and are evaluated on (no --data-dir): the
    unsaturated hard_digits, or the plain digits (saturated, but trains in seconds)."""
    call_timeout_s: float = 60.0
    """A case one call of which takes longer than this stops there, as a timeout row (--call-timeout):
    bf16 on a CPU without native bf16 can take a minute a call."""
    sizes_from: str | None = None
    """The key of a model spec's batch sizes this profile reads (None: its own name); a model joins
    the profile when that key has batch sizes."""
    techniques: Mapping[str, tuple[str, ...]] | None = None
    """Per mode, the techniques (and stacks) this profile runs when --techniques is not given, each
    where it applies; a device's default stack only on that device (None: every one)."""
    zoo: tuple[str, ...] | None = None
    """The zoo models this profile runs when --models is not given (None: every zoo model with batch
    sizes for it). The user's own models always join."""

    @property
    def batch_key(self) -> str:
        return self.sizes_from or self.name

    def batch_sizes(self, sizes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...] | None:
        """A model's batch sizes in this profile: those under the profile's own name where the model
        gives some (the gate's LSTM), else under `batch_key`; None: the model gives none here."""
        return sizes.get(self.name) or sizes.get(self.batch_key)


# One or two techniques of every family in each mode, and the stacks of autocast with channels_last:
# what smoke and the gate run unless --techniques says otherwise (--techniques all: every one).
EVERY_FAMILY: Mapping[str, tuple[str, ...]] = {
    "inference": (
        "eager",
        "channels_last",
        "bf16_autocast",
        "fp16_autocast",
        "compile",
        "int8_dynamic",
        "int8_static_fx",
        "prune_l1_50",
        "prune_channels_30",
        "channels_last+bf16_autocast",
        "channels_last+fp16_autocast",
    ),
    "training": ("eager", "bf16_autocast", "fp16_autocast", "activation_checkpoint", "grad_accum_2"),
    "data": ("eager", "pin_memory", "workers_2+persistent_workers"),
}

SMOKE = Profile(
    "smoke",
    "two small models, one or two techniques of every family, short timing and one preparation a "
    "case: checks the harness (--techniques all: every technique)",
    TimingPolicy(
        warmup_s=0.3,
        warmup_rounds=2,
        warmup_max_s=3.0,
        budget_s=1.0,
        min_rounds=8,
        target_rel_ci=0.05,
        # A harness check: a second compile or calibration per case would double the time of the
        # cases that cost most (docs/measurement.md, step 5, says what one preparation misses).
        max_preparations=1,
    ),
    converge_steps=30,
    pipeline_images=48,
    # One batch a block: the smoke run checks the harness, and with --techniques all its 13 paired
    # data cases of 4-batch blocks would take several minutes more.
    pipeline_block_batches=1,
    image_task="digits",
    call_timeout_s=10.0,
    techniques=EVERY_FAMILY,
)

# The gate's selection (docs/gate.md): smoke's models, shapes, timing and techniques, so that
# `optbench ab` on it fits a few minutes a side on 2 cores.
GATE = replace(
    SMOKE,
    name="gate",
    description="the pull-request gate's cases: smoke's models and timing, every family and mode, "
    "one or two techniques each",
    sizes_from="smoke",
)

# The default run: one model of each kind (a CNN, a mobile CNN, a ViT, a transformer encoder, an
# LSTM; the transformers at DeiT-Ti's and BERT-mini's sizes, ViT-B/16 and BERT-base are full's) and,
# per mode, one or two techniques of every family plus the stacks users deploy, so that a cold run on
# 2 cores comes near its time target (docs/default-run.md). `full` runs every zoo model with every
# technique and default stack; `--models` and `--techniques` name any of them here.
DEFAULT = Profile(
    "default",
    "one zoo model of each kind, every technique family and the stacks users deploy, 5 s of timing per case",
    TimingPolicy(
        warmup_s=1.0,
        warmup_rounds=3,
        warmup_max_s=10.0,
        budget_s=5.0,
        min_rounds=10,
        target_rel_ci=0.02,
    ),
    zoo=("lstm_classifier", "bert_mini_encoder", "resnet18", "mobilenet_v3_large", "vit_ti_16"),
    techniques={
        "inference": (
            "eager",
            "channels_last",
            "bf16_autocast",
            "fp16_autocast",
            "compile",
            "int8_dynamic",
            "torchao_int8_dynamic",
            "int8_static_fx",
            "prune_l1_50",
            "prune_channels_30",
            "sparse_2to4",
            "prune_l1_50+linear_csr",
            "channels_last+bf16_autocast+compile",
            "channels_last+fp16_autocast+compile",
            "prune_channels_30+int8_static_fx",
            "prune_l1_50+int8_dynamic",
        ),
        "training": EVERY_FAMILY["training"],  # every training technique already
        "data": ("eager", "pin_memory", "decode_jpeg", "workers_2", "workers_2+persistent_workers"),
    },
)

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        SMOKE,
        DEFAULT,
        Profile(
            "full",
            "the whole zoo at latency, default and throughput batch sizes, 15 s of timing per case",
            TimingPolicy(
                warmup_s=2.0,
                warmup_rounds=5,
                warmup_max_s=20.0,
                budget_s=15.0,
                min_rounds=20,
                target_rel_ci=0.01,
            ),
            converge_steps=300,
            pipeline_images=1024,
            pipeline_block_batches=4,
            call_timeout_s=300.0,
        ),
        GATE,
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        from optbench.errors import UnknownNameError

        raise UnknownNameError(f"unknown profile {name!r}; valid profiles: {', '.join(PROFILES)}") from None
