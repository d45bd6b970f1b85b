"""A Hugging Face `BertModel`'s weights run over packed (ragged) rows: the forward graphserve calls for
a ragged model (Triton's ragged batching; docs/models.md "Ragged models").

    forward(input_ids INT64 [T], cu_seqlens INT32 [R+1]) -> (last_hidden_state FP32 [T, H], pooled FP32 [R, H])

The rows of a batch are concatenated into `input_ids`; row r holds tokens cu_seqlens[r] ..
cu_seqlens[r+1] - 1 (cu_seqlens[0] = 0, non-decreasing, cu_seqlens[R] = T, as Triton's
BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO makes it). Promises, for any such cu_seqlens:
- a token attends only to the tokens of its own row, so a row answers as it does alone (with
  max_row_length, a row longer than it, which only the server's filler row is, attends in pieces);
- position ids restart at 0 in every row and are clamped into the position table (a filler row may be
  longer than it), token ids into the vocabulary: no index leaves a buffer; token_type_ids are 0;
- an empty row (length 0) has a pooled output of zeros, never NaN.
`pooled` is BERT's pooler output of each row's first token (pooling="first") or the sentence
embedding of sentence-transformers' mean pooling, L2-normalised (pooling="mean"). Computation is in
the weights' dtype, outputs are FP32.

Attention: "masked" (any device and dtype, traceable and exportable) uses a block-diagonal mask of
the rows with scaled_dot_product_attention, O(T^2) memory; "varlen" (CUDA, fp16/bf16 only) runs
FlashAttention over the packed rows with no mask, calling aten._flash_attention_forward, the kernel
behind torch.nn.attention.varlen.varlen_attn: varlen_attn itself is an op registered from Python,
which a libtorch-only server does not have.

Shapes are taken from tensors (cumsum of ones rather than arange(T)), so that a torch.jit.trace keeps T
and R dynamic instead of baking the example's sizes in.
"""
from typing import Optional

import torch
import torch.nn.functional as F

ATTENTIONS = ("masked", "varlen")
POOLINGS = ("first", "mean")


def default_attention(device, dtype) -> str:
    """varlen where FlashAttention runs (CUDA, half precision), else the masked path."""
    on_cuda = torch.device(device).type == "cuda"
    return "varlen" if on_cuda and dtype in (torch.float16, torch.bfloat16) else "masked"


def _counting(like: torch.Tensor) -> torch.Tensor:
    """0, 1, ..., len(like) - 1 as int64, sized by a tensor so that a trace does not bake the length."""
    return torch.ones_like(like, dtype=torch.int64).cumsum(0) - 1


class RaggedBert(torch.nn.Module):
    """Shares (does not copy) the weights of `bert`, a transformers BertModel; eval mode only."""

    def __init__(self, bert, pooling: str, attention: str = "masked", max_tokens: Optional[int] = None,
                 max_row_length: Optional[int] = None):
        """`max_tokens`: the most tokens of a batch (the export's bound on T). `max_row_length`: the
        longest row a client may send (the config's max_sequence_length).

        With max_row_length, attention runs over rows of at most that length: the last non-empty row
        (the server's filler, the only row that may be longer) is cut into rows of max_row_length, and
        FlashAttention is told that bound, which sizes its grid by the rows' real length instead of T
        (deploy/bench/varlen_bound.py, H100: 123 against 649 µs a layer at 16,384 tokens in 289
        rows); the kernel's rows are the bucket's plus ceil(T / max_row_length). A client's rows
        attend as before; only the filler's tokens, which nobody reads, see less of it. Without it,
        FlashAttention is told max_tokens, or T (symbolic under torch.export) when that is None too; a
        torch.jit.trace would bake the example's T instead, so a traced varlen model needs a bound."""
        super().__init__()
        if max_row_length is not None and max_row_length < 1:
            raise ValueError(f"max_row_length must be at least 1, not {max_row_length}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, not {attention!r}")
        if pooling == "first" and bert.pooler is None:
            raise ValueError("pooling 'first' needs a BertModel with its pooling layer")
        self.bert = bert
        self.pooling = pooling
        self.attention = attention
        self.max_tokens = max_tokens
        self.max_row_length = max_row_length
        config = bert.config
        self.heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.hidden_size = config.hidden_size
        if config.hidden_act != "gelu":  # the erf GELU is what the layers below apply
            raise ValueError(f"hidden_act {config.hidden_act!r} is not supported, only 'gelu'")
        if getattr(config, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")

    def _embed(self, input_ids, positions):
        embeddings = self.bert.embeddings
        vocabulary = embeddings.word_embeddings.num_embeddings
        summed = (embeddings.word_embeddings(input_ids.clamp(0, vocabulary - 1))
                  + embeddings.position_embeddings(positions)
                  + embeddings.token_type_embeddings.weight[0])
        return embeddings.LayerNorm(summed)

    def attention_rows(self, offsets, token_index):
        """The rows attention runs over, as ascending int64 offsets from 0 to T: `offsets` (int64
        [R+1]) with the last non-empty row cut every max_row_length tokens, by ceil(T /
        max_row_length) more offsets (cuts past T fall on T: empty rows), so that a bucket of few
        tokens gets few; `offsets` itself without max_row_length. `token_index`: 0 .. T-1."""
        if self.max_row_length is None:
            return offsets
        tokens = offsets[-1]
        last_start = torch.where(offsets < tokens, offsets, torch.zeros_like(offsets)).max()
        # ceil(T / max_row_length) steps 1, 2, ..., sized by a tensor so that a trace keeps T dynamic.
        steps = _counting(token_index[::self.max_row_length]) + 1
        cuts = torch.minimum(last_start + self.max_row_length * steps, tokens)
        return torch.sort(torch.cat([offsets, cuts])).values

    def _attend(self, query, key, value, cu_seqlens, same_row):
        """[T, heads, head_size] each -> [T, heads, head_size], within rows only."""
        if self.attention == "varlen":
            # max_q/max_k: a bound on the longest row (see __init__).
            if self.max_row_length is not None:
                bound = self.max_row_length
            else:
                bound = query.shape[0] if self.max_tokens is None else self.max_tokens
            return torch.ops.aten._flash_attention_forward(
                query, key, value, cu_seqlens, cu_seqlens, bound, bound, 0.0, False, False)[0]
        context = F.scaled_dot_product_attention(
            query.transpose(0, 1).unsqueeze(0), key.transpose(0, 1).unsqueeze(0),
            value.transpose(0, 1).unsqueeze(0), attn_mask=same_row)
        return context.squeeze(0).transpose(0, 1)

    def _layer(self, layer, hidden, cu_seqlens, same_row):
        attention = layer.attention
        shape = (-1, self.heads, self.head_size)
        context = self._attend(attention.self.query(hidden).view(shape), attention.self.key(hidden).view(shape),
                               attention.self.value(hidden).view(shape), cu_seqlens, same_row)
        context = context.reshape(-1, self.hidden_size)
        attended = attention.output.LayerNorm(hidden + attention.output.dense(context))
        intermediate = F.gelu(layer.intermediate.dense(attended))
        return layer.output.LayerNorm(attended + layer.output.dense(intermediate))

    def forward(self, input_ids, cu_seqlens):
        offsets = cu_seqlens.to(torch.int64)
        token_index = _counting(input_ids)
        # The last row starting at or before the token: rows of length 0 are stepped over.
        row_of_token = torch.searchsorted(offsets, token_index, right=True) - 1
        position = token_index - offsets[row_of_token]
        table = self.bert.embeddings.position_embeddings.num_embeddings
        hidden = self._embed(input_ids, position.clamp(max=table - 1))

        row_index = _counting(offsets[1:])
        membership = row_index[:, None] == row_of_token[None, :]  # [R, T]: token t is in row r
        attention_offsets = self.attention_rows(offsets, token_index)
        same_row = None
        if self.attention == "masked":
            attention_row = row_of_token
            if attention_offsets is not offsets:
                attention_row = torch.searchsorted(attention_offsets, token_index, right=True) - 1
            same_row = attention_row[:, None] == attention_row[None, :]
        attention_cu_seqlens = attention_offsets.to(torch.int32) if self.attention == "varlen" else None
        for layer in self.bert.encoder.layer:
            hidden = self._layer(layer, hidden, attention_cu_seqlens, same_row)

        lengths = offsets[1:] - offsets[:-1]
        if self.pooling == "first":
            first_token = (membership & (position == 0)[None, :]).to(hidden.dtype)
            pooler = self.bert.pooler
            pooled = pooler.activation(pooler.dense(first_token @ hidden))
            pooled = torch.where((lengths > 0)[:, None], pooled, torch.zeros_like(pooled))
        else:
            sums = membership.to(hidden.dtype) @ hidden
            means = sums / lengths.clamp(min=1)[:, None].to(hidden.dtype)
            pooled = F.normalize(means.float(), p=2.0, dim=1)  # an empty row: 0 / eps = 0
        return hidden.float(), pooled.float()


def pack(rows, device="cpu"):
    """(input_ids [T], cu_seqlens [R+1]) of a list of token-id lists: what the server makes."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.int32)
    cu_seqlens = torch.zeros(len(rows) + 1, dtype=torch.int32)
    cu_seqlens[1:] = lengths.cumsum(0)
    flat = [token for row in rows for token in row]
    return (torch.tensor(flat, dtype=torch.int64, device=device), cu_seqlens.to(device))


def example_inputs(device, vocabulary: int):
    """Three rows (lengths 5, 0, 9) of T = 14 tokens: T and R >= 2, so that torch.export keeps both
    dynamic, and an empty row, so that its path is the one traced."""
    generator = torch.Generator().manual_seed(45)
    rows = [torch.randint(1, vocabulary, (length,), generator=generator).tolist() for length in (5, 0, 9)]
    return pack(rows, device)
