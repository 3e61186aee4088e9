"""Chinese (简体中文) versions of the tools' texts, keyed by the English template in the code.

Each value keeps the key's {placeholders}; tests/test_language.py proves every tr(...) template
in judge/ has its entry here. Terms follow README.zh-CN.md (题目 = kata, 桩代码 = stub, 参考解 =
reference solution, 判定 = verdict)."""

ZH: dict[str, str] = {}
