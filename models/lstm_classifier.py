"""An LSTM text classifier: embedding, 2-layer LSTM, linear head on the last hidden state."""

from __future__ import annotations

import torch
from torch import nn

from optbench import register_model, text_classifier
from optbench.catalog.models import TrainRecipe

VOCAB = 1000
SEQ_LEN = 64


class LSTMClassifier(nn.Module):
    def __init__(
        self, num_classes: int, vocab_size: int = VOCAB, embed: int = 128, hidden: int = 256
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(self.embedding(ids))
        return self.head(h[-1])


register_model(
    text_classifier(
        "lstm_classifier",
        lambda num_classes: LSTMClassifier(num_classes),
        seq_len=SEQ_LEN,
        vocab_size=VOCAB,
        task_seq_len=32,
        recipe=TrainRecipe(target_top1=0.9, max_epochs=8, lr=1e-2),
        # The gate times batch 32, not smoke's 4: 3 ms calls were too noisy under optbench ab for
        # a 10% slowdown to be caught (docs/gate.md).
        batch_sizes={"smoke": (4,), "gate": (32,), "default": (32,), "full": (1, 32, 128)},
        tags={"rnn"},
    )
)
