"""Variant of bpe_tokenizer (correct), in another style: the pair counts are kept up to date
incrementally (only the words that hold the merged pair are recounted) and the best pair is
popped from a heap keyed (-count, pair) with lazy deletion of stale entries; words are
deduplicated with their frequencies. Encoding applies each merge once, in creation order,
within each chunk (the contract's equivalent of lowest rank first), skipping merges whose
left id is absent."""

import heapq
import re
from collections import defaultdict


def _replace(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if word[i] == pair[0] and i + 1 < len(word) and word[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


class BPETokenizer:
    def __init__(self, pattern=None):
        self.pattern = pattern
        self.merges = {}
        self.vocab = {i: bytes([i]) for i in range(256)}

    def _chunks(self, text):
        return re.findall(self.pattern, text) if self.pattern is not None else ([text] if text else [])

    def train(self, text, vocab_size):
        if vocab_size < 256:
            raise ValueError(f"vocab_size {vocab_size} < 256")
        self.merges, self.vocab = {}, {i: bytes([i]) for i in range(256)}
        freq = defaultdict(int)
        for chunk in self._chunks(text):
            freq[tuple(chunk.encode("utf-8"))] += 1
        words = list(freq.items())  # [(word, n)]
        counts = defaultdict(int)
        where = defaultdict(set)  # pair -> indices of the words that hold it
        for w, (word, n) in enumerate(words):
            for pair in zip(word, word[1:]):
                counts[pair] += n
                where[pair].add(w)
        heap = [(-c, p) for p, c in counts.items()]
        heapq.heapify(heap)
        for new_id in range(256, vocab_size):
            while heap and counts.get(heap[0][1], 0) != -heap[0][0]:
                heapq.heappop(heap)  # stale: the count changed since it was pushed
            if not heap:
                break
            _, pair = heapq.heappop(heap)
            self.merges[pair] = new_id
            self.vocab[new_id] = self.vocab[pair[0]] + self.vocab[pair[1]]
            changed = set()
            for w in list(where[pair]):
                word, n = words[w]
                for p in zip(word, word[1:]):  # take the old word's pairs out
                    counts[p] -= n
                    changed.add(p)
                word = _replace(word, pair, new_id)
                words[w] = (word, n)
                for p in zip(word, word[1:]):  # and the new word's in
                    counts[p] += n
                    where[p].add(w)
                    changed.add(p)
            for p in changed:
                if counts[p] > 0:
                    heapq.heappush(heap, (-counts[p], p))
                else:
                    counts.pop(p, None)

    def encode(self, text):
        out = []
        for chunk in self._chunks(text):
            word = tuple(chunk.encode("utf-8"))
            for pair, new_id in self.merges.items():
                if len(word) < 2:
                    break
                if pair[0] in word:
                    word = _replace(word, pair, new_id)
            out.extend(word)
        return out

    def decode(self, ids):
        return bytes(b"".join([self.vocab[i] for i in ids])).decode("utf-8", errors="replace")
