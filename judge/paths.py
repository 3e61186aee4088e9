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
    """The test module that judges `kata` (it declares the kata's SPEC)."""
    return TESTS / f"test_{kata}.py"
