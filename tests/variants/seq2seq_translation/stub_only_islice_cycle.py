"""Variant of seq2seq_translation, written from the stub alone: post-norm nn.TransformerEncoder/Decoder, islice(cycle)."""

import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _sinusoid_table(max_len: int, d_model: int) -> Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(same); p counted from 0."""
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)           # [L, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)                # [ceil(D/2)]
    angle = pos / torch.pow(10000.0, two_i / d_model)                       # [L, ceil(D/2)]
    pe = torch.zeros(max_len, d_model, dtype=torch.float32)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])                       # odd D: one fewer cos
    return pe


class Seq2SeqTransformer(nn.Module):
    """Batch-first encoder-decoder Transformer (post-norm PyTorch layers)."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 64,
        nhead: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        dim_feedforward: int = 128,
        dropout: float = 0.0,
        pad_id: int = 0,
        max_len: int = 64,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.d_model = d_model
        self.max_len = max_len

        self.src_embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model)
        nn.init.normal_(self.src_embedding.weight, std=d_model ** -0.5)
        nn.init.normal_(self.tgt_embedding.weight, std=d_model ** -0.5)

        self.register_buffer("pe", _sinusoid_table(max_len, d_model))

        enc_layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward, dropout, batch_first=True
        )
        dec_layer = nn.TransformerDecoderLayer(
            d_model, nhead, dim_feedforward, dropout, batch_first=True
        )
        # enable_nested_tensor=False: keep dense outputs, no fast-path surprises.
        self.encoder = nn.TransformerEncoder(
            enc_layer, num_encoder_layers, enable_nested_tensor=False
        )
        self.decoder = nn.TransformerDecoder(dec_layer, num_decoder_layers)

        self.out_proj = nn.Linear(d_model, tgt_vocab_size)

    def _embed(self, emb: nn.Embedding, tokens: Tensor) -> Tensor:
        length = tokens.size(1)
        return emb(tokens) * math.sqrt(self.d_model) + self.pe[:length]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        T = tgt_in.size(1)
        # True = blocked (nn.* polarity), all boolean so the masks combine cleanly.
        src_pad = src == self.pad_id                                          # [B, S]
        tgt_pad = tgt_in == self.pad_id                                       # [B, T]
        causal = torch.triu(
            torch.ones(T, T, dtype=torch.bool, device=tgt_in.device), diagonal=1
        )                                                                     # [T, T]

        memory = self.encoder(
            self._embed(self.src_embedding, src), src_key_padding_mask=src_pad
        )
        h = self.decoder(
            self._embed(self.tgt_embedding, tgt_in),
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.out_proj(h)


def loss_fn(logits: Tensor, tgt_out: Tensor, pad_id: int) -> Tensor:
    """Token-level cross-entropy averaged over non-padding targets."""
    V = logits.size(-1)
    return F.cross_entropy(
        logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id
    )


def greedy_decode(model: nn.Module, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> Tensor:
    """Greedy decoding; rows are padded with model.pad_id after their EOS."""
    B = src.size(0)
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    with torch.no_grad():
        for _ in range(max_len - 1):
            logits = model(src, ys)
            nxt = logits[:, -1].argmax(dim=-1).to(torch.long)
            nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
            ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
            done = done | (nxt == eos_id)
            if bool(done.all()):
                break
    return ys


def train(model: nn.Module, batches, steps: int, lr: float) -> list[float]:
    """Adam + teacher forcing + grad-norm clipping at 1.0; returns per-step losses."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses: list[float] = []
    for src, tgt in itertools.islice(itertools.cycle(batches), steps):
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        loss = loss_fn(model(src, tgt_in), tgt_out, model.pad_id)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses
