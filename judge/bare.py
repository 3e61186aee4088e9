"""A bare stub, as a real interview gives it: the imports, the signatures, a task of a few
lines with its shapes, and nothing else (no docstrings, TODOs, conventions or hints).

Made from the kata's stub (itself made from the solution, judge.stubs): every public
top-level function and class keeps its signature (decorators, bases and methods included),
each body becomes `raise NotImplementedError`; the task, from info.toml's `interview`
(`interview_zh` in Chinese), becomes the module's docstring.
"""

from __future__ import annotations

import ast


class BareStubError(ValueError):
    """The stub could not be made bare (it does not parse)."""


def _bare_function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
    node.body = [ast.Raise(exc=ast.Name("NotImplementedError", ast.Load()), cause=None)]
    return node


def _bare_class(node: ast.ClassDef) -> ast.ClassDef:
    methods = [
        _bare_function(item)
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (not item.name.startswith("_") or item.name.startswith("__"))
    ]
    node.body = methods or [ast.Pass()]
    return node


def bare_stub(stub: str, task: str, *, title: str) -> str:
    """The bare stub of `stub` (a kata's stub text) with `task` (a few lines, its shapes) on top."""
    try:
        tree = ast.parse(stub)
    except SyntaxError as error:
        raise BareStubError(f"the stub does not parse: {error}") from None
    imports, definitions = [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            definitions.append(ast.unparse(_bare_function(node)))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            definitions.append(ast.unparse(_bare_class(node)))
    text = "\n".join([title, "", *task.strip().splitlines()])
    docstring = '"""' + text.replace("\\", "\\\\").replace('"""', '\\"""') + '\n"""'
    head = "\n\n".join(part for part in (docstring, "\n".join(imports)) if part)
    return "\n\n\n".join([head, *definitions]) + "\n"
