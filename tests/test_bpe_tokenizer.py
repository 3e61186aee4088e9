"""bpe_tokenizer: merges, vocab, encodings and decodings judged exactly against a naive BPE written here.

Each case is one story played where the kata lives: BPETokenizer(pattern), train(text,
vocab_size), then its merges (as (pair, id) items, in insertion order), its vocab (sorted by
id), encode() of the training text and of a probe text, and decode() of the reference's ids
(whole encodings and cut ones: a character's bytes split across tokens). The judging process
compares each with the naive reference below (`train_reference`: every chunk occurrence
recounted every round, ties to the smallest pair; `encode_reference`: each merge applied
once in creation order within each chunk, the contract's equivalent formulation), in that
order: the first difference is the message. Round trips of random unicode (1-, 2-, 3- and
4-byte characters, drawn from a fixed seed per case) and the length of the training text's
encoding are properties. The reference was checked once, out of the suite, against Hugging
Face `tokenizers` (BpeTrainer, printable-ASCII corpora) and `tiktoken` (rank-based encoding).

Exact comparisons: no tolerance.
"""

from __future__ import annotations

import numbers
import random
import re

from judge.language import pick
from judge.testing.checks import Mismatch
from judge.testing.scenarios import outcome, raised, scenario
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core

# Pre-tokenization patterns (standard `re`, no capturing groups). WORDS is the contract's; it
# drops nothing from lower-case words, digits and whitespace. GPT2_LIKE is GPT-2's split with
# \w for \p{L}/\p{N}: it matches every character (a char is \w, \s or neither), so round trips hold.
WORDS = r" ?[a-z]+| ?[0-9]+|\s+"
GPT2_LIKE = r"'(?:[sdmt]|ll|ve|re)| ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+"

# --------------------------------------------------------------------------- the reference


def chunks_of(text: str, pattern: str | None) -> list[str]:
    if pattern is None:
        return [text] if text else []
    return re.findall(pattern, text)


def replaced(seq: list[int], pair: tuple, new_id: int) -> list[int]:
    """Every occurrence of pair replaced by new_id, left to right, non-overlapping."""
    out, skip = [], False
    for i, token in enumerate(seq):
        if skip:
            skip = False
        elif i + 1 < len(seq) and (token, seq[i + 1]) == pair:
            out.append(new_id)
            skip = True
        else:
            out.append(token)
    return out


def train_reference(text: str, vocab_size: int, pattern: str | None) -> tuple[list, dict]:
    """(merges as [((a, b), id), ...] in creation order, vocab {id: bytes}): every chunk
    occurrence recounted every round; the largest count, ties to the smallest pair."""
    seqs = [list(chunk.encode("utf-8")) for chunk in chunks_of(text, pattern)]
    merges, vocab = [], {i: bytes([i]) for i in range(256)}
    for new_id in range(256, vocab_size):
        counts: dict = {}
        for seq in seqs:
            for pair in zip(seq, seq[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        top = max(counts.values())
        pair = min(p for p, n in counts.items() if n == top)
        merges.append((pair, new_id))
        vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
        seqs = [replaced(seq, pair, new_id) for seq in seqs]
    return merges, vocab


def encode_reference(text: str, merges: list, pattern: str | None) -> list[int]:
    """Each merge once, in creation order, within each chunk (equal to lowest rank first)."""
    ids = []
    for chunk in chunks_of(text, pattern):
        seq = list(chunk.encode("utf-8"))
        for pair, new_id in merges:
            seq = replaced(seq, pair, new_id)
        ids += seq
    return ids


def decode_reference(ids: list[int], vocab: dict) -> str:
    return bytes(b for i in ids for b in vocab[i]).decode("utf-8", errors="replace")


def _self_check() -> None:
    """The contract's worked answers, so the reference cannot drift from them."""
    merges, _ = train_reference("aaaaaa", 300, None)
    assert merges == [((97, 97), 256), ((256, 256), 257), ((257, 256), 258)]
    assert encode_reference("aaaa", merges, None) == [257]
    text = "héllo 日本語 héllo"
    merges, vocab = train_reference(text, 257, None)
    assert merges == [((104, 195), 256)] and vocab[256] == b"h\xc3"
    assert "\ufffd" in decode_reference(encode_reference(text, merges, None)[:1], vocab)
    merges, _ = train_reference("ab ab ab", 300, WORDS)
    assert merges == [((97, 98), 256), ((32, 256), 257)]  # no merge across a chunk boundary
    assert len(train_reference("abc", 400, None)[0]) == 2


_self_check()

# --------------------------------------------------------------------------- the case table

# Characters of the random texts: ASCII letters, digits, spaces, punctuation, and 2-, 3- and
# 4-byte UTF-8 characters (é ñ ü, 日 本 語, emoji), few of each so that pairs repeat.
ASCII = "abcdeab  ab" + "0112" + ".,!'"
MULTI = "éñü日本語😀🚀"


def random_text(rng: random.Random, length: int, multi: float = 0.15) -> str:
    return "".join(rng.choice(MULTI) if rng.random() < multi else rng.choice(ASCII) for _ in range(length))


def draw_stories(rng: random.Random, count: int) -> list[dict]:
    """A pattern (None, WORDS or GPT2_LIKE), a text of 20 to 70 characters, 1 to 40 merges asked,
    and a probe text of the same characters."""
    cases = []
    for _ in range(count):
        cases.append(
            {
                "pattern": rng.choice([None, WORDS, GPT2_LIKE]),
                "text": random_text(rng, rng.randint(20, 70)),
                "vocab_size": 256 + rng.randint(1, 40),
                "probe": random_text(rng, rng.randint(5, 30)),
            }
        )
    return cases


# fmt: off
EDGES = (  # the most telling first: a mutant is graded up to its first failure
    edge("tied counts: the smallest pair wins, not the first nor the greatest", "计数相同：最小的 pair 胜出，而不是最先出现的或最大的",
         pattern=None, text="xyabxyab", vocab_size=262, probe="abxyxyab"),
    edge("chunk boundaries: no merge spans two chunks", "块边界：合并不跨越两个块",
         pattern=WORDS, text="ab ab ab", vocab_size=300, probe="ab  ab"),
    edge("chunk frequencies: a chunk that occurs 3 times counts 3 times", "块的频次：出现 3 次的块计 3 次",
         pattern=WORDS, text="zz zz zz ab cab", vocab_size=262, probe="cab zz ab"),
    edge("multi-byte UTF-8: merges inside characters, decoding joins bytes first", "多字节 UTF-8：在字符内部合并，解码先拼接字节",
         pattern=None, text="héllo 日本語 héllo", vocab_size=257, probe="日本 héllo"),
    edge("overlapping run: counted at every position, replaced without overlap", "重叠的连续字符：每个位置都计数，替换时不重叠",
         pattern=None, text="aaaaaa", vocab_size=260, probe="aaaaaaa"),
    edge("overlaps count: 'zzzz' gives (z, z) three times", "重叠也计数：'zzzz' 中 (z, z) 出现三次",
         pattern=None, text="zzzz0abab", vocab_size=258, probe="zzzzz"),
    edge("more merges than pairs: stops early", "合并数多于可合并的 pair：提前停止",
         pattern=None, text="abc", vocab_size=400, probe="abcabc"),
    edge("encoding: the lowest merge id first, not the leftmost merge", "编码：先合并序号最小的 pair，而不是最左边的",
         pattern=None, text="bbcba", vocab_size=260, probe="bba"),
    edge("empty text: no merges", "空文本：没有合并",
         pattern=None, text="", vocab_size=300, probe="héllo"),
    edge("vocab_size == 256: no merges, encode gives the raw bytes", "vocab_size == 256：没有合并，编码即原始字节",
         pattern=GPT2_LIKE, text="héllo, 42 wörld", vocab_size=256, probe="hi 日本"),
)
# fmt: on
CASES = CaseTable(draw=draw_stories, edges=EDGES, draws=3)

# --------------------------------------------------------------------------- scenarios (run where the kata lives)


def plain_id(value):
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else repr(value)[:60]


def plain_merges(merges):
    """[((a, b), id), ...] in the dict's order; anything else as a description."""
    if not isinstance(merges, dict):
        return f"a {type(merges).__name__}, not a dict"
    items = []
    for pair, new_id in merges.items():
        key = tuple(plain_id(t) for t in pair) if isinstance(pair, tuple) else repr(pair)[:60]
        items.append((key, plain_id(new_id)))
    return items


def plain_vocab(vocab):
    """[(id, bytes), ...] sorted by id; anything else as a description."""
    if not isinstance(vocab, dict):
        return f"a {type(vocab).__name__}, not a dict"
    items = [(plain_id(k), v if isinstance(v, bytes) else repr(v)[:60]) for k, v in vocab.items()]
    return sorted(items, key=lambda kv: (isinstance(kv[0], str), kv[0]))


def plain_ids(ids):
    return [plain_id(i) for i in ids] if isinstance(ids, list) else f"a {type(ids).__name__}, not a list: {ids!r}"[:200]


@scenario
def played(kata, pattern, text: str, vocab_size: int, probes: list, decodes: list) -> dict:
    """The story: BPETokenizer(pattern).train(text, vocab_size); then its merges, vocab, the
    encodings of `probes` and the decodings of `decodes` (lists of ids). It stops at the first
    exception, recorded as its text under the step that raised."""
    trace = {}
    step = "merges"
    try:
        tokenizer = kata.BPETokenizer(pattern)
        tokenizer.train(text, vocab_size)
        trace["merges"] = plain_merges(tokenizer.merges)
        step = "vocab"
        trace["vocab"] = plain_vocab(tokenizer.vocab)
        step = "encoded"
        trace["encoded"] = [plain_ids(tokenizer.encode(probe)) for probe in probes]
    except Exception as error:  # noqa: BLE001 - the judge says which step raised
        trace[step] = raised(error, 300)
        return trace
    trace["decoded"] = []
    for ids in decodes:  # each decode on its own: a cut character may raise where a whole one does not
        try:
            trace["decoded"].append(tokenizer.decode(list(ids)))
        except Exception as error:  # noqa: BLE001 - the judge says which decode raised
            trace["decoded"].append(raised(error, 300))
    return trace


@scenario
def round_trips(kata, pattern, text: str, vocab_size: int, texts: list) -> dict:
    """Trained on `text`: decode(encode(t)) for each of `texts`, and len(encode(text))."""
    try:
        tokenizer = kata.BPETokenizer(pattern)
        tokenizer.train(text, vocab_size)
        return {
            "round trips": [tokenizer.decode(tokenizer.encode(t)) for t in texts],
            "training length": len(tokenizer.encode(text)),
        }
    except Exception as error:  # noqa: BLE001 - the judge says what raised
        return {"round trips": raised(error, 300)}


@scenario
def retrained(kata, first: tuple, second: tuple) -> dict:
    """train(*first), then train(*second) on the same tokenizer: its merges and vocab."""
    tokenizer = kata.BPETokenizer(None)
    tokenizer.train(*first)
    tokenizer.train(*second)
    return {"merges": plain_merges(tokenizer.merges), "vocab": plain_vocab(tokenizer.vocab)}


@scenario
def untrained(kata, text: str) -> dict:
    """A fresh BPETokenizer(): its merges, vocab and encode(text), before any train."""
    tokenizer = kata.BPETokenizer()
    return {
        "merges": plain_merges(tokenizer.merges),
        "vocab": plain_vocab(tokenizer.vocab),
        "encoded": [plain_ids(tokenizer.encode(text))],
    }


@scenario
def refusal(kata, what: str, text: str, vocab_size: int, ids: list) -> str:
    """What train(text, vocab_size) (what="train") or, trained, decode(ids) did."""
    tokenizer = kata.BPETokenizer()
    if what == "train":
        return outcome(lambda: tokenizer.train(text, vocab_size))
    tokenizer.train(text, vocab_size)
    return outcome(lambda: tokenizer.decode(ids))


# --------------------------------------------------------------------------- the judging process's side


def said_zh(text: str) -> str:
    """An outcome ("returned normally", "raised X: ...") in Chinese; the exception's own text stays."""
    return "正常返回了" if text == "returned normally" else "抛出了 " + text.removeprefix("raised ")

STEPS = ("merges", "vocab", "encoded", "decoded")


def shown_pair(pair, vocab: dict) -> str:
    if isinstance(pair, tuple) and all(isinstance(t, int) and t in vocab for t in pair):
        return f"{pair} {vocab[pair[0]] + vocab[pair[1]]!r}"
    return repr(pair)


def first_difference(got: list, want: list) -> int:
    for index, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return index
    return min(len(got), len(want))


def merges_message(call: str, got, want: list, vocab: dict) -> str:
    i = first_difference(got, want)
    if i == len(want):
        extra = ", ".join(f"{shown_pair(p, vocab)} -> {n}" for p, n in got[i : i + 3])
        return pick(
            f"{call} made {len(got)} merges where the reference stops after {len(want)} (no pair left, or "
            f"vocab_size reached); the extra ones: {extra}",
            f"{call} 做了 {len(got)} 次合并，参考实现在 {len(want)} 次后停止（没有 pair 可合并，或已达到 vocab_size）；"
            f"多出的：{extra}",
        )
    if i == len(got):
        missing = shown_pair(want[i][0], vocab)
        return pick(
            f"{call} made {len(got)} merges where the reference makes {len(want)}; the next one is "
            f"{missing} -> {want[i][1]} (pairs of count 1 are merged too)",
            f"{call} 只做了 {len(got)} 次合并，参考实现做了 {len(want)} 次；下一个应是 {missing} -> {want[i][1]}"
            f"（计数为 1 的 pair 也要合并）",
        )
    (gp, gn), (wp, wn) = got[i], want[i]
    return pick(
        f"{call}: the first {i} merges agree; merge {i + 1} is {shown_pair(gp, vocab)} -> {gn!r}, expected "
        f"{shown_pair(wp, vocab)} -> {wn} (largest count over every chunk occurrence, overlaps included; "
        f"ties to the smallest (left, right))",
        f"{call}：前 {i} 次合并一致；第 {i + 1} 次是 {shown_pair(gp, vocab)} -> {gn!r}，应为 "
        f"{shown_pair(wp, vocab)} -> {wn}（在每次出现的每个块上计数，重叠也算；计数相同时取最小的 (left, right)）",
    )


def judge_trace(trace: dict, want: dict, *, call: str, inputs: dict, vocab: dict) -> None:
    """Each step of the story against the reference, in order; the first difference raises Mismatch."""
    for step in STEPS:
        got = trace.get(step, "never reached")
        if got == want[step]:
            continue
        if isinstance(got, str) and step != "decoded":
            message = pick(f"{call}: {step}: {got}", f"{call}：{step}：{said_zh(got)}")
        elif step == "merges":
            message = merges_message(call, got, want[step], vocab)
        elif step == "vocab":
            extra = sorted(set(map(repr, got)) ^ set(map(repr, want[step])))[:3]
            message = pick(
                f"{call}: the merges are right but the vocab differs (ids 0..255 the single bytes, a merged id "
                f"vocab[left] + vocab[right]); differing entries: {', '.join(extra)}",
                f"{call}：合并正确但 vocab 不同（0..255 为单字节，合并出的 id 为 vocab[left] + vocab[right]）；"
                f"不同的条目：{', '.join(extra)}",
            )
        else:
            things = inputs[step]
            index = first_difference(got, want[step]) if isinstance(got, list) else 0
            index = min(index, len(things) - 1)
            shown = got[index] if isinstance(got, list) and index < len(got) else got
            verb = "encode" if step == "encoded" else "decode"
            hint = pick(
                "per chunk, lowest merge id first, no merge across chunks"
                if verb == "encode"
                else "join every token's bytes, then decode once with errors='replace'",
                "逐块处理，先合并序号最小的 pair，不跨块合并" if verb == "encode" else "先拼接所有 token 的字节，再用 errors='replace' 解码一次",
            )
            if isinstance(shown, str) and shown.startswith("raised "):  # what the call raised, as its text
                result, result_zh = shown, "抛出了 " + shown.removeprefix("raised ")
            else:
                result, result_zh = f"gave {shown!r}", f"得到 {shown!r}"
            message = pick(
                f"{call}: {verb}({things[index]!r}) {result}, expected {want[step][index]!r} ({hint})",
                f"{call}：{verb}({things[index]!r}) {result_zh}，应为 {want[step][index]!r}（{hint}）",
            )
        raise Mismatch(message, what=step, actual=got, expected=want[step])


def cut_points(ids: list[int]) -> list[list[int]]:
    """The ids to decode: the whole encoding, its first token, all but its last."""
    return [ids, ids[:1], ids[:-1]]


def judge_story(kata, case) -> None:
    pattern, text, vocab_size = case["pattern"], case["text"], case["vocab_size"]
    merges, vocab = train_reference(text, vocab_size, pattern)
    probes = [text, case["probe"]]
    encoded = [encode_reference(p, merges, pattern) for p in probes]
    decodes = [cut for ids in encoded for cut in cut_points(ids)]
    want = {
        "merges": merges,
        "vocab": sorted(vocab.items()),
        "encoded": encoded,
        "decoded": [decode_reference(ids, vocab) for ids in decodes],
    }
    call = f"BPETokenizer({pattern!r}).train({text!r}, {vocab_size})"

    def replay(implementation) -> dict:
        return played(implementation, pattern, text, vocab_size, probes, decodes)

    with SPEC.diagnosing(replay, case):
        judge_trace(replay(kata), want, call=call, inputs={"encoded": probes, "decoded": decodes}, vocab=vocab)


# --------------------------------------------------------------------------- the benchmark

BENCH_MERGES = 80


def bench_text() -> str:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 7))) for _ in range(300)]
    return " ".join(rng.choice(words) for _ in range(500))  # about 2,500 characters


def benchmark(kata, device):
    """(kata call, reference call): train with GPT2_LIKE on about 2,500 characters of words (80
    merges), then encode the same text; the reference is the naive one above."""
    text = bench_text()

    def kata_call():
        tokenizer = kata.BPETokenizer(GPT2_LIKE)
        tokenizer.train(text, 256 + BENCH_MERGES)
        tokenizer.encode(text)

    def reference_call():
        merges, _ = train_reference(text, 256 + BENCH_MERGES, GPT2_LIKE)
        encode_reference(text, merges, GPT2_LIKE)

    return kata_call, reference_call


SPEC = KataSpec(
    kata="bpe_tokenizer",
    symbol="BPETokenizer",
    reference=(
        "a naive byte-level BPE written in the test (every chunk occurrence recounted each round, ties to the "
        "smallest pair; merges applied in creation order per chunk), checked once against HF tokenizers and tiktoken"
    ),
    tolerances={},  # merges, vocab, ids and strings are compared exactly
    tolerance_note=(
        "exact: merges (order included), vocab, ids and strings; the solution and both variants measured over 100 "
        "seeds x every case: 0 differences"
    ),
    cases=CASES,
    benchmark=benchmark,
)

# --------------------------------------------------------------------------- the math


@core(zh="训练得到的合并（含顺序）、vocab、编码与解码都与参考实现一致")
def test_merges_vocab_encodings_and_decodings_match_the_reference(kata, rng):
    for case in CASES.cases(rng):
        with case.judged():
            judge_story(kata, case)


# Round-trip texts: every kind of character, a fixed seed per case.
ROUND_TRIP_CASES = (
    edge("pattern None", "pattern 为 None", pattern=None, seed=1),
    edge("GPT-2-like pattern, matching every character", "类 GPT-2 的 pattern，匹配每个字符", pattern=GPT2_LIKE, seed=2),
)


@core(zh="随机 unicode 文本 decode(encode(s)) == s，训练文本的编码不长于其字节数")
def test_random_unicode_round_trips_and_the_training_text_gets_shorter(kata, rng):
    for case in ROUND_TRIP_CASES:
        draw = random.Random(case["seed"] * 1000 + rng.randint(0, 999))
        text = random_text(draw, 60, multi=0.3)
        texts = [random_text(draw, draw.randint(1, 25), multi=0.5) for _ in range(6)]
        texts.append("".join(draw.choice(MULTI) for _ in range(8)))  # only multi-byte characters
        pattern = case["pattern"]
        call = f"BPETokenizer({pattern!r}).train({text!r}, 300)"

        def replay(implementation, pattern=pattern, text=text, texts=texts) -> dict:
            return round_trips(implementation, pattern, text, 300, texts)

        with case.judged(), SPEC.diagnosing(replay, case):
            got = replay(kata)
            if got["round trips"] != texts:
                found = got["round trips"]
                i = first_difference(found, texts) if isinstance(found, list) else 0
                shown = found[i] if isinstance(found, list) and i < len(found) else found
                raise Mismatch(
                    pick(
                        f"{call}: decode(encode({texts[i]!r})) gave {shown!r}",
                        f"{call}：decode(encode({texts[i]!r})) 得到 {shown!r}",
                    ),
                    what="round trips",
                    actual=found,
                    expected=texts,
                )
            limit = len(text.encode("utf-8"))
            if not isinstance(got["training length"], int) or got["training length"] > limit:
                raise Mismatch(
                    pick(
                        f"{call}: encode(the training text) has {got['training length']} ids, more than its {limit} bytes",
                        f"{call}：encode(训练文本) 有 {got['training length']} 个 id，多于它的 {limit} 个字节",
                    ),
                    what="training length",
                    actual=got["training length"],
                    expected=limit,
                )


# --------------------------------------------------------------------------- conventions


@convention("train raises ValueError when vocab_size < 256.", zh="vocab_size < 256 时 train 抛出 ValueError")
def test_a_vocab_smaller_than_the_bytes_raises_value_error(kata):
    for vocab_size in (255, 0):
        call = f"BPETokenizer().train('abab', {vocab_size})"

        def replay(implementation, vocab_size=vocab_size) -> dict:
            return {"outcome": refusal(implementation, "train", "abab", vocab_size, [])}

        with SPEC.diagnosing(replay):
            got = replay(kata)["outcome"]
            if got != "raised ValueError":
                raise Mismatch(
                    pick(f"{call} {got}; expected ValueError", f"{call} {said_zh(got)}；应抛出 ValueError"),
                    what="outcome",
                    actual=got,
                    expected="raised ValueError",
                )


@convention(
    "train starts over each time it is called: merges and vocab are those of the last text.",
    zh="每次调用 train 都从头开始",
)
def test_training_again_starts_over(kata):
    first, second = ("aaaa0bbbb1cccc2dddd", 270), ("xyxy", 258)
    merges, vocab = train_reference(*second, None)
    want = {"merges": merges, "vocab": sorted(vocab.items())}
    call = pick(
        f"BPETokenizer(): train{first!r}, then train{second!r}", f"同一个 BPETokenizer()：先 train{first!r}，再 train{second!r}"
    )

    def replay(implementation) -> dict:
        return retrained(implementation, first, second)

    with SPEC.diagnosing(replay):
        got = replay(kata)
        for what in ("merges", "vocab"):
            if got[what] != want[what]:
                raise Mismatch(
                    pick(
                        f"{call}: {what} {got[what]!r}, expected only the second text's: {want[what]!r}"[:700],
                        f"{call}：{what} 为 {got[what]!r}，应只含第二段文本的：{want[what]!r}"[:700],
                    ),
                    what=what,
                    actual=got[what],
                    expected=want[what],
                )


@convention(
    "Before train: merges == {} and vocab holds the 256 single bytes (encode gives the raw bytes).",
    zh="训练之前：merges 为空，vocab 为 256 个单字节，编码即原始字节",
)
def test_an_untrained_tokenizer_has_the_256_bytes_and_no_merges(kata):
    text = "héllo 日本"
    want = {
        "merges": [],
        "vocab": [(i, bytes([i])) for i in range(256)],
        "encoded": [list(text.encode("utf-8"))],
    }

    def replay(implementation) -> dict:
        return untrained(implementation, text)

    with SPEC.diagnosing(replay):
        got = replay(kata)
        for what, value in want.items():
            if got[what] != value:
                raise Mismatch(
                    pick(
                        f"BPETokenizer() before train: {what} is {got[what]!r}"[:400] + f", expected {value!r}"[:300],
                        f"训练前的 BPETokenizer()：{what} 为 {got[what]!r}"[:400] + f"，应为 {value!r}"[:300],
                    ),
                    what=what,
                    actual=got[what],
                    expected=value,
                )


@convention("decode raises KeyError for an id that is not in vocab.", zh="decode 遇到 vocab 中没有的 id 抛出 KeyError")
def test_decoding_an_unknown_id_raises_key_error(kata):
    ids = [97, 300]  # trained with 2 merges: ids 256 and 257 exist, 300 does not
    call = f"BPETokenizer().train('abcabc', 258); decode({ids})"

    def replay(implementation) -> dict:
        return {"outcome": refusal(implementation, "decode", "abcabc", 258, ids)}

    with SPEC.diagnosing(replay):
        got = replay(kata)["outcome"]
        if not got.startswith("raised KeyError"):
            raise Mismatch(
                pick(f"{call} {got}; expected KeyError", f"{call} {said_zh(got)}；应抛出 KeyError"),
                what="outcome",
                actual=got,
                expected="raised KeyError",
            )
