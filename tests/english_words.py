"""English left in a text meant for a learner who reads Chinese: what the zh tests look for.

What may stay English, by the product's rule (code, names and numbers stay as they are):
- code: a word joined to code punctuation (nn.Linear, KATA=mha, float32[2, 3], --seed,
  `x`), or with a digit or an underscore in it (causal_mask, fp16);
- quotes: a line of the stub a convention quotes (桩代码写明：“...”), and an exception's own message after its
  type ("ValueError: ..."), which the learner's code or PyTorch wrote;
- names: a fixed list of proper names and acronyms (PyTorch, CUDA, LoRA...), and the words of
  commands: kata names and aliases, make targets, the dependencies (make check, pip install numpy);
- a single lowercase word between Chinese ones: a technical term read as a name
  (weights, dropout, logits), as Chinese engineers write them; a few terms of two (TERMS);
- symbols: a word of one or two letters (x, hs, the T and V of [B, T, V]) but the small words.
English prose shows as two plain words in a row ("odd length"), or as one of the small
words prose cannot do without (the, of, is...): either is reported.
"""

from __future__ import annotations

import functools
import re

NAMES = {
    "PyTorch", "CUDA", "CPU", "GPU", "NaN", "Inf", "True", "False", "None", "TODO", "Ctrl",
    "KATA", "SEED", "ARGS", "NEXT", "PYTHON", "Python", "Transformer", "Transformers", "Llama",
    "LoRA", "MoE", "DPO", "GRPO", "PPO", "GAE", "KV", "RoPE", "SwiGLU", "RMSNorm", "LayerNorm",
    "GQA", "MHA", "SDPA", "Flash", "FlashAttention", "Softmax", "Linear", "Embedding",
    "Hugging", "Face", "nanoGPT", "GPT", "Meta", "Adam", "AdamW", "SGD", "BOS", "EOS", "PAD",
    "Megatron", "MLP", "GELU", "DDP", "ZeRO", "NCCL",
}  # fmt: skip
COMMAND_WORDS = {"make", "python", "pip", "install", "numpy", "pytest", "torch", "timeout"}
SMALL_WORDS = {"the", "of", "is", "are", "and", "or", "to", "an", "in", "on", "with", "not", "was", "its", "it"}
TERMS = ("teacher forcing",)  # terms Chinese engineers write in English, as they are

_QUOTED = re.compile(r"写明：“[^”]*”|`[^`]*`")  # the stub's line, as a convention quotes it; code
_RAISED = re.compile(r"\b\w*(?:Error|Exception|Warning|Interrupt|Exit)\b: [^；\n]*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CODE_NEIGHBOURS = set("._=()[]/`-<>{}@#*+|^\\")


@functools.cache
def names() -> frozenset[str]:
    """NAMES, COMMAND_WORDS, and the names of the katas, their aliases and the make targets."""
    from judge.catalog import load_catalog
    from judge.make_help import described
    from judge.paths import ROOT

    katas = load_catalog()
    found = {name for kata in katas for name in (kata.name, *kata.aliases)}
    found |= {target for target, _ in described(ROOT / "Makefile")}
    return frozenset(NAMES | COMMAND_WORDS | found)


def _plain(text: str, match: re.Match) -> bool:
    """A word of prose: letters only, not touching code punctuation, not a listed name."""
    word = match.group()
    if not word.isalpha() or word in names() or (len(word) <= 2 and word.lower() not in SMALL_WORDS):
        return False  # code, a name, or a symbol (x, hs, Q, T)
    before = text[match.start() - 1] if match.start() > 0 else " "
    after = text[match.end()] if match.end() < len(text) else " "
    return before not in _CODE_NEIGHBOURS and after not in _CODE_NEIGHBOURS


def english_prose(text: str) -> list[str]:
    """The stretches of English prose in `text` (empty when it is all Chinese, code and names)."""
    text = _RAISED.sub(" ", _QUOTED.sub(" ", text))
    for term in TERMS:
        text = text.replace(term, " ")
    runs: list[list[str]] = []
    end = None  # where the run being read ends, or None when no run is open
    for match in _WORD.finditer(text):
        if not _plain(text, match):
            end = None
            continue
        if end is not None and text[end : match.start()].strip(" ,") == "":
            runs[-1].append(match.group())
        else:
            runs.append([match.group()])
        end = match.end()
    return [" ".join(run) for run in runs if len(run) > 1 or run[0].lower() in SMALL_WORDS]
