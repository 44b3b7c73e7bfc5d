"""A generated text task: find which class's marker tokens a sequence holds most of.

Each sequence hides 3 markers of its class and 2 of a distractor class among noise tokens, at random
positions. An untrained model is at chance (10%); one that learns to count markers gets near 100%.
Deterministic: a seeded generator makes the same data everywhere, nothing is downloaded.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from optbench.catalog.tasks.base import TaskData

CLASSES = 10
MARKERS_PER_CLASS = 5
TRUE_MARKERS = 3
DISTRACTOR_MARKERS = 2
NOISE_START = 100
NOISE_END = 1000  # every text model in the zoo has at least this many token ids
TRAIN, HELD_OUT = 4000, 500
SEED = 0


def _sequences(n: int, seq_len: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    distractors = (labels + torch.randint(1, CLASSES, (n,), generator=gen)) % CLASSES
    x = torch.randint(NOISE_START, NOISE_END, (n, seq_len), generator=gen)
    for i in range(n):
        positions = torch.randperm(seq_len, generator=gen)[: TRUE_MARKERS + DISTRACTOR_MARKERS]
        own = (
            1
            + labels[i] * MARKERS_PER_CLASS
            + torch.randint(0, MARKERS_PER_CLASS, (TRUE_MARKERS,), generator=gen)
        )
        other = (
            1
            + distractors[i] * MARKERS_PER_CLASS
            + torch.randint(0, MARKERS_PER_CLASS, (DISTRACTOR_MARKERS,), generator=gen)
        )
        x[i, positions] = torch.cat([own, other])
    return x, labels


@lru_cache(maxsize=8)
def marker_text_task(seq_len: int, vocab_size: int) -> TaskData:
    if vocab_size < NOISE_END:
        raise ValueError(f"the marker text task needs a vocabulary of at least {NOISE_END} tokens")
    gen = torch.Generator().manual_seed(SEED)
    train_x, train_y = _sequences(TRAIN, seq_len, gen)
    eval_x, eval_y = _sequences(HELD_OUT, seq_len, gen)
    return TaskData(f"marker-text-{seq_len}tok-seed{SEED}", train_x, train_y, eval_x, eval_y, CLASSES)
