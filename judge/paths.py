"""Where the project's folders are."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KATAS = ROOT / "katas"
SOLUTIONS = ROOT / "solutions"
TESTS = ROOT / "tests"
MUTANTS = TESTS / "mutants"
VARIANTS = TESTS / "variants"
INFO = ROOT / "info.toml"


def test_file(kata: str) -> Path:
    """What judges `kata`: its test module tests/test_<kata>.py, or, for a kata whose tests are
    split by concern, the package tests/<kata>/ (its test modules import the kata's SPEC)."""
    single = TESTS / f"test_{kata}.py"
    return single if single.exists() or not (TESTS / kata).is_dir() else TESTS / kata


def spec_module(kata: str) -> str:
    """The name of the module that declares `kata`'s SPEC (tests/ on sys.path)."""
    return kata if test_file(kata).is_dir() else f"test_{kata}"
