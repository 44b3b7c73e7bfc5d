"""Standard torchvision image classifiers, timed at 3x224x224 and trained on the digits task at 32x32."""

from __future__ import annotations

import torch
import torchvision.models as tvm
from torchvision.models.vision_transformer import VisionTransformer, interpolate_embeddings

from optbench import image_classifier, register_model
from optbench.catalog.models import ModelSpec, TrainRecipe

# Trained (digits) weights are trained and evaluated at 32x32: on 2 CPU cores the whole zoo trains
# in minutes at this size, and every model here still learns the task. They are timed at 224x224.
_TASK_RESOLUTION = 32
_RECIPES = {
    "resnet18": TrainRecipe(target_top1=0.95, max_epochs=4, lr=3e-3),
    "resnet50": TrainRecipe(target_top1=0.92, max_epochs=4, lr=3e-3),
    # 4 epochs of the hard digits leave MobileNetV3 at 0.47 top-1; 10 reach 0.75 (docs/accuracy.md).
    "mobilenet_v3_large": TrainRecipe(target_top1=0.88, max_epochs=4, lr=3e-3, task_epochs=10),
    "efficientnet_b0": TrainRecipe(target_top1=0.88, max_epochs=6, lr=5e-3),
    "vit_b_16": TrainRecipe(target_top1=0.85, max_epochs=3, lr=3e-4, autocast="bfloat16"),
    # From scratch on the hard digits a ViT needs a low learning rate, clipped gradients, four times
    # the CNNs' epochs, and new views each epoch, or it overfits the stored ones (docs/accuracy.md).
    "vit_ti_16": TrainRecipe(
        lr=3e-4, task_epochs=16, clip_grad_norm=1.0, weight_decay=0.05, fresh_views=True
    ),
}
_PATCH = 16


def _vit(num_classes: int, resolution: int = 224) -> torch.nn.Module:
    # ViT's position embeddings fix its input size: it is built for each shape it runs at.
    return tvm.vit_b_16(weights=None, num_classes=num_classes, image_size=resolution)


def _vit_at(state: dict[str, torch.Tensor], spec: ModelSpec) -> dict[str, torch.Tensor]:
    """Weights trained at one resolution, for a ViT built at spec's: torchvision's own helper for
    fine-tuning at a new resolution interpolates the position embeddings (bicubic)."""
    assert spec.resolution is not None
    # It edits the dict it is given: give it a copy.
    return interpolate_embeddings(spec.resolution, _PATCH, dict(state))  # type: ignore[arg-type]


def _vit_ti(num_classes: int, resolution: int = 224) -> torch.nn.Module:
    # DeiT-Ti's shape (Touvron et al., 2021): 12 layers, width 192, 3 heads, MLP 768; 5.5M parameters.
    return VisionTransformer(
        image_size=resolution,
        patch_size=_PATCH,
        num_layers=12,
        num_heads=3,
        hidden_dim=192,
        mlp_dim=768,
        num_classes=num_classes,
    )


def _cnn(builder):  # the CNNs take any input size: one built model serves every shape
    return lambda num_classes: builder(weights=None, num_classes=num_classes)


# name -> (builder, batch sizes per profile, tags). The default profile's batch sizes keep each call
# at 0.2-0.6 s on 2 CPU cores at 224x224, so the whole default run fits its time target.
_FULL = (1, 8, 32)
_CLASSIFIERS = {
    "resnet18": (_cnn(tvm.resnet18), {"smoke": (2,), "default": (8,), "full": _FULL}, {"cnn", "resnet"}),
    "resnet50": (_cnn(tvm.resnet50), {"default": (8,), "full": _FULL}, {"cnn", "resnet"}),
    "mobilenet_v3_large": (_cnn(tvm.mobilenet_v3_large), {"default": (8,), "full": _FULL}, {"cnn", "mobile"}),
    "efficientnet_b0": (_cnn(tvm.efficientnet_b0), {"default": (8,), "full": _FULL}, {"cnn", "mobile"}),
    "vit_b_16": (_vit, {"default": (2,), "full": (1, 2, 8)}, {"transformer", "vit"}),
    "vit_ti_16": (_vit_ti, {"default": (8,), "full": (1, 8, 32)}, {"transformer", "vit"}),
}

for _name, (_builder, _batch_sizes, _tags) in _CLASSIFIERS.items():
    register_model(
        image_classifier(
            _name,
            _builder,
            resolution=224,
            batch_sizes=_batch_sizes,
            tags=_tags,
            task_resolution=_TASK_RESOLUTION,
            recipe=_RECIPES[_name],
            adapt_weights=_vit_at if _name.startswith("vit_") else None,
        )
    )
