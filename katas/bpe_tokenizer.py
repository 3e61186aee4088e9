"""Kata【字节级 BPE 分词器：训练、编码、解码】: a byte-level BPE tokenizer: train its merges on a text, encode, decode."""

import re
from collections import Counter


class BPETokenizer:
    """Byte-level byte-pair encoding (BPE), as GPT-2/GPT-4's tokenizers, minbpe and tiktoken lay it out.

    Token ids: 0..255 are the byte values; the k-th merge (k = 0, 1, ...) makes id 256 + k.

    __init__(pattern: str | None = None)
        - merges: dict[tuple[int, int], int], {} before train; its insertion order is the
          order the merges were made: {(left id, right id): 256, ...: 257, ...}.
        - vocab: dict[int, bytes], before train the 256 single bytes {i: bytes([i])}; a
          merged id's bytes are vocab[left] + vocab[right].
        - pattern: the pre-tokenization, with the standard library `re` (no `regex` module):
          chunks = re.findall(pattern, text). pattern=None: the whole text is ONE chunk (an
          empty text has none). Each chunk becomes list(chunk.encode("utf-8")); merges never
          cross a chunk boundary. A pattern has no capturing groups (write (?:...));
          characters it does not match are dropped, as re.findall drops them.

    train(text: str, vocab_size: int) -> None
        - starts over: clears merges and vocab (back to the 256 bytes), then makes up to
          vocab_size - 256 merges, one per round:
        - count every adjacent pair at every position of every chunk occurrence: overlaps
          count ("aaa" gives (97, 97) twice) and a chunk that occurs 5 times counts 5 times.
        - merge the pair with the largest count; TIES go to the SMALLEST pair as a tuple of
          ints (left id first, then right id): Hugging Face tokenizers' BpeTrainer rule.
          (minbpe's max(stats, key=stats.get) breaks ties by first occurrence and CS336 by
          the greatest pair of bytes: both differ from this.) Pairs of count 1 are merged too.
        - replace the pair in every chunk left to right, non-overlapping ("aaaa" -> [256, 256]).
        - no pair left (every chunk is one token): stop early, with fewer merges (not an error).

    encode(text: str) -> list[int]
        - per chunk (the same pre-tokenization), while it has 2 tokens or more: among its
          adjacent pairs, take the one with the smallest merge id; if none is a merge, stop;
          else replace all its occurrences left to right, non-overlapping. The chunks' ids
          concatenated. (tiktoken's rank-based merging gives the same ids.)

    decode(ids: list[int]) -> str
        - b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace"): the bytes are
          joined BEFORE decoding (a character's bytes may be split across tokens); an
          incomplete character becomes U+FFFD.

    Conventions (judged apart from the math, as production code would need them):
        - train raises ValueError when vocab_size < 256.
        - train starts over each time it is called: merges and vocab are those of the last text.
        - Before train: merges == {} and vocab holds the 256 single bytes (encode gives the raw bytes).
        - decode raises KeyError for an id that is not in vocab.

    Example:
        >>> tok = BPETokenizer()
        >>> tok.train("aaabdaaabac", 259)
        >>> tok.merges
        {(97, 97): 256, (97, 98): 257, (256, 257): 258}
        >>> tok.encode("aaabdaaabac"), tok.decode([258, 100])
        ([258, 100, 258, 97, 99], 'aaabd')
    """

    def __init__(self, pattern: str | None = None) -> None:
        # TODO: keep the pattern; no merges yet; the vocab holds the 256 single bytes.
        raise NotImplementedError

    def train(self, text: str, vocab_size: int) -> None:
        # TODO: refuse a vocab smaller than the 256 bytes; start over.
        # TODO: pre-tokenize, then keep each distinct chunk once with how often it occurs.
            # TODO: count every adjacent pair (overlaps too), each chunk weighted by its count.
            # TODO: the most frequent pair; ties go to the smallest (left id, right id).
            # TODO: a new id for it, its bytes, and the pair replaced in every chunk.
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        # TODO: per chunk, merge the pair with the smallest merge id until no pair is a merge.
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        # TODO: join the tokens' bytes first, then decode them once (bad bytes -> U+FFFD).
        raise NotImplementedError


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """ids with every occurrence of `pair` replaced by new_id, left to right, non-overlapping."""
    # TODO: scan left to right; a match emits new_id and skips both of its tokens.
    raise NotImplementedError
