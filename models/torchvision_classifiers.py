"""Standard torchvision image classifiers (random weights; trained weights come from the accuracy task)."""

from __future__ import annotations

import torchvision.models as tvm

from optbench import image_classifier, register_model

# name -> (builder, batch sizes per profile). Batch 8 keeps every model under about a second per
# call on 2 CPU cores; the full profile adds batch 1 (latency) and 32 (throughput).
_FULL = (1, 8, 32)
_CLASSIFIERS = {
    "resnet18": (tvm.resnet18, {"smoke": (2,), "default": (8,), "full": _FULL}, {"cnn", "resnet"}),
    "resnet50": (tvm.resnet50, {"default": (8,), "full": _FULL}, {"cnn", "resnet"}),
    "mobilenet_v3_large": (tvm.mobilenet_v3_large, {"default": (8,), "full": _FULL}, {"cnn", "mobile"}),
    "efficientnet_b0": (tvm.efficientnet_b0, {"default": (8,), "full": _FULL}, {"cnn", "mobile"}),
    "vit_b_16": (tvm.vit_b_16, {"default": (8,), "full": _FULL}, {"transformer", "vit"}),
}

for _name, (_builder, _batch_sizes, _tags) in _CLASSIFIERS.items():
    register_model(
        image_classifier(
            _name,
            lambda num_classes, b=_builder: b(weights=None, num_classes=num_classes),
            resolution=224,
            batch_sizes=_batch_sizes,
            tags=_tags,
        )
    )
