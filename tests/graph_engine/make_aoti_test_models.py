"""Writes the AOTInductor packages that graph_engine_aoti_test serves (argv[1]: output folder).

  features_dict      make_test_models.DictModel through deploy/models/aoti_export.py:
                     batch 1..4, length 1..8, with graphserve's signature
  features_unsigned  make_test_models.TupleModel compiled directly, without a signature (a package
                     made by other tools): outputs matched by position, nothing checked at load
  encoder_pt2        the built-in encoder's architecture and weights (deploy/models/export_encoder.py),
                     batch 1..512 (the default grid's largest batch), length 1..32: its answers
                     must match the built-in encoder's
All for the CPU, where CI runs them.
"""
import pathlib
import subprocess
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE.parents[1] / "deploy" / "models"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(MODELS))
from aoti_export import export_pt2  # noqa: E402
from make_test_models import DictModel, TupleModel  # noqa: E402


def examples():
    return torch.randint(0, 100, (2, 4)), torch.ones(2, 4, dtype=torch.int64)


def main():
    root = pathlib.Path(sys.argv[1])
    for name in ("features_dict", "features_unsigned"):
        (root / name).mkdir(parents=True, exist_ok=True)
    export_pt2(DictModel(), examples(), root / "features_dict" / "model.pt2",
               input_names=["input_ids", "attention_mask"], max_batch=4, max_length=8,
               max_formed_batch=4)

    batch = torch.export.Dim("batch", min=1, max=4)
    length = torch.export.Dim("length", min=1, max=8)
    program = torch.export.export(TupleModel().eval(), examples(),
                                  dynamic_shapes=({0: batch, 1: length}, {0: batch, 1: length}))
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(root / "features_unsigned" / "model.pt2"))

    subprocess.run([sys.executable, str(MODELS / "export_encoder.py"), str(root), "--format", "pt2",
                    "--device", "cpu", "--max-batch", "4", "--max-length", "32"], check=True)
    print(f"AOTInductor test packages written to {root}")


if __name__ == "__main__":
    main()
