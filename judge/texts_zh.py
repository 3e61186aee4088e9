"""Chinese (简体中文) versions of the tools' texts, keyed by the English template in the code.

Each value keeps the key's {placeholders}; tests/test_language.py proves every tr(...) template
in judge/ has its entry here. Terms follow README.zh-CN.md (题目 = kata, 桩代码 = stub, 参考解 =
reference solution, 判定 = verdict, 提示 = hint, 模拟面试 = mock interview, 种子 = seed). Commands,
paths, code and status words (pass, fail, todo...) stay as they are; so do the column headers of the
tables, whose alignment counts characters."""

ZH: dict[str, str] = {
    # judge/reporting.py: the grader's table
    "Grading {impl} (seed {seed})": "评测 {impl}（种子 {seed}）",
    "Score: {score:.1f} / 100   ({passing} of 1 kata passes)": "总分：{score:.1f} / 100   （1 道题中 {passing} 道通过）",
    "Score: {score:.1f} / 100   ({passing} of {total} katas pass)": (
        "总分：{score:.1f} / 100   （{total} 道题中 {passing} 道通过）"
    ),
    "... (more than {chars} characters)": "……（超过 {chars} 个字符）",
    "... ({lines} lines, {chars} characters)": "……（共 {lines} 行、{chars} 个字符）",
    "... ({chars} characters)": "……（共 {chars} 个字符）",
    "it printed {printed}: remove debug prints before an interview (not counted against you)": (
        "它打印了 {printed}：面试前请删掉调试用的 print（不会因此扣分）"
    ),
    "{count} katas": "{count} 道题",
    "1 kata": "1 道题",
    "Not judged here, never counted: {count} case in {where}: {reason}.": (
        "本机无法评判，不计入总数：{where} 中的 {count} 个用例：{reason}。"
    ),
    "Not judged here, never counted: {count} cases in {where}: {reason}.": (
        "本机无法评判，不计入总数：{where} 中的 {count} 个用例：{reason}。"
    ),
    "also: {name}: {message}": "另外：{name}：{message}",
    "{name}: {status}: {message}": "{name}: {status}：{message}",
    "Time vs PyTorch (kata / reference), the passing katas, timed one at a time:": (
        "与 PyTorch 对比的用时（题目 / 参考实现），通过的题目逐个计时："
    ),
    "timing failed: {error}": "计时失败：{error}",
    "... and {count} more": "……还有 {count} 个",
    # judge/advice.py: what to type next
    "Replay these exact hidden shapes: {command}": "重现这组隐藏形状：{command}",
    "Next: katas/{name}.py is missing or empty; {reset} brings the stub back": (
        "下一步：katas/{name}.py 不存在或是空的；{reset} 会把桩文件放回来"
    ),
    "Next: fix katas/{name}.py (see above), then {check}; stuck? {hint}": (
        "下一步：修改 katas/{name}.py（见上文），然后运行 {check}；卡住了？{hint}"
    ),
    "Next: start with katas/{name}.py (fill in its TODOs), then {check}": (
        "下一步：从 katas/{name}.py 开始（补全其中的 TODO），然后运行 {check}"
    ),
    "Next: every kata passes. Rehearse under a clock: {command}": "下一步：所有题目都已通过。限时演练一下：{command}",
    # judge/status_line.py: the line the grader rewrites while it works
    "starting...": "正在启动……",
    "timing {name} against PyTorch...": "正在与 PyTorch 对比计时 {name}……",
    "grading {names} ({done} of {total} done)": "正在评测 {names}（已完成 {done} / {total}）",
    "{text} {seconds:.0f} s": "{text} {seconds:.0f} 秒",
    # judge/grading.py
    "grader.py: note: the practice history was not updated ({error})": "grader.py: 注意：练习历史没有更新（{error}）",
    "grader.py: interrupted": "grader.py: 已中断",
    # judge/practice/common.py: a verdict in watch, diff and mock
    "name the kata, e.g. {example} (the katas: {names})": "请指定题目，例如 {example}（题目有：{names}）",
    "{label}: {status}  {passed}/{total} tests": "{label}: {status}  {passed}/{total} 个测试通过",
    "  (verdict {latency:.1f} s after the save)": "  （保存后 {latency:.1f} 秒出判定）",
    "first failing check: {text}": "第一个失败的检查：{text}",
    "{name}: {message}": "{name}：{message}",
    "why: {text}": "原因：{text}",
    "(hidden shapes from seed {seed}: the same until you restart)": "（隐藏形状来自种子 {seed}：重启之前保持不变）",
    # judge/errors.py: argparse's own messages, and where to read the options
    "{message} (see: {command} --help)": "{message}（见：{command} --help）",
    "{command}: error: {message}": "{command}: 错误：{message}",
    # judge/grading.py and judge/environment.py: the grader's own checks of its input
    "--jobs, --time-limit and --test-timeout must be positive": "--jobs、--time-limit 和 --test-timeout 必须是正数",
    "--json {path}: no such folder for the report": "--json {path}：报告所在的目录不存在",
    "--impl {impl}: a single file must be named like a kata (e.g. causal_mask.py)": (
        "--impl {impl}：单个文件必须以题目命名（例如 causal_mask.py）"
    ),
    "--impl {impl} is the {kata} kata; --kata asks for {chosen}": "--impl {impl} 是题目 {kata}；而 --kata 要求的是 {chosen}",
    "--impl {impl}: no such folder or kata file": "--impl {impl}：没有这个目录或题目文件",
    "--device cuda: torch sees no CUDA device here (try --device cpu)": (
        "--device cuda：torch 在这台机器上找不到 CUDA 设备（试试 --device cpu）"
    ),
    "{python} lacks {missing}: run `make setup`, or use the make targets": (
        "{python} 缺少 {missing}：请运行 `make setup`，或使用 make 的目标"
    ),
    "unrecognized arguments: {args}": "无法识别的参数：{args}",
    "the following arguments are required: {names}": "缺少必需的参数：{names}",
    "argument {name}: invalid choice: {value} (choose from {choices})": "参数 {name}：无效的选项 {value}（可选：{choices}）",
    "argument {name}: invalid {kind} value: {value}": "参数 {name}：无效的 {kind} 值：{value}",
    "argument {name}: expected one argument": "参数 {name}：需要一个值",
    "argument {name}: ignored explicit argument {value}": "参数 {name}：忽略了显式给出的值 {value}",
    "argument {name}: {message}": "参数 {name}：{message}",
    # judge/practice/cli.py
    "Stopped. Bye!": "已停止。再见！",
    "{what} must be a whole number, got {text!r}": "{what} 必须是整数，收到的是 {text!r}",
    "{what} must be at least {minimum}, got {value}": "{what} 至少为 {minimum}，收到的是 {value}",
    "MINUTES must be a number of minutes, got {text!r}": "MINUTES 必须是分钟数，收到的是 {text!r}",
    "MINUTES must be more than 0, got {text!r}": "MINUTES 必须大于 0，收到的是 {text!r}",
    "--interval must be a number of seconds, got {text!r}": "--interval 必须是秒数，收到的是 {text!r}",
    "--interval must be between 0 and 60 seconds, got {text!r}": "--interval 必须在 0 到 60 秒之间，收到的是 {text!r}",
    # judge/practice/watch.py
    "{path} was removed (make reset KATA={name} brings the stub back)": (
        "{path} 被删除了（make reset KATA={name} 可以恢复桩代码）"
    ),
    "note: {reason}": "注意：{reason}",
    "not measured": "未测量",
    "time vs PyTorch: {timing}": "与 PyTorch 比速度：{timing}",
    "{folder}: no such folder of katas": "{folder}：题目目录不存在",
    "Loading torch and pytest once ({engine} engine)...": "正在加载 torch 和 pytest（只加载一次，{engine} 引擎）……",
    (
        "Watching {what} in {folder}/ (seed {seed}; ready in {seconds:.1f} s). "
        "Save a file to grade it; make hint KATA=name when stuck; Ctrl-C stops."
    ): (
        "正在监视 {folder}/ 中的 {what}（种子 {seed}；{seconds:.1f} 秒就绪）。"
        "保存文件即评测；卡住时用 make hint KATA=name；Ctrl-C 退出。"
    ),
    "Stopped watching: {count} grades, median {seconds:.1f} s from save to verdict. Bye!": (
        "已停止监视：共评测 {count} 次，从保存到判定的中位数为 {seconds:.1f} 秒。再见！"
    ),
    "Stopped watching. Bye!": "已停止监视。再见！",
    # judge/practice/hint.py
    "{name} has no hints yet (they live in info.toml). make diff KATA={name} shows the reference solution.": (
        "{name} 还没有提示（提示写在 info.toml 中）。make diff KATA={name} 可以查看参考解。"
    ),
    " (counted for the mock interview)": "（计入本次模拟面试）",
    (
        "No hints left for {name}: all {count} are below{where}. Next step: "
        "make diff KATA={name} compares your file with the reference."
    ): "{name} 没有更多提示了：全部 {count} 条都在下面{where}。下一步：make diff KATA={name} 会把你的文件与参考解对比。",
    "Hint {count} of {total} for {name} ({title}){where}:": "{name}「{title}」的第 {count} 条提示，共 {total} 条{where}：",
    "({left} more: make hint KATA={name})": "（还有 {left} 条：make hint KATA={name}）",
    "(that was the last hint)": "（这是最后一条提示）",
    # judge/practice/reset.py
    "{path} is already the stub as shipped; nothing to keep.": "{path} 已经是原始桩代码，无需保存。",
    "Kept your attempt: {path}": "已保存你的尝试：{path}",
    "Restored {path} to the stub as shipped.": "已把 {path} 恢复为原始桩代码。",
    # judge/practice/diff.py
    "{path} does not exist; make reset KATA={name} writes the stub": "{path} 不存在；make reset KATA={name} 会写入桩代码",
    "{path} (yours)": "{path}（你的）",
    "{path} (reference)": "{path}（参考解）",
    "No difference: {path} is the reference solution.": "没有差异：{path} 就是参考解。",
    "Grading your {name} (seed {seed})...": "正在评测你的 {name}（种子 {seed}）……",
    "{name} passes.": "{name} 通过了。",
    "{name} does not pass yet.": "{name} 还没有通过。",
    # judge/practice/mock.py
    "N={n}: pick from 1 to {count} katas": "N={n}：请选 1 到 {count} 道题",
    "N={n}: there are only {count} katas": "N={n}：只有 {count} 道题",
    "Next: a review of {kata} (due since {due}): redo it from a bare stub, against the clock: "
    "make interview KATA={kata}": "下一步：复习 {kata}（{due} 起到期）：对着裸桩文件限时重做：make interview KATA={kata}",
    "Next in {path}: {kata} ({title}): fill in katas/{kata}.py, with make watch KATA={kata} running": (
        "下一步（{path}）：{kata}「{title}」：补全 katas/{kata}.py，同时运行 make watch KATA={kata}"
    ),
    "Every kata passes. The next review falls due on {due} (make next then).": (
        "所有题目都已通过。下一次复习在 {due} 到期（到时运行 make next）。"
    ),
    "Every kata passes and every review is done.": "所有题目都已通过，所有复习也都完成了。",
    "{title}  {passed}/{total} passed": "{title}  已通过 {passed}/{total}",
    "next: {kata}": "下一题：{kata}",
    "reviews due: {katas}": "待复习：{katas}",
    "Every kata of your paths passes: make next says when a review is due.": (
        "你的学习路线上的题目都已通过：make next 会告诉你何时该复习。"
    ),
    "Next: {kata}: {path}": "下一题：{kata}：{path}",
    "pass": "通过",
    "fail": "未通过",
    "todo": "未开始",
    "error": "出错",
    "timeout": "超时",
    "crash": "崩溃",
    "forbidden": "违规调用",
    "kata": "题目",
    "best": "最好",
    "attempts": "尝试次数",
    "last": "最近",
    "hints": "提示",
    "fastest mock": "模拟最快",
    "trend": "趋势",
    "result": "结果",
    "passed at": "通过于",
    "took": "用时",
    "suggested": "建议用时",
    "vs": "比值",
    "status": "状态",
    "score": "得分",
    "tests": "测试",
    "{call} returned {what} of type {kind}, expected a tensor: {value}": (
        "{call} 返回的 {what} 类型是 {kind}，应为张量：{value}"
    ),
    "{call} returned {what} of shape {got}, expected {want}": "{call} 返回的 {what} 的形状是 {got}，应为 {want}",
    "{call} returned {what} of dtype {got}, expected {want}": "{call} 返回的 {what} 的 dtype 是 {got}，应为 {want}",
    "{call} returned {what} on device {got}, expected {want}": "{call} 返回的 {what} 在设备 {got} 上，应在 {want} 上",
    "{call} returned {what} with {name} at index {where} ({count} of {total} elements); expected {want}": (
        "{call} 返回的 {what} 在下标 {where} 处是 {name}（{total} 个元素中有 {count} 个）；期望值为 {want}"
    ),
    "{call} returned wrong {what}: {count} of {total} elements are off; the worst is at index {worst}: "
    "got {got}, expected {want}, off by {off} (allowed: {atol} + {rtol} * |expected|)": (
        "{call} 返回的 {what} 不对：{total} 个元素中有 {count} 个超出容差；最差的在下标 {worst}："
        "得到 {got}，期望 {want}，相差 {off}（允许：{atol} + {rtol} * |期望值|）"
    ),
    "{call} returned a wrong {what}: it differs at {count} of {total} positions; "
    "first at index {where}: got {got}, expected {want}": (
        "{call} 返回的 {what} 不对：{total} 个位置中有 {count} 个不同；第一个在下标 {where}：得到 {got}，期望 {want}"
    ),
    "  got (1 = True):": "  得到（1 = True）：",
    "  expected:": "  期望：",
    "{call} modified its `{name}` argument in place; work on a copy or an out-of-place op": (
        "{call} 原地修改了参数 `{name}`；请在副本上操作，或使用非原地运算"
    ),
    "edge case '{desc}' ({sizes})": "边界用例“{desc}”（{sizes}）",
    "hidden case '{desc}' ({sizes})": "隐藏用例“{desc}”（{sizes}）",
    "random draw {n}": "随机抽取 {n}",
    "{case}: {text}": "{case}：{text}",
    "{message}. {hint}": "{message}。{hint}",
    " on the meta device (a stand-in for CUDA here)": " 在 meta 设备上（此处代替 CUDA）",
    "{where}: {text}": "{where}：{text}",
    # judge/testing/attention.py: which gradient of attention is off first, and what that says
    "grad_value needs only the weights and grad_output: check the recomputed weights "
    "(scale, causal mask) and the transpose.": (
        "grad_value 只依赖 weights 和 grad_output：检查重新计算的 weights（缩放、因果掩码）以及转置。"
    ),
    "grad_value is right, so the weights are: check the softmax backward and the scale.": (
        "grad_value 是对的，所以 weights 也是对的：检查 softmax 的反向和缩放。"
    ),
    "grad_query is right, so grad_scores is: check the transpose and the scale in grad_key.": (
        "grad_query 是对的，所以 grad_scores 也是对的：检查 grad_key 里的转置和缩放。"
    ),
    # judge/forbidden.py: a refusal, and why the kata may not call that
    "{kata} {action}{where}, which is not allowed: {why}": "{kata} {action}{where}，这是不允许的：{why}",
    "calls {shown}": "调用了 {shown}",
    "autograd (torch.autograd.grad, .backward(), torch.func or grad mode)": (
        "autograd（torch.autograd.grad、.backward()、torch.func 或梯度模式）"
    ),
    " on {device}": " 在 {device} 上",
    " (at {file}, line {line})": "（在 {file} 第 {line} 行）",
    "turns autograd on (torch.enable_grad() or grad mode)": "打开了 autograd（torch.enable_grad() 或梯度模式）",
    "itself": "它本身",
    "contains an nn.{name} ({where})": "包含一个 nn.{name}（{where}）",
    "this kata asks you to write attention yourself": "这道题要求你自己写注意力",
    "this kata asks you to derive the gradients by hand": "这道题要求你手推梯度",
    "this kata asks you to build that mask yourself": "这道题要求你自己构造这个掩码",
    "this kata asks you to write RMSNorm yourself": "这道题要求你自己写 RMSNorm",
    "this kata asks you to write the (log-)softmax yourself": "这道题要求你自己写 (log-)softmax",
    "this kata asks you to write the cross-entropy yourself": "这道题要求你自己写交叉熵",
    "this kata asks you to write the layer norm yourself": "这道题要求你自己写层归一化",
    "this kata asks you to write GELU and SiLU yourself": "这道题要求你自己写 GELU 和 SiLU",
    "this kata asks you to write the KL divergence yourself": "这道题要求你自己写 KL 散度",
    "this kata asks you to write batch norm yourself": "这道题要求你自己写批归一化",
    "this kata asks you to write AdamW yourself": "这道题要求你自己写 AdamW",
    "this kata asks you to write the learning-rate schedule yourself": "这道题要求你自己写学习率调度",
    "this kata asks you to write beam search yourself": "这道题要求你自己写束搜索",
    "this kata asks you to build the all-reduce from sends and receives (each rank naming its peer)": (
        "这道题要求你只用 send 和 recv 搭出 all-reduce（每个 rank 都要指明通信对象）"
    ),
    "dist.recv without a source (src=None)": "不指定来源的 dist.recv（src=None）",
    "this kata asks you to write the tensor-parallel operators yourself": "这道题要求你自己写张量并行的算子",
    "this kata asks you to shard the optimizer state yourself": "这道题要求你自己把优化器状态分片",
    "this kata asks you to accumulate and clip the gradients yourself": "这道题要求你自己累积并裁剪梯度",
    "this kata asks you to write dynamic loss scaling yourself": "这道题要求你自己写动态损失缩放",
    # judge/testing/modules.py: a NaN where PyTorch has a number, and what usually causes it
    "{call} returned {what} with NaN at index {where} ({count} of {total} elements) "
    "where PyTorch gives {want}. {hint}": (
        "{call} 返回的 {what} 在下标 {where} 处是 NaN（{total} 个元素中有 {count} 个），而 PyTorch 给出的是 {want}。{hint}"
    ),
    "NaN usually comes from a softmax over a row of -inf, a query whose every key was blocked: here a boolean "
    "mask is True where attention is BLOCKED (the opposite of F.scaled_dot_product_attention), and "
    "key_padding_mask [B, S] blocks keys, not queries": (
        "NaN 通常来自对一整行 -inf 做 softmax，也就是某个查询的所有键都被屏蔽了：这里布尔掩码为 True 的位置"
        "表示注意力被屏蔽（与 F.scaled_dot_product_attention 相反），而 key_padding_mask [B, S] 屏蔽的是键，不是查询"
    ),
    "NaN usually comes from a softmax over a row of -inf, a query whose every key was blocked: here, as in "
    "F.scaled_dot_product_attention, a boolean attn_mask is True where a query MAY attend (False blocks), and "
    "is_causal blocks only the keys j > i (query i always sees key i)": (
        "NaN 通常来自对一整行 -inf 做 softmax，也就是某个查询的所有键都被屏蔽了：这里和 "
        "F.scaled_dot_product_attention 一样，布尔 attn_mask 为 True 的位置表示查询可以关注（False 表示屏蔽），"
        "而 is_causal 只屏蔽 j > i 的键（查询 i 总能看到键 i）"
    ),
    # judge/scheduling.py: why a fork server stopped answering
    "no answer in time": "没有按时应答",
    "it exited": "它退出了",
    "no fork server": "没有 fork 服务器",
    # judge/isolation.py: how a process ended
    "killed": "被杀掉了",
    "killed by signal {number}": "被信号 {number} 杀掉了",
    "killed by {signal}: {meaning}": "被 {signal} 杀掉了：{meaning}",
    "killed by {signal}": "被 {signal} 杀掉了",
    "a segmentation fault": "段错误",
    "out of memory?": "内存不足？",
    "an abort in native code": "原生代码中的 abort",
    "exit code {code}": "退出码 {code}",
    # judge/loading.py and judge/remote: loading the kata, and its process
    "no file {path}": "没有文件 {path}",
    "importing {path} raised {name}: {error}": "导入 {path} 时抛出了 {name}: {error}",
    "{path} defines no `{symbol}`": "{path} 没有定义 `{symbol}`",
    "importing {file}": "导入 {file}",
    "the kata": "该题目的代码",
    "{when} changed torch's {name} from {before} to {after} and left it so; "
    "restore global settings (e.g. with a context manager) or avoid them": (
        "{when}把 torch 的 {name} 从 {before} 改成了 {after}，而且没有改回去；"
        "请恢复全局设置（例如用上下文管理器），或者干脆不要改它们"
    ),
    "the kata process was let go: the tests of this kata are over": "该题目的进程已被释放：这道题的测试已经结束",
    "the kata killed the fork server of kata processes, its parent": "该题目的代码杀掉了它的父进程，也就是题目进程的 fork 服务器",
    "the kata process died ({reason})": "该题目的进程死掉了（{reason}）",
    "the kata left {count} thread(s) running after the call ({names}): everything it computes "
    "must be done when it returns; join the threads it starts (or use `with` on an executor)": (
        "调用返回之后，题目代码还留着 {count} 个线程在运行（{names}）：它计算的一切都必须在返回时完成；"
        "请 join 它启动的线程（或对 executor 使用 `with`）"
    ),
    "a {kind} tensor cannot be judged: return a dense tensor (e.g. .to_dense(), .dequantize())": (
        "无法评判 {kind} 张量：请返回稠密张量（例如 .to_dense()、.dequantize()）"
    ),
    "the answer nests deeper than {depth} levels or holds more than {count} values": (
        "返回结果的嵌套超过 {depth} 层，或包含超过 {count} 个值"
    ),
    "the gradient of `{name}`": "`{name}` 的梯度",
    "the RMS of {name}": "{name} 的均方根",
    # what the tests compare, where a description names it (judge.testing.checks.label)
    "rotated keys": "旋转后的键",
    "latent cache": "潜在向量缓存",
    "rope key cache": "rope 键缓存",
    "values": "值",
    "inner products": "内积",
    "norms": "范数",
    "output in eval()": "eval() 下的输出",
    "logits at positions 0..t": "位置 0..t 的 logits",
    "logits at real target positions": "真实目标位置上的 logits",
    "logits for a longer source": "更长源序列下的 logits",
    "logits with more source padding": "源序列填充更多时的 logits",
    "logits after training": "训练后的 logits",
    "keys after reset": "reset 之后的键",
    "values after reset": "reset 之后的值",
    "length after reset": "reset 之后的长度",
    "length after reset and update": "reset 并 update 之后的长度",
    "largest tensor": "最大的张量",
    "scores computed": "计算的分数个数",
    "rows per expert": "每个专家处理的行数",
    "share dropped": "被丢弃的比例",
    "kept tokens": "保留的 token",
    "hypotheses": "假设",
    "scores": "分数",
    "buffers kept": "保留的缓冲区",
    "cache form": "缓存的形式",
    "grad modes": "梯度模式",
    "an output": "一个输出",
    "keeps base": "保留 base",
    "base.weight after unmerge() on a module never merged": "未 merge 时 unmerge() 之后的 base.weight",
    "output before merge()": "merge() 之前的输出",
    "base.weight after merge()": "merge() 之后的 base.weight",
    "base.weight's graph after merge()": "merge() 之后 base.weight 的计算图",
    "the nn.Linear passed in: its weight after merge() less model.base.weight": (
        "传入的那个 nn.Linear：merge() 之后它的 weight 减去 model.base.weight"
    ),
    "output after merge()": "merge() 之后的输出",
    "base.weight after merge() twice": "两次 merge() 之后的 base.weight",
    "output after merge() twice": "两次 merge() 之后的输出",
    "output in train() after merge() and a new lora_B": "merge() 并换了新的 lora_B 之后 train() 下的输出",
    "base.weight after unmerge()": "unmerge() 之后的 base.weight",
    "base.weight's graph after unmerge()": "unmerge() 之后 base.weight 的计算图",
    "output after unmerge()": "unmerge() 之后的输出",
    "base.weight after unmerge() twice": "两次 unmerge() 之后的 base.weight",
    "{call} returned normally; expected ValueError ({reason})": "{call} 正常返回了；应当抛出 ValueError（{reason}）",
    "{call} raised {name}: {error}; expected {expected} ({reason})": (
        "{call} 抛出了 {name}: {error}；应当抛出 {expected}（{reason}）"
    ),
    "{call} returned {got}; expected {error} ({reason})": "{call} 返回了 {got}；应当抛出 {error}（{reason}）",
    "a pair": "一个二元组",
    "a triple": "一个三元组",
    "a tuple of {count}": "一个含 {count} 个元素的元组",
    "{call} returned {got}; expected {what} ({names})": "{call} 返回了 {got}；应当返回{what}（{names}）",
    "{call}: the result does not require grad; autograd lost track of {which}": (
        "{call}：结果不需要梯度（requires_grad 为 False）；autograd 跟丢了 {which}"
    ),
    "{call}: the output does not require grad; autograd lost track of the inputs": (
        "{call}：输出不需要梯度（requires_grad 为 False）；autograd 跟丢了输入"
    ),
    "{call}: no gradient reached `{name}`": "{call}：没有梯度传到 `{name}`",
    "{call} returned {what} {got}; expected None": "{call} 返回的 {what} 是 {got}；应当是 None",
    # judge/testing/modules.py: the learner's parameters against the reference's
    "{where} has no submodule `{name}`; the kata asks for {asks}": "{where} 没有子模块 `{name}`；题目要求：{asks}",
    "{where} has no parameter `{name}` (expected one of shape {shape})": (
        "{where} 没有参数 `{name}`（应当有一个形状为 {shape} 的参数）"
    ),
    "; with bias=True every Linear and LayerNorm has a bias": "；bias=True 时每个 Linear 和 LayerNorm 都有 bias",
    "{built} has a parameter `{name}` of shape {shape} that PyTorch's module has no counterpart for; "
    "the kata asks for {asks}": "{built} 有一个形状为 {shape} 的参数 `{name}`，PyTorch 的模块里没有与之对应的参数；题目要求：{asks}",
    " (with bias=False: no bias in any Linear or LayerNorm)": "（bias=False 时任何 Linear 和 LayerNorm 都没有 bias）",
    "{built}.{name} has shape {shape}, expected {want} (nn.Linear(in, out) keeps its weight as [out, in])": (
        "{built}.{name} 的形状是 {shape}，应当是 {want}（nn.Linear(in, out) 的 weight 形状是 [out, in]）"
    ),
    "two calls of {call} in train() mode returned the same output; with dropout > 0 training "
    "should zero random activations, so two calls differ (use nn.Dropout or F.dropout with "
    "training=self.training)": (
        "train() 模式下两次调用 {call} 返回了相同的输出；dropout > 0 时训练应当随机置零一些激活值，"
        "所以两次调用的结果不同（用 nn.Dropout，或 F.dropout 并传 training=self.training）"
    ),
    # make help: the Makefile's target descriptions (judge.make_help)
    "Transformer Katas: edit a stub under katas/, then grade it.": "Transformer Katas：在 katas/ 下写完一个桩文件，然后评测它。",
    'Variables: KATA=name, ARGS="grader options" (see: {python} grader.py --help), PYTHON=your-python': (
        '变量：KATA=题目名，ARGS="判题器选项"（见 {python} grader.py --help），PYTHON=你的 Python'
    ),
    "list the targets": "列出所有目标",
    "create .venv with the pinned dependencies (done automatically)": "创建 .venv 并安装固定版本的依赖（会自动完成）",
    'grade every kata under katas/ (ARGS="--impl solutions" etc.) [SEED=n]': (
        '评测 katas/ 下的所有题目（ARGS="--impl solutions" 等）[SEED=n]'
    ),
    "grade one kata: make check KATA=causal_mask [SEED=n]": "评测一道题：make check KATA=causal_mask [SEED=n]",
    "(maintainers) the whole suite, 4-5 min: solutions pass, stubs are todo, mutants are rejected": (
        "（维护者）完整测试集，4 到 5 分钟：参考解通过、桩文件为 todo、变异体被拒绝"
    ),
    "(maintainers) regenerate katas/ from solutions/ where the stub is untouched": (
        "（维护者）在桩文件未被改动处，由 solutions/ 重新生成 katas/"
    ),
    "re-grade each kata you save, within a second (KATA=name: only that one; NEXT=1: follow your path)": (
        "每次保存后一秒内重新评测（KATA=name：只看这一道；NEXT=1：沿学习路线前进）"
    ),
    "one more hint each time: make hint KATA=causal_mask": "每次多给一条提示：make hint KATA=causal_mask",
    "keep your attempt under .katas/attempts/, then restore the stub: make reset KATA=name": (
        "先把你的文件保存到 .katas/attempts/，再恢复桩文件：make reset KATA=name"
    ),
    "your file against the reference solution, then whether it passes: make diff KATA=name": (
        "你的文件与参考解对比，然后看是否通过：make diff KATA=name"
    ),
    "a timed mock interview of bare stubs in .katas/mock/: [N=3] [MINUTES=total] [SEED=n]": (
        "在 .katas/mock/ 中用裸桩文件进行限时模拟面试：[N=3] [MINUTES=总分钟数] [SEED=n]"
    ),
    "one kata from a bare stub, timed, the math graded: make interview KATA=mha [MINUTES=m]": (
        "一道题的裸桩文件，限时，只评数学：make interview KATA=mha [MINUTES=m]"
    ),
    "the next kata of your path, or the review that is due": "学习路线上的下一道题，或到期的复习",
    "per path and kata: passed, next, reviews due; best score, attempts, trend": (
        "每条路线和每道题：已通过、下一题、待复习；最好成绩、尝试次数、趋势"
    ),
    "Interview: {title}": "面试题：{title}",
    "Interview {id}: {kata} in {time}": "面试 {id}：{kata}，限时 {time}",
    "Interview {id} report: {reason} after {elapsed} of {allowed} (seed {seed})": (
        "面试 {id} 报告：{reason}，用时 {elapsed}（限时 {allowed}，种子 {seed}）"
    ),
    "A bare stub, as an interview gives it: the math is graded, the conventions are listed after it.": (
        "和真实面试一样的裸桩文件：只评数学，工程规范在判定之后列出。"
    ),
    "the math is right: {passed}/{total} core tests pass": "数学正确：核心测试 {passed}/{total} 通过",
    "a production version would add (not counted in an interview; {passed} of {total} convention tests pass):": (
        "生产级的版本还会加上（面试中不计分；规范测试 {total} 个中通过 {passed} 个）："
    ),
    "Mock interview {id}: {katas} in {time} (seed {seed})": "模拟面试 {id}：{katas}，限时 {time}（种子 {seed}）",
    "Workspace: {folder}/   (your katas/ are not touched)": "工作目录：{folder}/   （不会改动你的 katas/）",
    "{number}. {name}  {stars}  {minutes:>3} min  {title}": "{number}. {name}  {stars}  {minutes:>3} 分钟  {title}",
    "Edit the files above; each save is graded. Stuck? make hint KATA=name (counted in the report).": (
        "编辑上面的文件，每次保存都会评测。卡住了？make hint KATA=name（计入报告）。"
    ),
    "It ends when every kata passes, when time is up, or at Ctrl-C.": "所有题目都通过、时间用完或按下 Ctrl-C 时结束。",
    "{time} left   {passing} of {total} pass": "剩余 {time}   {total} 道题中 {passing} 道通过",
    "every kata passes": "所有题目都通过了",
    "time is up": "时间到",
    "you stopped": "你主动停止了",
    "Mock interview {id} report: {reason} after {elapsed} of {allowed} (seed {seed})": (
        "模拟面试 {id} 报告：{reason}，用时 {elapsed}，限时 {allowed}（种子 {seed}）"
    ),
    "{passed} of {total} pass; score {score:.0f} / 100 (the best score of each kata during the interview).": (
        "{total} 道题中 {passed} 道通过；得分 {score:.0f} / 100（每道题取面试期间的最好成绩）。"
    ),
    "took: from the previous first pass (or the start) to this kata's; vs: took / suggested minutes.": (
        "took：从上一道题首次通过（或开始）到这道题首次通过的用时；vs：took / 建议用时（suggested）。"
    ),
    "The clock runs from now (tasks ready in {seconds:.2f} s); the judge loads torch meanwhile.": (
        "现在开始计时（题目在 {seconds:.2f} 秒内就绪）；判题器同时在加载 torch。"
    ),
    "Judge ready {seconds:.1f} s after the start.": "判题器在开始后 {seconds:.1f} 秒就绪。",
    # judge/practice/progress.py
    "No history yet ({path}). Grades from make watch, make check, make diff and make mock are recorded there.": (
        "还没有历史记录（{path}）。make watch、make check、make diff 和 make mock 的评测都会记录在那里。"
    ),
    "Progress from {path} ({count} records)": "练习进度，来自 {path}（{count} 条记录）",
    (
        "Mock interviews: {count}; last {when}: {passed} of {total} pass, score {score:.0f}. "
        "Scores, oldest first: {scores}"
    ): "模拟面试：{count} 次；最近一次 {when}：{total} 道题中 {passed} 道通过，得分 {score:.0f}。各次得分（从旧到新）：{scores}",
    "No mock interview yet: make mock": "还没有模拟面试：make mock",
    (
        "best: the highest score graded; attempts: versions of the file graded; trend: recent scores, oldest first;"
        " all from your katas/ files (a mock interview counts only in 'fastest mock')."
    ): (
        "best：评测过的最高分；attempts：被评测过的文件版本数；trend：最近的成绩，从旧到新；"
        "都只来自你的 katas/ 文件（模拟面试只计入 'fastest mock'）。"
    ),
    # judge/testing/diagnosis.py: the pattern signatures (free text after no prefix)
    (
        "the result is made on {got}, not on the inputs' device ({want}): "
        "create new tensors with device= the inputs' device"
    ): "结果是在 {got} 上创建的，而不在输入所在的设备（{want}）上：新建张量时传入 device= 输入的设备",
    (
        "the values are right but the dtype is {got}, not {want}: compute in any precision, return the inputs' dtype"
    ): "数值正确，但 dtype 是 {got} 而不是 {want}：计算可以用任意精度，返回时要用输入的 dtype",
    "every value has the opposite sign: a sign is flipped": "每个值的符号都反了：某处符号写反了",
    "every value is the expected one times {factor:.4g}{named}": "每个值都是期望值乘以 {factor:.4g}{named}",
    " = {expression} ({name} = {size}): check the scale": " = {expression}（{name} = {size}）：检查缩放系数",
    "the result is the expected one transposed: its last two dimensions are swapped": (
        "结果是期望值的转置：最后两个维度被交换了"
    ),
    "every True should be False and every False True: the mask's polarity is inverted": (
        "每个 True 都应是 False，每个 False 都应是 True：掩码的极性反了"
    ),
    (
        "only the last row is right: every earlier row (query) sees keys it should not, or misses some "
        "(a causal mask missing?)"
    ): "只有最后一行是对的：之前的每一行（查询）都看到了不该看到的键，或漏掉了一些（缺少因果掩码？）",
    "only the first row is right: the rows (queries) after it are off (a causal mask misaligned?)": (
        "只有第一行是对的：之后的各行（查询）都不对（因果掩码没对齐？）"
    ),
    (
        "the right values in the wrong places: a transpose or reshape mixes up dimensions "
        "(heads merged back in the wrong order?)"
    ): "数值对但位置错：某个转置或 reshape 把维度弄混了（多头合并回去时顺序不对？）",
    (
        "NaN fills whole rows: a softmax over a row whose every key is blocked "
        "(mask polarity? padding applied to the queries?)"
    ): "整行都是 NaN：对所有键都被屏蔽的一行做了 softmax（掩码极性反了？把填充掩码用在了查询上？）",
    "off by a constant along each row: right up to a per-row shift": "每行差一个常数：除了每行整体平移之外都是对的",
    # judge/testing/modules.py: the step-by-step check of a layer's parts
    "step by step, each part on PyTorch's own inputs to it: {findings}{verdict}": (
        "逐个子模块检查，每个都用 PyTorch 对应子模块收到的输入：{findings}{verdict}"
    ),
    "your {part} matches": "你的 {part} 一致",
    "your {part} differs": "你的 {part} 不一致",
    "; ": "；",
    "; the slip is in how they are put together (residuals, norms, their order, the feed-forward branch)": (
        "；错误出在它们的组合方式上（残差、归一化、它们的顺序、前馈分支）"
    ),
    # judge/verdicts.py: the verdict's one-line summary
    " during '{running}'": "（在运行「{running}」时）",
    "the per-test limit of {seconds:g} s": "单个测试 {seconds:g} 秒的时限",
    "{seconds:g} s": "{seconds:g} 秒",
    "importing {file} did not finish within {limit}: an endless loop (or a long computation) "
    "at the top level of the file, outside any function?": (
        "导入 {file} 未能在{limit}内完成：文件顶层（任何函数之外）有死循环（或耗时很长的计算）？"
    ),
    "stopped after {seconds:g} s{during}: an endless loop, or far too slow?": (
        "运行 {seconds:g} 秒后被终止{during}：死循环，还是太慢了？"
    ),
    " (the machine was busy: {seconds:.0f} s more spent waiting for a CPU did not count)": (
        "（机器繁忙：另有 {seconds:.0f} 秒在等待 CPU，不计入时限）"
    ),
    "'{where}' ran past the per-test limit of {seconds:g} s: an endless loop, or far too slow?": (
        "「{where}」超过了单个测试 {seconds:g} 秒的时限：死循环，还是太慢了？"
    ),
    "the test process died before running any test ({reason}): {tail}": (
        "测试进程在运行任何测试之前就退出了（{reason}）：{tail}"
    ),
    "the test process died{during} ({reason})": "测试进程意外退出{during}（{reason}）",
    "the process watching over the kata was killed: a kata must not signal other "
    "processes (its parent, the grader)": "看管该 kata 的进程被杀死了：kata 不得向其他进程（它的父进程、评测器）发送信号",
    "the process grading it died ({reason}): a kata must not signal other processes; "
    "the other katas were graded by a new one": "评测它的进程死了（{reason}）：kata 不得向其他进程发送信号；其余 kata 由新的进程评测",
    "{name}: the kata printed more than {mb} MB of output; print less": (
        "{name}：题目代码打印了超过 {mb} MB 的输出；请少打印一些"
    ),
    "{name}: ran out of memory (limit {mb} MB; is a tensor far too large?): {message}": (
        "{name}：内存不足（上限 {mb} MB；是不是某个张量大得离谱？）：{message}"
    ),
    "; this kata's process may start no thread: the judge traces its calls, or autograd is "
    "removed there, and a thread would be out of sight of both": (
        "；该 kata 的进程不得启动线程：评测器在追踪它的调用，或其中已移除 autograd，线程会避开这两者"
    ),
    "all {total} tests passed": "全部 {total} 个测试通过",
    "not started: the stub still raises NotImplementedError": "尚未开始：桩代码仍在抛出 NotImplementedError",
    "{failed} of {total} tests failed ({core_failed} of {core_total} core: the math is wrong); "
    "first: {name}: {message}": (
        "{total} 个测试中有 {failed} 个失败（核心测试 {core_total} 个中失败 {core_failed} 个：数学不对）；第一个：{name}：{message}"
    ),
    "the math is right ({passed}/{total} core); 1 convention missed: {name}: {message}": (
        "数学部分正确（核心 {passed}/{total}）；差 1 条约定：{name}：{message}"
    ),
    "the math is right ({passed}/{total} core); {missed} conventions missed; first: {name}: {message}": (
        "数学部分正确（核心 {passed}/{total}）；差 {missed} 条约定；第一条：{name}：{message}"
    ),
    # judge/plugin.py: a failed convention
    'a convention (the stub: "{quote}"): {text}': "一条约定（桩代码写明：“{quote}”）：{text}",
    # judge/catalog.py: a kata named wrong
    "unknown kata {text!r}: did you mean {nearest}?": "没有名为 {text!r} 的题目：你是想输入 {nearest} 吗？",
    "{text!r} could be any of: {names}": "{text!r} 可以指以下任一题目：{names}",
    "unknown kata {text!r}; the katas are: {names}": "没有名为 {text!r} 的题目；所有题目：{names}",
    # judge/timing.py
    "{device}: machine busy, timing unreliable (ratios {low:.2f}x to {high:.2f}x across rounds); "
    "try again when it is idle": (
        "{device}：机器繁忙，计时不可靠（各轮比值在 {low:.2f}x 到 {high:.2f}x 之间）；请在机器空闲时重试"
    ),
    "1 thread": "1 个线程",
    "{count} threads": "{count} 个线程",
    # reasons a test was not judged (data: judge.language.tr_data)
    "CUDA is not available": "没有可用的 CUDA",
    "device handling not checked without a GPU: on the meta device (the stand-in for CUDA here) "
    "the kata raised an error it does not raise on the CPU": (
        "没有 GPU，无法检查设备处理：在 meta 设备（此处代替 CUDA）上，题目代码抛出了在 CPU 上不会出现的错误"
    ),
    "device handling not checked without a GPU: the kata reads tensor values in Python": (
        "没有 GPU，无法检查设备处理：题目代码在 Python 中读取了张量的值"
    ),
    # judge/worlds.py: a world of ranks (the distributed katas)
    "rank {rank} died ({reason})": "rank {rank} 死掉了（{reason}）",
    "deadlock: {waiting} of {size} ranks stopped, each waiting for another, and nothing moved for "
    "{seconds:g} s ({places})": "死锁：{size} 个 rank 中有 {waiting} 个停住了，互相等待，{seconds:g} 秒内毫无进展（{places}）",
    "rank {rank} at {where}": "rank {rank} 停在 {where}",
    "rank {rank}": "rank {rank}",
    "{what} on rank {rank}": "rank {rank} 上的{what}",
    "sum": "和",
    "input after": "调用后的输入",
    "traffic": "通信",
    "{file}, line {line}: `{code}`": "{file} 第 {line} 行：`{code}`",
    ". Every rank is in a blocking send: with gloo, dist.send waits until the peer receives, "
    "so a send before the receive on every rank never ends; post both at once (dist.isend and "
    "dist.irecv, then wait), or order them by rank (even ranks send first, odd ranks receive first)": (
        "。每个 rank 都卡在阻塞的 send 上：在 gloo 下 dist.send 要等对方接收才返回，所以每个 rank 都先 send 后 recv "
        "就永远结束不了；把两者一起挂上（dist.isend 和 dist.irecv，再 wait），或按 rank 排序（偶数 rank 先发，奇数 rank 先收）"
    ),
    ". Usually one rank calls a send, receive or collective that its peer never matches (another "
    "order, another peer, or a message the other side skips)": (
        "。通常是某个 rank 调用的 send、recv 或集合通信没有对方与之配对（顺序不同、对象不同，或对方跳过了这条消息）"
    ),
}
