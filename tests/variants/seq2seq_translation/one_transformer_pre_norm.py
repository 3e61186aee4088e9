"""Variant of seq2seq_translation, one nn.Transformer (pre-norm, final norms), float masks, a hand-written loss, clipping and batch cycling."""

import torch
from torch import Tensor, nn


class Seq2SeqTransformer(nn.Module):
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
        self.pad_id, self.d_model = pad_id, d_model
        self.src_embedding = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        with torch.no_grad():
            for embedding in (self.src_embedding, self.tgt_embedding):
                embedding.weight.normal_(0.0, d_model**-0.5)
                embedding.weight[pad_id].zero_()
        # angles p * exp(-2i * ln(10000) / d), sin and cos stacked then interleaved
        inverse = torch.exp(torch.arange(0, d_model, 2) * (-torch.log(torch.tensor(10000.0)) / d_model))
        angles = torch.arange(max_len)[:, None] * inverse[None, :]
        self.register_buffer("pe", torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1))
        self.transformer = nn.Transformer(
            d_model,
            nhead,
            num_encoder_layers,
            num_decoder_layers,
            dim_feedforward,
            dropout,
            batch_first=True,
            norm_first=True,
        )
        self.out_proj = nn.Linear(d_model, tgt_vocab_size)

    def _embed(self, tokens: Tensor, embedding: nn.Embedding) -> Tensor:
        return embedding(tokens) * self.d_model**0.5 + self.pe[: tokens.size(1)].unsqueeze(0)

    def _blocked(self, tokens: Tensor) -> Tensor:
        zeros = torch.zeros(tokens.shape, device=tokens.device)
        return zeros.masked_fill(tokens == self.pad_id, float("-inf"))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        T = tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=tgt_in.device)
        src_padding = self._blocked(src)
        hidden = self.transformer(
            self._embed(src, self.src_embedding),
            self._embed(tgt_in, self.tgt_embedding),
            tgt_mask=causal,
            src_key_padding_mask=src_padding,
            tgt_key_padding_mask=self._blocked(tgt_in),
            memory_key_padding_mask=src_padding,
        )
        return self.out_proj(hidden)


def loss_fn(logits: Tensor, tgt_out: Tensor, pad_id: int) -> Tensor:
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    keep = tgt_out != pad_id
    picked = log_probs.gather(-1, tgt_out.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def greedy_decode(model: nn.Module, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> Tensor:
    rows = [[bos_id] for _ in range(src.size(0))]
    done = [False] * src.size(0)
    with torch.inference_mode():
        while len(rows[0]) < max_len and not all(done):
            ys = torch.tensor(rows, dtype=torch.long, device=src.device)
            choice = model(src, ys)[:, -1].argmax(-1).tolist()
            for b, token in enumerate(choice):
                rows[b].append(model.pad_id if done[b] else token)
                done[b] = done[b] or token == eos_id
    return torch.tensor(rows, dtype=torch.long, device=src.device)


def train(model: nn.Module, batches, steps: int, lr: float) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses, stream = [], iter(batches)
    while len(losses) < steps:
        try:
            src, tgt = next(stream)
        except StopIteration:
            stream = iter(batches)
            continue
        loss = loss_fn(model(src, tgt[:, :-1]), tgt[:, 1:], model.pad_id)
        for p in model.parameters():
            p.grad = None
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        factor = torch.clamp(1.0 / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(factor)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses
