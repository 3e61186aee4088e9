"""Mutants: realistic slips, each kept as a small patch against the current solution.

tests/mutants/<kata>.toml lists a kata's mutants (after mutmut and cosmic-ray: a mutant
is a named operator applied to the current source, never a stale copy of it):

    [[mutant]]
    name = "diagonal_blocked"               # unique within the kata
    why = "The diagonal is blocked too: a position must be able to see itself."
    expect = "fail"                          # or "forbidden", for a slip that delegates;
                                             # or "timeout", for one that deadlocks (judge/worlds.py)
    tier = "core"                            # the tier whose test rejects it: "core" (the math)
                                             # or "conventions" (every core test still passes)
    [[mutant.edit]]                          # one or more; applied in order
    find = "diagonal=1"                      # must occur exactly once, else the patch is stale
    replace = "diagonal=0"

A slip that is a rewrite rather than an edit (wrapping nn.MultiheadAttention, say) names a
whole file instead: `file = "<kata>/<name>.py"`, under tests/mutants/. `why` is written
for the learner: the failure diagnosis quotes it. A patch that no longer applies (its
`find` text is gone, or occurs twice, or the result does not parse) raises MutantError:
a stale mutant must fail loudly, never be "rejected" by a NameError.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

from judge.paths import MUTANTS, SOLUTIONS

EXPECTED = ("fail", "forbidden", "timeout")
TIERS = ("core", "conventions")  # judge.protocol.Tier


class MutantError(ValueError):
    """A mutant's entry is malformed or its patch no longer applies."""


@dataclass(frozen=True)
class Edit:
    find: str
    replace: str


@dataclass(frozen=True)
class Mutant:
    kata: str
    name: str
    why: str
    expect: str = "fail"
    edits: tuple[Edit, ...] = ()
    file: str | None = None
    why_zh: str | None = None  # the same sentence in Chinese, shown when the learner reads Chinese
    tier: str | None = None  # the tier whose test rejects it first (None: a forbidden slip, refused instead)

    @property
    def id(self) -> str:
        return f"{self.kata}/{self.name}"

    def source(self, solutions: Path = SOLUTIONS, mutants: Path = MUTANTS) -> str:
        """The mutant's text: the kata's current solution with the edits applied, or the whole
        file; a MutantError if it does not parse."""
        text = self.applied(solutions, mutants)
        try:
            ast.parse(text)
        except SyntaxError as error:
            raise MutantError(f"mutant {self.id} does not parse (line {error.lineno}: {error.msg})") from None
        return text

    def applied(self, solutions: Path = SOLUTIONS, mutants: Path = MUTANTS) -> str:
        """source() without its parse, for a caller that compiles the text anyway (a parse is
        most of source()'s cost: about 10 ms a kata's mutants, in every diagnosed grade)."""
        solution = (solutions / f"{self.kata}.py").read_text(encoding="utf-8")
        if self.file is not None:
            text = (mutants / self.file).read_text(encoding="utf-8")
        else:
            text = solution
            for number, edit in enumerate(self.edits, 1):
                count = text.count(edit.find)
                if count != 1:
                    where = "is not in" if count == 0 else f"occurs {count} times in"
                    raise MutantError(
                        f"mutant {self.id}, edit {number}: its find text {where} solutions/{self.kata}.py "
                        f"(expected once); the solution changed, so update the patch: {edit.find[:80]!r}"
                    )
                text = text.replace(edit.find, edit.replace)
        if text == solution:
            raise MutantError(f"mutant {self.id} is the solution itself")
        return text


def load_mutants(kata: str, mutants: Path = MUTANTS) -> list[Mutant]:
    """The mutants of `kata`, in file order; [] when it has none."""
    path = mutants / f"{kata}.toml"
    if not path.exists():
        return []
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("mutant", [])
    except tomllib.TOMLDecodeError as error:
        raise MutantError(f"{path.name} is not valid TOML: {error}") from None
    found: list[Mutant] = []
    for number, entry in enumerate(entries, 1):
        where = f"{path.name}, mutant #{number}"
        unknown = sorted(set(entry) - {"name", "why", "why_zh", "expect", "edit", "file", "tier"})
        if unknown:
            raise MutantError(f"{where}: unknown field {unknown[0]!r}")
        name, why = entry.get("name"), entry.get("why")
        if not isinstance(name, str) or not name.isidentifier():
            raise MutantError(f"{where}: name must be an identifier, got {name!r}")
        if not isinstance(why, str) or not why.strip():
            raise MutantError(f"{where} ({name}): why must say, for the learner, what the slip is")
        expect = entry.get("expect", "fail")
        if expect not in EXPECTED:
            raise MutantError(f"{where} ({name}): expect must be one of {EXPECTED}, got {expect!r}")
        edits = entry.get("edit", [])
        if bool(edits) == ("file" in entry):
            raise MutantError(f"{where} ({name}): give either [[mutant.edit]] entries or a file, not both or neither")
        try:
            edits = tuple(Edit(e["find"], e["replace"]) for e in edits)
        except (KeyError, TypeError):
            raise MutantError(f"{where} ({name}): each edit needs a find and a replace string") from None
        if any(e.find == e.replace or not e.find for e in edits):
            raise MutantError(f"{where} ({name}): an edit must change something")
        if any(m.name == name for m in found):
            raise MutantError(f"{where}: mutant {name!r} is listed twice")
        tier = entry.get("tier")
        if (tier is not None or expect == "fail") and tier not in TIERS:
            raise MutantError(f"{where} ({name}): tier must be one of {TIERS} (the tier that rejects it), got {tier!r}")
        why_zh = entry.get("why_zh")
        if why_zh is not None and (not isinstance(why_zh, str) or not why_zh.strip()):
            raise MutantError(f"{where} ({name}): why_zh, when given, must be a non-empty string")
        found.append(Mutant(kata, name, why.strip(), expect, edits, entry.get("file"), why_zh and why_zh.strip(), tier))
    return found


def all_mutants(katas: list[str], mutants: Path = MUTANTS) -> list[Mutant]:
    return [mutant for kata in katas for mutant in load_mutants(kata, mutants)]
