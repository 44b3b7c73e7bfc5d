"""The user's own text data: token ids and a label per sequence, one JSON object a line.

DIR/eval.jsonl holds the held-out sequences; DIR/train.jsonl (optional) the train split that
--weights trained trains on:

    {"tokens": [101, 7592, 2088, 102], "label": 1}

Token ids are what the model's embedding takes (tokenize with your own tokenizer first), each below
the spec's vocab_size. A sequence is cut to the model's task length (task_seq_len), or padded at
its end with PAD_ID. Labels are class indices from 0, as the model's outputs are numbered.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

from optbench.catalog.tasks.base import TaskData
from optbench.catalog.tasks.data_dir import TEXT_EVAL, TEXT_TRAIN
from optbench.errors import UsageProblem

PAD_ID = 0
"""Fills a sequence shorter than the model's task length (most tokenizers reserve id 0 for padding)."""


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_token_file(
    file: Path, seq_len: int, vocab_size: int, model: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids (N, seq_len), labels (N,)) from `file`; the first bad line is one UsageProblem."""
    sequences, labels = [], []
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"--data-dir {file} line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageProblem(f"{where} is not JSON: {error.msg}") from None
        tokens = item.get("tokens") if isinstance(item, dict) else None
        label = item.get("label") if isinstance(item, dict) else None
        if not isinstance(tokens, list) or not tokens or not all(map(_is_id, tokens)) or not _is_id(label):
            raise UsageProblem(f'{where}: expected {{"tokens": [ids, ...], "label": k}} with whole numbers')
        bad = next((t for t in tokens if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise UsageProblem(
                f"{where}: token id {bad} is outside {model}'s vocabulary (0 to {vocab_size - 1})"
            )
        if label < 0:
            raise UsageProblem(f"{where}: label {label} is negative (labels are class indices from 0)")
        sequences.append(tokens[:seq_len] + [PAD_ID] * (seq_len - len(tokens)))
        labels.append(label)
    if not sequences:
        raise UsageProblem(f"--data-dir {file} holds no sequences")
    return torch.tensor(sequences, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


@lru_cache(maxsize=8)
def token_file_task(path: Path, seq_len: int, vocab_size: int, model: str) -> TaskData:
    """DIR/eval.jsonl (and DIR/train.jsonl) at `seq_len` tokens, checked against `vocab_size`."""
    eval_x, eval_y = read_token_file(path / TEXT_EVAL, seq_len, vocab_size, model)
    if (path / TEXT_TRAIN).is_file():
        train_x, train_y = read_token_file(path / TEXT_TRAIN, seq_len, vocab_size, model)
    else:
        train_x, train_y = eval_x[:0], eval_y[:0]
    return TaskData(
        f"tokens:{(path / TEXT_EVAL).resolve()}@{seq_len}tok",
        train_x,
        train_y,
        eval_x,
        eval_y,
        int(torch.cat([eval_y, train_y]).max()) + 1,  # labels are indices: the largest names the count
        origin=str(path / TEXT_EVAL),
        classes_exact=False,
    )
