"""Standard torchvision image classifiers (random weights; trained weights come from the accuracy task)."""

from __future__ import annotations

import torchvision.models as tvm

from optbench import image_classifier, register_model
from optbench.modelspec import TrainRecipe

# Trained (digits) weights are trained, timed and evaluated at 32x32: on 2 CPU cores the whole zoo
# trains in minutes at this size, and every model here still learns the task.
_TASK_RESOLUTION = 32
_RECIPES = {
    "resnet18": TrainRecipe(target_top1=0.95, max_epochs=4, lr=3e-3),
    "resnet50": TrainRecipe(target_top1=0.92, max_epochs=4, lr=3e-3),
    "mobilenet_v3_large": TrainRecipe(target_top1=0.88, max_epochs=4, lr=3e-3),
    "efficientnet_b0": TrainRecipe(target_top1=0.88, max_epochs=6, lr=5e-3),
    "vit_b_16": TrainRecipe(target_top1=0.85, max_epochs=3, lr=3e-4),
}

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
            # ViT's position embeddings fix its input size; the CNNs take any size and ignore it.
            lambda num_classes, resolution=224, b=_builder: (
                b(weights=None, num_classes=num_classes, image_size=resolution)
                if b is tvm.vit_b_16
                else b(weights=None, num_classes=num_classes)
            ),
            resolution=224,
            batch_sizes=_batch_sizes,
            tags=_tags,
            task_resolution=_TASK_RESOLUTION,
            recipe=_RECIPES[_name],
        )
    )
