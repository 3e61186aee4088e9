"""Kata【字节级 BPE 分词器：训练、编码、解码】: a byte-level BPE tokenizer: train its merges on a text, encode, decode."""

import re
from collections import Counter


class BPETokenizer:
    """Byte-level BPE: ids 0..255 are bytes, the k-th merge makes id 256 + k.

    train: count adjacent pairs over every chunk occurrence (overlaps included), merge the
    most frequent pair (ties to the smallest (left, right) tuple), repeat up to
    vocab_size - 256 times or until no pair is left.
    encode: per chunk, repeatedly apply the pair with the smallest merge id.
    decode: join the tokens' bytes, then decode once with errors="replace".
    """

    def __init__(self, pattern: str | None = None) -> None:
        self.pattern = pattern
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = self._base_vocab()

    @staticmethod
    def _base_vocab() -> dict[int, bytes]:
        return {i: bytes([i]) for i in range(256)}

    def _chunks(self, text: str) -> list[str]:
        if self.pattern is None:
            return [text] if text else []
        return re.findall(self.pattern, text)

    def train(self, text: str, vocab_size: int) -> None:
        if vocab_size < 256:
            raise ValueError(f"vocab_size must be at least 256, got {vocab_size}")
        self.merges = {}
        self.vocab = self._base_vocab()

        # Each distinct chunk once, as a list of ids, with how often it occurs.
        chunk_counts = Counter(self._chunks(text))
        words = [(list(chunk.encode("utf-8")), n) for chunk, n in chunk_counts.items()]

        for new_id in range(256, vocab_size):
            stats: Counter = Counter()
            for ids, n in words:
                for pair in zip(ids, ids[1:]):
                    stats[pair] += n
            if not stats:
                break  # every chunk is a single token
            # Largest count; among equal counts, the smallest (left, right) tuple.
            best = min(stats, key=lambda p: (-stats[p], p))
            self.merges[best] = new_id
            self.vocab[new_id] = self.vocab[best[0]] + self.vocab[best[1]]
            words = [(_merge(ids, best, new_id), n) for ids, n in words]

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in self._chunks(text):
            ids = list(chunk.encode("utf-8"))
            while len(ids) >= 2:
                pair = min(zip(ids, ids[1:]), key=lambda p: self.merges.get(p, float("inf")))
                if pair not in self.merges:
                    break
                ids = _merge(ids, pair, self.merges[pair])
            out.extend(ids)
        return out

    def decode(self, ids: list[int]) -> str:
        # self.vocab[i] raises KeyError for an unknown id, as required.
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """ids with every occurrence of `pair` replaced by new_id, left to right, non-overlapping."""
    out: list[int] = []
    i, n = 0, len(ids)
    a, b = pair
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
