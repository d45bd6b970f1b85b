"""The model configs and repositories the benchmarks serve: the built-in encoder's config, BERT
exported on demand, limits and instances overridden from the command line."""
import os
import re
import subprocess
import sys
import textwrap

from .common import REPO, csv, fail, log


def config_limits(text):
    """(max_batch_size, max_sequence_length) of a config's text."""
    batch = re.search(r"^\s*max_batch_size\s*:\s*(\d+)", text, re.M)
    length = re.search(r"^\s*max_sequence_length\s*:\s*(\d+)", text, re.M)
    if not batch or not length:
        fail("config has no max_batch_size / max_sequence_length:\n" + text)
    return int(batch.group(1)), int(length.group(1))


def builtin_encoder_config():
    """The built-in model's config, read from the server's source (kBuiltinEncoderConfig) so that the
    repositories here serve exactly the model graphserve serves without one."""
    path = os.path.join(REPO, "server", "src", "config", "config.cpp")
    with open(path) as f:
        found = re.search(r'kBuiltinEncoderConfig = R"pb\((.*?)\)pb"', f.read(), re.S)
    if not found:
        fail(f"no kBuiltinEncoderConfig in {path}")
    return textwrap.dedent(found.group(1)).strip() + "\n"


def with_limits(args, text):
    """The config with --max-batch-size / --max-sequence-length, where given, in place of its own."""
    for field, value in (("max_batch_size", args.max_batch_size),
                         ("max_sequence_length", args.max_sequence_length)):
        if value is not None:
            text = re.sub(r"^(\s*" + field + r"\s*:\s*)\d+", lambda m: m.group(1) + str(value), text,
                          count=1, flags=re.M)
    return text


def base_model(args, model):
    """(config text, model file path or None) of `model`, exporting BERT first when it is missing.
    bert_base_<dtype> is TorchScript (model.pt), bert_base_<dtype>_pt2 AOTInductor (model.pt2)."""
    if model == "encoder":
        return with_limits(args, builtin_encoder_config()), None
    found = re.fullmatch(r"bert_base_(bf16|fp16|fp32)(_pt2)?", model)
    folder = os.path.join(args.bert_repo, model)
    config_path = os.path.join(folder, "config.pbtxt")
    weights = os.path.join(folder, "model.pt2" if model.endswith("_pt2") else "model.pt")
    if not (os.path.exists(config_path) and os.path.exists(weights)):
        if not found:
            fail(f"model '{model}' is neither 'encoder' nor in --bert-repo {args.bert_repo}")
        log(f"exporting {model} into {args.bert_repo} (deploy/models/export_bert.py)")
        command = [sys.executable, os.path.join(REPO, "deploy", "models", "export_bert.py"),
                   args.bert_repo, "--dtype", found.group(1), "--device",
                   "cuda" if args.device.startswith("cuda") else "cpu",
                   "--format", "pt2" if found.group(2) else "torchscript"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            fail("export failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
    with open(config_path) as f:
        return with_limits(args, f.read()), weights


def with_instances(args, text):
    """The config with its instance groups replaced by one instance per --instance-devices entry."""
    if not args.instance_devices:
        return text
    text = re.sub(r"^\s*instance_group\s*\{[^}]*\}\s*\n", "", text, flags=re.M)
    devices = ", ".join(f'"{device}"' for device in csv(args.instance_devices))
    return text + f"instance_group {{ count: 1 devices: [ {devices} ] }}\n"


def write_repository(args, model, label, config, weights):
    """OUT/repositories/MODEL_LABEL holding `model` with `config` (config.pbtxt's text) and a link to
    `weights` (None: the built-in encoder has none); returns the repository's path."""
    root = os.path.join(args.out, "repositories", f"{model}_{label}")
    folder = os.path.join(root, model)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(config)
    if weights:
        link = os.path.join(folder, os.path.basename(weights))
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.abspath(weights), link)
    return root
