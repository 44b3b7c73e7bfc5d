"""Profiles: how big a run is. Models join a profile through their spec's batch sizes."""

from __future__ import annotations

from dataclasses import dataclass

from optbench.timing import TimingPolicy


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    timing: TimingPolicy
    converge_steps: int = 50
    """Training cases: steps of the short seeded training (--converge-steps)."""
    pipeline_images: int = 256
    """Data cases: JPEGs in the generated dataset (--pipeline-images)."""


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "smoke",
            "a few small models, every technique, short timing: checks the harness in about a minute",
            TimingPolicy(
                warmup_s=0.3,
                warmup_rounds=2,
                warmup_max_s=3.0,
                budget_s=1.0,
                min_rounds=8,
                target_rel_ci=0.05,
            ),
            converge_steps=30,
            pipeline_images=48,
        ),
        Profile(
            "default",
            "the whole zoo at one batch size, 5 s of timing per case",
            TimingPolicy(
                warmup_s=1.0,
                warmup_rounds=3,
                warmup_max_s=10.0,
                budget_s=5.0,
                min_rounds=10,
                target_rel_ci=0.02,
            ),
        ),
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
        ),
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        from optbench.registry import UnknownNameError

        raise UnknownNameError(f"unknown profile {name!r}; valid profiles: {', '.join(PROFILES)}") from None
