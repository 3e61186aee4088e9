"""Kata【端到端训练一个小型翻译模型（编码器-解码器 Transformer）】: a tiny translator end to end: an encoder-decoder Transformer, its loss, greedy decoding and the training loop."""

import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Seq2SeqTransformer(nn.Module):
    """An encoder-decoder Transformer for translation ("Attention Is All You Need"), batch-first.

    Sizes: B batch, S source length, T target length, V = tgt_vocab_size, D = d_model.
    Tokens are int64 ids. Every id you need is given to you (pad_id here, bos_id and eos_id
    to greedy_decode): never hard-code 0, 1 or 2. Works in float32 (the default dtype).

    __init__(src_vocab_size, tgt_vocab_size, d_model=64, nhead=4, num_encoder_layers=2,
             num_decoder_layers=2, dim_feedforward=128, dropout=0.0, pad_id=0, max_len=64)
        - keep self.pad_id = pad_id: greedy_decode and train read it from the model.
        - src_embedding: nn.Embedding(src_vocab_size, d_model); tgt_embedding:
          nn.Embedding(tgt_vocab_size, d_model). Initialise both weights from
          N(0, d_model ** -0.5) (nn.init.normal_(weight, std=d_model ** -0.5), fairseq's
          convention): after the sqrt(d_model) scale below each embedding is of unit size,
          like the positional encodings. nn.Embedding's default N(0, 1) times sqrt(d_model)
          drowns the position signal, and this task (a reversal) is all about positions.
          A padding_idx is allowed but not needed. Call them as modules
          (self.src_embedding(src)): the grader hooks them.
        - the sinusoidal positional-encoding table [max_len, d_model], as in the paper:
          PE[p, 2i] = sin(p / 10000 ** (2i / d_model)), PE[p, 2i + 1] = cos(the same),
          sines in the even columns and cosines in the odd ones, position p counted from 0.
          Keep it as a buffer (register_buffer), not a parameter: it is never trained.
        - an encoder stack of num_encoder_layers layers and a decoder stack of
          num_decoder_layers layers (d_model, nhead, dim_feedforward, dropout). Here you MAY
          use PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (with
          batch_first=True), nn.TransformerEncoder / nn.TransformerDecoder, even
          nn.Transformer: this kata is about the wiring. Post-norm or pre-norm, your choice.
        - out_proj: nn.Linear(d_model, tgt_vocab_size), the logits.
        - no other custom initialisation: the grader seeds torch before building the model.

    forward(src [B, S], tgt_in [B, T]) -> logits [B, T, V] (float32)
        - each side: x = embedding(tokens) * sqrt(d_model) + PE[:length] (the scale on the
          embeddings only, then the encodings added; PE row t for position t).
        - source padding (src == pad_id) is masked in the encoder's self-attention AND in the
          decoder's cross-attention (memory_key_padding_mask): no real token may attend to a
          padding position. Padding sits at the end of each row; no row is all padding.
        - the target is masked causally (position t sees target positions 0..t only) and for
          padding (tgt_in == pad_id).
        - so the logits at a real (non-padding) position depend neither on how much padding
          follows, nor, at target position t, on the target tokens after t.
        - S and T are at most max_len.

    Conventions (judged apart from the math, as production code would need them):
        - src and tgt_in are never changed in place.
        - results follow the inputs' device: the model moved with .to(device) returns its logits
          there (the positional table a buffer, the masks made on the inputs' device), and
          loss_fn's loss is on the logits' device.
    """

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
        ### BEGIN SOLUTION
        # TODO: keep pad_id and d_model.
        self.pad_id = pad_id
        self.d_model = d_model
        # TODO: src_embedding and tgt_embedding, weights drawn from N(0, d_model ** -0.5).
        self.src_embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model)
        for embedding in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(embedding.weight, mean=0.0, std=d_model**-0.5)
        # TODO: the sinusoidal table [max_len, d_model] as a buffer (sines even, cosines odd).
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
        frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (D/2,)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * frequency)
        pe[:, 1::2] = torch.cos(position * frequency)
        self.register_buffer("positional_encoding", pe, persistent=False)
        # TODO: the encoder and decoder stacks (PyTorch's layers are allowed here), batch-first.
        encoder_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(encoder_layer, num_encoder_layers, enable_nested_tensor=False)
        decoder_layer = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True)
        self.decoder = nn.TransformerDecoder(decoder_layer, num_decoder_layers)
        # TODO: out_proj, from d_model to the target vocabulary.
        self.out_proj = nn.Linear(d_model, tgt_vocab_size)
        ### END SOLUTION

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        S, T = src.size(1), tgt_in.size(1)
        scale = math.sqrt(self.d_model)
        # TODO: embed both sides: embedding * sqrt(d_model), then + PE (scale first, then add).
        x = self.src_embedding(src) * scale + self.positional_encoding[:S]  # (B, S, D)
        y = self.tgt_embedding(tgt_in) * scale + self.positional_encoding[:T]  # (B, T, D)
        # TODO: masks, True = blocked (nn.* polarity): source padding, target padding, causal.
        src_padding = src == self.pad_id  # (B, S)
        tgt_padding = tgt_in == self.pad_id  # (B, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)  # (T, T): key j > query i
        # TODO: encode (source padding masked), then decode: causal + target padding in the
        # TODO: self-attention, source padding again in the cross-attention.
        memory = self.encoder(x, src_key_padding_mask=src_padding)  # (B, S, D)
        out = self.decoder(
            y,
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=tgt_padding,
            memory_key_padding_mask=src_padding,
            tgt_is_causal=True,  # a hint that tgt_mask is causal (saves PyTorch checking it)
        )  # (B, T, D)
        # TODO: project to the target vocabulary.
        return self.out_proj(out)  # (B, T, V)
        ### END SOLUTION


def loss_fn(logits: Tensor, tgt_out: Tensor, pad_id: int) -> Tensor:
    """Cross-entropy of logits [B, T, V] against tgt_out [B, T] (int64), averaged over the
    positions where tgt_out != pad_id only: padding counts neither in the sum nor in the
    count. A 0-d tensor, differentiable with respect to logits; what
    F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id) gives
    (F.cross_entropy is allowed here). Teacher forcing: for a target batch tgt [B, T + 1]
    (BOS first), the model gets tgt_in = tgt[:, :-1] and is scored on tgt_out = tgt[:, 1:].

    Conventions (judged apart from the math, as production code would need them):
        - logits and tgt_out are never changed in place.
    """
    ### BEGIN SOLUTION
    # TODO: flatten to [B * T, V] and [B * T]; ignore the padding targets.
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id)
    ### END SOLUTION


def greedy_decode(model: nn.Module, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> Tensor:
    """Greedy decoding: returns ys, int64 [B, L] on src's device, L <= max_len (BOS included).

    - ys[:, 0] is bos_id. Then, one step at a time: logits = model(src, ys) ([B, len, V]),
      the next token of each row is the argmax of its LAST position's logits
      (logits[:, -1]), appended to ys. Use the model only through this call; the caller
      chose its train()/eval() mode.
    - a row is finished once it has produced eos_id: every later column of that row is
      model.pad_id (whatever the model predicts there).
    - stop as soon as every row is finished (so the last column holds at least one eos_id),
      or when ys has max_len columns, whichever comes first: L = 1 + the number of steps.
      max_len counts BOS; max_len = 1 returns the BOS column alone.

    Conventions (judged apart from the math, as production code would need them):
        - the model runs without gradients (torch.no_grad() or torch.inference_mode()): a
          graph kept at every step only costs memory.
        - src is never changed in place.
        - ys follows src's device.
    """
    ### BEGIN SOLUTION
    B = src.size(0)
    # TODO: start every row with BOS; track which rows have produced EOS.
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
    # TODO: without gradients, up to max_len - 1 steps: the argmax of the last position,
    # TODO: pad_id after a row's EOS; stop when every row is finished.
    with torch.no_grad():
        for _ in range(max_len - 1):
            logits = model(src, ys)  # (B, len, V)
            next_token = logits[:, -1].argmax(dim=-1)  # (B,)
            next_token = next_token.masked_fill(finished, model.pad_id)
            ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, len + 1)
            finished = finished | (next_token == eos_id)
            if bool(finished.all()):
                break
    return ys
    ### END SOLUTION


def train(model: nn.Module, batches, steps: int, lr: float) -> list[float]:
    """The training loop; returns the loss of every step, `steps` Python floats.

    - optimizer: torch.optim.Adam(model.parameters(), lr=lr) (its other settings at their
      defaults), made here, once.
    - batches: an iterable (a list, say) of (src [B, S], tgt [B, T + 1]) pairs of int64
      tensors, tgt starting with BOS. Take them in order; when the iterable runs out before
      `steps` updates, start it again from the beginning (cycle it). Exactly `steps`
      updates, one batch each.
    - each step, teacher forcing: tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:];
      loss = loss_fn(model(src, tgt_in), tgt_out, model.pad_id); clear the gradients,
      backpropagate, clip the gradient norm (all parameters together) at 1.0
      (torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)), then optimizer.step().
    - put the model in train() mode; record loss.item() of each step (the loss computed
      before that step's update).

    Conventions (judged apart from the math, as production code would need them):
        - the losses are Python floats (loss.item()): no tensor that keeps a step's graph alive.
        - the batches are never changed in place.
    """
    ### BEGIN SOLUTION
    # TODO: Adam over every parameter, with lr; the model in train() mode.
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    # TODO: `steps` batches, cycling the iterable; each step: teacher forcing (shift the
    # TODO: target by one), the loss, zero the gradients, backward, clip the norm at 1.0,
    # TODO: step; keep loss.item().
    for _, (src, tgt) in zip(range(steps), itertools.cycle(batches)):
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # (B, T) each
        loss = loss_fn(model(src, tgt_in), tgt_out, model.pad_id)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses
    ### END SOLUTION
