"""zero_sharded_optimizer: the checks, each failure worded in both languages, and the replays
that let a failure name the known slip it looks like (judge.testing.diagnosis): a replay
plays the same story on a slip and gives {what: value} under the same `what`s as the checks."""

import torch

from judge.language import pick
from judge.testing.checks import Mismatch, assert_close

from .common import OPTIMIZERS, TOLERANCE, argument_text, trained

EXACT = {"rtol": 0.0, "atol": 0.0}
STRANGER = "?"  # what a trace calls a tensor that is not one of the model's parameters


def call_text(story, step: int | None = None) -> str:
    """How the optimizer was made, on how many ranks, and after which step."""
    name = story["optimizer"]
    keywords = ", ".join(f"{k}={v!r}" for k, v in OPTIMIZERS[name][2].items())
    call = f"`ShardedOptimizer({argument_text(story['params'])}, {name}, {keywords})`"
    ranks, steps = story["world"], story["steps"]
    if step is None:
        return pick(f"{call} on {ranks} ranks", f"在 {ranks} 个 rank 上 {call}")
    if step == 0:
        return pick(
            f"{call} on {ranks} ranks, after a step() before any backward",
            f"在 {ranks} 个 rank 上 {call}，在任何 backward 之前调用一次 step() 之后",
        )
    return pick(
        f"{call} on {ranks} ranks, after step {step} of {steps}", f"在 {ranks} 个 rank 上 {call}，第 {step}/{steps} 步之后"
    )


# --------------------------------------------------------------------------- what a trace shows


def observed(traces: list, step: int) -> dict:
    """{what: value} after `step` (1-based; 0: the step() before any backward) on every rank."""
    found = {}
    for rank, trace in enumerate(traces):
        if step == 0:
            found |= {f"`{name}` on rank {rank}": value for name, value in trace["idle"].items()}
            continue
        found[f"gradients after zero_grad() on rank {rank}"] = trace["left"][step - 1]
        found[f"`step()` returned on rank {rank}"] = trace["returned"][step - 1]
        found[f"`closure` calls on rank {rank}"] = trace["calls"][step - 1]
        found |= {f"`{name}` on rank {rank}": value for name, value in trace["params"][step - 1].items()}
    return found


def owners(traces: list, groups: list) -> dict:
    """{parameter: [the ranks whose optimizer_cls instances hold it]}, every parameter of `groups`."""
    found = {name: [] for group in groups for name in group["params"]}
    for rank, trace in enumerate(traces):
        for name in trace["owned"]:
            found.setdefault(name, []).append(rank)
    return found


def loads(traces: list, numels: dict) -> list[int]:
    """Elements each rank's optimizer_cls instances hold."""
    return [sum(numels.get(name, 0) for name in trace["owned"]) for trace in traces]


def holders(traces: list) -> dict:
    """{parameter: [the ranks holding optimizer state for it]} (a rank twice: two instances)."""
    found = {}
    for rank, trace in enumerate(traces):
        for name, _ in trace["state"]:
            found.setdefault(name, []).append(rank)
    return found


def observed_at_the_end(traces: list, groups: list, numels: dict) -> dict:
    found = {
        "owners": owners(traces, groups),
        "elements owned per rank": loads(traces, numels),
        "ranks holding optimizer state": holders(traces),
    }
    for rank, trace in enumerate(traces):
        found[f"param_groups on rank {rank}"] = trace["groups"]
        found[f"isinstance(optimizer, torch.optim.Optimizer) on rank {rank}"] = trace["is an Optimizer"]
        for name, state in trace["state"]:
            found[f"`state[{name!r}]` on rank {rank}"] = sorted(state)
            found |= {f"`state[{name!r}][{key!r}]` on rank {rank}": value for key, value in state.items()}
    return found


def replay_of(story, step: int | None = None, *, groups=None, numels=None):
    """What a known slip gives on this story: after `step` (the story cut there), or at its end."""

    def replay(implementation):
        played = story
        if step:
            played = story | {"steps": step, "batches": story["batches"][:step], "closures": story["closures"][:step]}
        answers = trained(implementation, story["world"], [played])
        traces = [answer[0] for answer in answers]
        if step is None:
            return observed_at_the_end(traces, groups, numels)
        return observed(traces, step)

    return replay


# --------------------------------------------------------------------------- the checks

VALUES_HINT = (
    "every rank ends each step with the values its owner computed: the owner steps its parameters on the "
    "gradients averaged over every rank's micro-batch (all_reduce SUM, then / N), with its group's current "
    "hyperparameters, then broadcasts them from src=owner",
    "每一步结束时，每个 rank 都持有属主算出的值：属主用所有 rank 的 micro-batch 平均后的梯度（all_reduce 求和再除以 N）、"
    "按参数组当前的超参数更新自己负责的参数，再以 src=属主 广播出去",
)


def check_step(story, traces: list, reference: dict, step: int) -> None:
    """After `step`: no gradient left by zero_grad(), and every parameter as the reference's, on every rank."""
    call = call_text(story, step)
    for rank, trace in enumerate(traces):
        left = trace["left"][step - 1] if step else []
        if left:
            raise Mismatch(
                pick(
                    f"{call}: on rank {rank}, zero_grad() before this step left the .grad of {left} (it must be None "
                    "for every parameter of param_groups, owned or not: gradients left there are added to by the "
                    "next backward and averaged again)",
                    f"{call}：rank {rank} 上，这一步之前的 zero_grad() 留下了 {left} 的 .grad（param_groups 中每个参数，"
                    "无论归谁，都应为 None：留下的梯度会被下一次 backward 累加，并再次被平均）",
                ),
                what=f"gradients after zero_grad() on rank {rank}",
                actual=left,
                expected=[],
            )
    expected = reference["idle"] if step == 0 else reference["params"][step - 1]
    for rank, trace in enumerate(traces):
        got = trace["idle"] if step == 0 else trace["params"][step - 1]
        for name, want in expected.items():
            assert_close(
                got[name],
                want,
                call=call,
                what=f"`{name}` on rank {rank}",
                tolerance=TOLERANCE,
                hint=pick(*VALUES_HINT),
            )


def check_structure(story, traces: list, reference: dict) -> None:
    """Each rank's optimizer is a torch.optim.Optimizer whose param_groups list every parameter."""
    call = call_text(story)
    for rank, trace in enumerate(traces):
        if not trace["is an Optimizer"]:
            raise Mismatch(
                pick(
                    f"{call}: on rank {rank} the optimizer is not a torch.optim.Optimizer (subclass it)",
                    f"{call}：rank {rank} 上的优化器不是 torch.optim.Optimizer（请继承它）",
                ),
                what=f"isinstance(optimizer, torch.optim.Optimizer) on rank {rank}",
                actual=False,
                expected=True,
            )
        if trace["groups"] != reference["groups"]:
            raise Mismatch(
                pick(
                    f"{call}: at the end, rank {rank}'s param_groups are {trace['groups']}, expected "
                    f"{reference['groups']} (every parameter of every group on every rank, in the order given, "
                    "missing hyperparameters filled from kwargs: super().__init__(params, kwargs))",
                    f"{call}：结束时 rank {rank} 的 param_groups 是 {trace['groups']}，应为 {reference['groups']}"
                    "（每个 rank 上都列出每个组的每个参数，按给出的顺序，缺的超参数由 kwargs 补上："
                    "super().__init__(params, kwargs)）",
                ),
                what=f"param_groups on rank {rank}",
                actual=trace["groups"],
                expected=reference["groups"],
            )


def check_owners(story, traces: list, groups: list) -> None:
    """Every parameter of every group is held by the optimizer_cls instances of exactly one rank."""
    found = owners(traces, groups)
    call = call_text(story)
    for name, ranks in found.items():
        if name == STRANGER:
            message = pick(
                f"{call}: the optimizer_cls instances of ranks {ranks} hold tensors that are not the model's "
                "parameters (copies?); hand the owned Parameter objects themselves to optimizer_cls",
                f"{call}：rank {ranks} 上的 optimizer_cls 实例持有不是模型参数的张量（副本？）；"
                "请把自己负责的 Parameter 对象本身交给 optimizer_cls",
            )
        elif len(ranks) != 1:
            message = pick(
                f"{call}: `{name}` is in the optimizer_cls instances of ranks {ranks}; each parameter of every "
                "group (frozen ones too) has exactly one owner, and only the owner's optimizer_cls holds it",
                f"{call}：`{name}` 出现在 rank {ranks} 的 optimizer_cls 实例中；每个组的每个参数（冻结的也算）"
                "都恰好有一个属主，只有属主的 optimizer_cls 持有它",
            )
        else:
            continue
        raise Mismatch(message, what="owners", actual=found, expected="one rank each")


def check_balance(story, traces: list, numels: dict, groups: list) -> None:
    """Every rank owns at most total / N + the largest parameter's numel."""
    sizes = [numels[name] for group in groups for name in group["params"]]
    bound = sum(sizes) / story["world"] + max(sizes)
    owned = loads(traces, numels)
    if max(owned) > bound:
        raise Mismatch(
            pick(
                f"{call_text(story)}: the ranks own {owned} elements; each may own at most total / N + the "
                f"largest parameter = {sum(sizes)} / {story['world']} + {max(sizes)} = {bound:g}. Give each "
                "parameter to the rank that owns the fewest elements so far (largest parameters first), with the "
                "loads carried over from group to group (index round robin, or loads that restart at each group, "
                "put the big ones together)",
                f"{call_text(story)}：各 rank 拥有的元素数为 {owned}；每个 rank 最多只能拥有 总数 / N + 最大参数的元素数 = "
                f"{sum(sizes)} / {story['world']} + {max(sizes)} = {bound:g}。请把每个参数交给目前拥有元素最少的 rank"
                "（大的参数先分），负载在参数组之间累计（按下标轮流分配，或每个组重新计负载，都会把大参数堆在一起）",
            ),
            what="elements owned per rank",
            actual=owned,
            expected=f"<= {bound:g}",
        )


def check_state(story, traces: list, state: dict) -> None:
    """Optimizer state for every parameter the reference holds it for, on exactly one rank, with
    the reference's keys and values; none for a parameter without gradients."""
    call = call_text(story)
    found = holders(traces)
    for name in sorted(set(found) | set(state)):
        ranks = found.get(name, [])
        if name in state and len(ranks) == 1:
            continue
        if name not in state and not ranks:
            continue
        if name not in state:
            message = pick(
                f"{call}: ranks {ranks} hold optimizer state for `{name}`, which never had a gradient (the unsharded "
                "optimizer holds none for it)",
                f"{call}：rank {ranks} 持有 `{name}` 的优化器状态，而它从没有过梯度（不分片的优化器不会为它保存状态）",
            )
        else:
            message = pick(
                f"{call}: optimizer state for `{name}` is held on ranks {ranks}; it lives on its owner alone "
                "(only the owner's optimizer_cls steps it): about 1/N of the state per rank is the point of ZeRO",
                f"{call}：`{name}` 的优化器状态保存在 rank {ranks} 上；它只应在属主上（只有属主的 optimizer_cls 更新它）："
                "每个 rank 只存约 1/N 的状态正是 ZeRO 的意义",
            )
        raise Mismatch(message, what="ranks holding optimizer state", actual=found, expected="the owner alone")
    for name, want in state.items():
        rank = found[name][0]
        got = dict(traces[rank]["state"])[name]
        if sorted(got) != sorted(want):
            raise Mismatch(
                pick(
                    f"{call}: rank {rank}'s optimizer state for `{name}` has the keys {sorted(got)}, expected "
                    f"{sorted(want)}",
                    f"{call}：rank {rank} 上 `{name}` 的优化器状态的键是 {sorted(got)}，应为 {sorted(want)}",
                ),
                what=f"`state[{name!r}]` on rank {rank}",
                actual=sorted(got),
                expected=sorted(want),
            )
        for key, value in want.items():
            assert_close(
                got[key],
                value,
                call=call + pick(", after the last step", "，最后一步之后"),
                what=f"`state[{name!r}][{key!r}]` on rank {rank}",
                tolerance=EXACT if key == "step" else TOLERANCE,
            )


def check_returns(story, traces: list, step: int) -> None:
    """step(closure) called the closure once and returned its loss; step() returned None."""
    call = call_text(story, step)
    with_closure = story["closures"][step - 1]
    for rank, trace in enumerate(traces):
        calls, returned, loss = trace["calls"][step - 1], trace["returned"][step - 1], trace["losses"][step - 1]
        if with_closure and calls != 1:
            raise Mismatch(
                pick(
                    f"{call}, rank {rank}: step(closure) called the closure {calls} times; call it once, first",
                    f"{call}，rank {rank}：step(closure) 调用了 closure {calls} 次；应在最开始调用一次",
                ),
                what=f"`closure` calls on rank {rank}",
                actual=calls,
                expected=1,
            )
        if with_closure:
            right = isinstance(returned, torch.Tensor) and loss is not None and torch.equal(returned, loss)
            want, text = loss, pick("the closure's loss", "closure 返回的 loss")
        else:
            right, want, text = returned is None, None, "None"
        if not right:
            shown = returned if not isinstance(returned, torch.Tensor) else f"tensor({returned.tolist()})"
            raise Mismatch(
                pick(
                    f"{call}, rank {rank}: step({'closure' if with_closure else ''}) returned {shown}, expected {text}",
                    f"{call}，rank {rank}：step({'closure' if with_closure else ''}) 返回了 {shown}，应返回 {text}",
                ),
                what=f"`step()` returned on rank {rank}",
                actual=returned,
                expected=want,
            )
