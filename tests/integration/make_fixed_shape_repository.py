#!/usr/bin/env python3
"""Writes a fixed-shape model repository and its reference answers into the folder given as argv[1].

  repository/resnet18/   torchvision's ResNet-18 architecture (random weights, seeded), traced on
                         image FP32 [B, 3, 224, 224] -> logits FP32 [B, 1000], with a batch-only grid
  reference/images.f32   IMAGES seeded images, FP32 [IMAGES, 3, 224, 224], little-endian
  reference/logits.f32   each image's logits from the model run alone (batch 1), FP32 [IMAGES, 1000]

fixed_shape_integration_test serves the repository and compares graphserve's answers, batched or
alone, with the references.
"""
import pathlib
import sys

import torch
import torchvision

IMAGES = 6

CONFIG = """name: "resnet18"
platform: "pytorch_libtorch"
max_batch_size: 4
input { name: "image" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] pad_value: 0 }
output { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }
buckets { batch_sizes: [ 1, 2, 4 ] }
dynamic_batching { max_queue_delay_microseconds: 20000 }
"""


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_fixed_shape_repository.py OUTPUT_DIR")
    root = pathlib.Path(sys.argv[1])
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=1000).eval()
    images = torch.randn(IMAGES, 3, 224, 224)
    with torch.inference_mode():
        traced = torch.jit.trace(model, images[:2])
        logits = torch.cat([traced(images[i:i + 1]) for i in range(IMAGES)])

    folder = root / "repository" / "resnet18"
    folder.mkdir(parents=True, exist_ok=True)
    traced.save(str(folder / "model.pt"))
    (folder / "config.pbtxt").write_text(CONFIG)
    reference = root / "reference"
    reference.mkdir(parents=True, exist_ok=True)
    (reference / "images.f32").write_bytes(images.numpy().astype("<f4").tobytes())
    (reference / "logits.f32").write_bytes(logits.numpy().astype("<f4").tobytes())
    print(f"resnet18 and {IMAGES} reference images written under {root}")


if __name__ == "__main__":
    main()
