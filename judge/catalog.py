"""The catalog: info.toml, the one place for each kata's metadata, read and validated.

Each [[kata]] has a name (the file name under katas/ and solutions/), a title, a
difficulty (1 warm-up to 5 hard), suggested minutes, what it is judged against
(`reference`, shown in the README) and hints (a nudge, an approach, a near-answer); and the
same title and hints in Chinese (`title_zh`, `hints_zh`), shown when the learner's language is
Chinese (judge.language).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from judge.errors import UsageError
from judge.language import pick, tr
from judge.paths import INFO, SOLUTIONS

NAME = re.compile(r"[a-z][a-z0-9_]*")
FIELDS = {"name": str, "title": str, "difficulty": int, "minutes": int, "reference": str, "hints": list}
OPTIONAL = {
    "title_zh": str,
    "hints_zh": list,
    "reference_zh": str,
    "time_limit": int,
    "test_timeout": int,
    "aliases": list,
    "interview": str,
    "interview_zh": str,
}


class CatalogError(UsageError):
    """info.toml is missing, malformed, or an entry breaks a rule."""


@dataclass(frozen=True)
class Kata:
    name: str
    title: str
    difficulty: int
    minutes: int
    reference: str
    hints: list[str] = field(default_factory=list)
    title_zh: str | None = None
    hints_zh: list[str] | None = None
    reference_zh: str | None = None
    time_limit: int | None = None  # seconds for the kata's whole run, when the default is too short
    test_timeout: int | None = None  # seconds for one of its tests (a training test, say)
    aliases: list[str] = field(default_factory=list)  # names people use for it: KATA=mha works
    interview: str = ""  # the bare task of interview mode: at most 3 lines, then its shapes (judge.bare)
    interview_zh: str | None = None

    @property
    def shown_interview(self) -> str:
        """The interview task in the learner's language."""
        return pick(self.interview, self.interview_zh)

    @property
    def shown_title(self) -> str:
        """The title in the learner's language."""
        return pick(self.title, self.title_zh)

    @property
    def shown_hints(self) -> list[str]:
        """The hints in the learner's language."""
        return pick(self.hints, self.hints_zh)

    @property
    def stars(self) -> str:
        return "★" * self.difficulty + "☆" * (5 - self.difficulty)


def load_catalog(path: Path = INFO, solutions: Path = SOLUTIONS) -> list[Kata]:
    """The katas in order of play. Raises CatalogError naming the first broken rule."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as error:
        raise CatalogError(f"{path.name} could not be read: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise CatalogError(f"{path.name} is not valid TOML: {error}") from None
    entries = data.get("kata")
    if not isinstance(entries, list) or not entries:
        raise CatalogError(f"{path.name} has no [[kata]] entries")
    katas: list[Kata] = []
    for number, entry in enumerate(entries, 1):
        katas.append(_kata(entry, f"{path.name}, kata #{number}", solutions))
    seen: set[str] = set()
    for kata in katas:
        if kata.name in seen:
            raise CatalogError(f"{path.name}: kata {kata.name!r} is listed twice")
        seen.add(kata.name)
    for kata in katas:
        for alias in kata.aliases:
            if not NAME.fullmatch(alias) or alias in seen:
                raise CatalogError(f"{path.name}: {kata.name}'s alias {alias!r} is not a free lower-case identifier")
            seen.add(alias)
    return katas


def _kata(entry: dict, where: str, solutions: Path) -> Kata:
    unknown = sorted(set(entry) - set(FIELDS) - set(OPTIONAL))
    if unknown:
        raise CatalogError(f"{where}: unknown field {unknown[0]!r} (the fields: {', '.join(FIELDS)})")
    for key, kind in FIELDS.items():
        if key not in entry:
            raise CatalogError(f"{where}: missing field {key!r}")
        if not isinstance(entry[key], kind) or (kind is int and isinstance(entry[key], bool)):
            raise CatalogError(f"{where}: {key} must be a {kind.__name__}, got {entry[key]!r}")
    name = entry["name"]
    where = f"{where} ({name})"
    if not NAME.fullmatch(name):
        raise CatalogError(f"{where}: the name must be a lower-case Python identifier")
    if not 1 <= entry["difficulty"] <= 5:
        raise CatalogError(f"{where}: difficulty must be 1 to 5, got {entry['difficulty']}")
    if entry["minutes"] < 1:
        raise CatalogError(f"{where}: minutes must be at least 1, got {entry['minutes']}")
    if not all(isinstance(hint, str) and hint.strip() for hint in entry["hints"]):
        raise CatalogError(f"{where}: hints must be non-empty strings")
    for key, kind in OPTIONAL.items():
        if key in entry and not isinstance(entry[key], kind):
            raise CatalogError(f"{where}: {key} must be a {kind.__name__}, got {entry[key]!r}")
    if "hints_zh" in entry and (
        len(entry["hints_zh"]) != len(entry["hints"])
        or not all(isinstance(hint, str) and hint.strip() for hint in entry["hints_zh"])
    ):
        raise CatalogError(f"{where}: hints_zh must translate each of the {len(entry['hints'])} hints")
    if not (solutions / f"{name}.py").is_file():
        raise CatalogError(f"{where}: no solutions/{name}.py")
    return Kata(**entry)


def kata_names(katas: list[Kata]) -> list[str]:
    return [kata.name for kata in katas]


def kata_aliases(katas: list[Kata]) -> dict[str, str]:
    """alias -> kata name, for resolve_kata: {"mha": "multi_head_attention", ...}."""
    return {alias: kata.name for kata in katas for alias in kata.aliases}


TABLE_HEADERS = {
    "en": "| kata | what you write | difficulty | minutes | judged against |",
    "zh": "| 题目 | 你要写的 | 难度 | 建议分钟 | 对照基准 |",
}


SEE_ABOVE = {"en": "(see above)", "zh": "（见上文）"}


def kata_table(katas: list[Kata], lang: str = "en", paths: list | None = None) -> str:
    """The README's kata tables (README.zh-CN.md's in Chinese), made from info.toml so they never
    disagree: one per learning path (judge.learning), in its order, under the path's title; a
    kata met in an earlier path says so instead of repeating what it is judged against. No
    paths: one table in the order of play."""
    by_name = {kata.name: kata for kata in katas}
    groups = [(None, katas)] if not paths else [(p, [by_name[n] for n in p.katas]) for p in paths]
    seen: set[str] = set()
    parts = []
    for path, members in groups:
        rows = [TABLE_HEADERS[lang], "|---|---|---|---|---|"]
        for kata in members:
            title, reference = (
                (kata.title_zh or kata.title, kata.reference_zh or kata.reference)
                if lang == "zh"
                else (kata.title, kata.reference)
            )
            if kata.name in seen:
                reference = SEE_ABOVE[lang]
            seen.add(kata.name)
            rows.append(f"| `{kata.name}` | {title} | {kata.stars} | {kata.minutes} | {reference} |")
        heading = [] if path is None else [f"### {(path.title_zh or path.title) if lang == 'zh' else path.title}", ""]
        parts.append("\n".join(heading + rows))
    return "\n\n".join(parts)


def kata_not_named(names: list[str], example: str) -> UsageError:
    """The error for a command given no kata: how to name one (`example`), and the names."""
    return UsageError(tr("name the kata, e.g. {example} (the katas: {names})", example=example, names=", ".join(names)))


def resolve_kata(text: str, names: list[str], aliases: dict[str, str] | None = None) -> str:
    """The kata a learner meant: `causal_mask`, `causal_mask.py` and `katas/causal_mask.py` all name
    causal_mask, and so does an alias in any case (`MHA`, `mha`: multi_head_attention). A word
    that several katas share (`attention`) is answered with those katas; any other unknown name
    with the nearest one. Either way in one line."""
    stem = Path(text.strip()).name.removesuffix(".py")
    aliases = aliases or {}
    for word in (stem, stem.lower().replace("-", "_")):
        if word in names:
            return word
        if word in aliases:
            return aliases[word]
    sharing = [name for name in names if stem.lower() in name.split("_")]
    if len(sharing) > 1:
        raise UsageError(tr("{text!r} could be any of: {names}", text=text, names=", ".join(sharing)))
    nearest = difflib.get_close_matches(stem, [*names, *aliases], n=1, cutoff=0.6)
    if nearest:
        meant = aliases.get(nearest[0], nearest[0])
        raise UsageError(tr("unknown kata {text!r}: did you mean {nearest}?", text=text, nearest=meant))
    raise UsageError(tr("unknown kata {text!r}; the katas are: {names}", text=text, names=", ".join(names)))
