"""What the kata tests show a learner, in Chinese too: every test's title (its tier's zh=) and
every named case (edge("...", "...")) has its twin beside the English, read here from the
source so that a new test cannot forget it. The messages are proven by their output: see
test_language_output.py."""

import ast
from pathlib import Path

import pytest

from judge.paths import ROOT

TIERS = {"core", "convention"}


def kata_test_files() -> list[Path]:
    """Every test module of a kata: those whose tests declare a tier."""
    return [path for path in sorted((ROOT / "tests").rglob("*.py")) if "judge.testing.tiers" in path.read_text()]


def chinese(text) -> bool:
    return isinstance(text, str) and any("\u4e00" <= ch <= "\u9fff" for ch in text)


def tier_decorator(function: ast.FunctionDef) -> ast.expr | None:
    for decorator in function.decorator_list:
        name = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(name, ast.Name) and name.id in TIERS:
            return decorator
    return None


def untitled_tests(tree: ast.Module) -> list[str]:
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            decorator = tier_decorator(node)
            if decorator is None:
                continue  # the plugin refuses a kata test without a tier
            zh = [k.value for k in getattr(decorator, "keywords", []) if k.arg == "zh"]
            if not (zh and isinstance(zh[0], ast.Constant) and chinese(zh[0].value)):
                missing.append(f"line {node.lineno}: {node.name}")
    return missing


def called(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name


def unnamed_cases(tree: ast.Module) -> list[str]:
    """edge("desc", "zh", ...) and Case("desc", sizes, edge, "zh") / Case(..., zh="...") calls
    whose Chinese twin is missing (a Case built from another case's desc carries its zh)."""
    missing = []
    for node in ast.walk(tree):
        if called(node, "edge"):
            args = node.args
            if not (len(args) >= 2 and isinstance(args[1], ast.Constant) and chinese(args[1].value)):
                missing.append(f"line {node.lineno}: edge({ast.unparse(args[0]) if args else ''})")
        elif called(node, "Case") and not (node.args and called(node.args[0], "tr")):  # tr: in either language
            zh = [k.value for k in node.keywords if k.arg == "zh"] + node.args[3:4]
            if not zh or (isinstance(zh[0], ast.Constant) and not chinese(zh[0].value)):
                missing.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    return missing


FILES = kata_test_files() + sorted((ROOT / "judge" / "testing").glob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_kata_test_has_a_chinese_title(path):
    missing = untitled_tests(ast.parse(path.read_text()))
    assert not missing, f"{path.relative_to(ROOT)}: no zh= title on the tier of: {'; '.join(missing)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_case_has_a_chinese_description(path):
    missing = unnamed_cases(ast.parse(path.read_text()))
    assert not missing, f"{path.relative_to(ROOT)}: no Chinese description for: {'; '.join(missing)}"


def test_the_kata_test_files_are_found():
    assert len(kata_test_files()) >= 40
