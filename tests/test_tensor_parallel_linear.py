"""tensor_parallel_linear: Megatron's column- and row-parallel layers, judged on worlds of 1 to 4
ranks (gloo, forked, judge/worlds.py) against the full nn.Linear (and the Megatron MLP) in
float64 from the same weights: outputs, x's gradient and each rank's slices of the weight and
bias gradients; the MLP's collectives counted."""

from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from judge.forbidden import TENSOR_PARALLEL
from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, check_tensor_kind
from judge.testing.scenarios import outcome, world_scenario
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype
from judge.testing.traffic import messages
from judge.testing.world_cases import play_by_world

KINDS = ("column", "row", "mlp")


def draw(rng, count):
    cases = []
    for _ in range(count):
        world = rng.choice((2, 3, 4))
        kind = rng.choice(KINDS)
        cases.append(
            {
                "world": world,
                "kind": kind,
                "in": world * rng.randint(1, 3),
                "hidden": world * rng.randint(1, 3),
                "out": world * rng.randint(1, 3),
                "lead": rng.choice([(rng.randint(1, 4),), (2, rng.randint(1, 3))]),
                "bias": rng.random() < 0.8,
                "split": rng.random() < 0.5,  # column: gather_output; row: input_is_parallel
            }
        )
    return cases


def sized(**sizes) -> dict:
    """An edge case's sizes: hidden 4, a bias, the split flag on, 3 rows, unless it says otherwise."""
    return {"hidden": 4, "bias": True, "split": True, "lead": (3,)} | sizes


def benchmark(kata, device):
    """On every rank of a world of 2: the Megatron MLP (Column -> GELU -> Row), forward and
    backward, at [64, 512] -> 2048 -> 512, against the unsharded MLP on each rank."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 512, generator=generator)
    first, second = nn.Linear(512, 2048), nn.Linear(2048, 512)

    def run(up, down):
        def call():
            with torch.enable_grad():
                leaf = x.clone().requires_grad_()
                down(F.gelu(up(leaf))).sum().backward()

        return call

    sharded = run(
        kata.ColumnParallelLinear.from_linear(first, gather_output=False),
        kata.RowParallelLinear.from_linear(second, input_is_parallel=True),
    )
    return sharded, run(first, second)


benchmark.world_size = 2  # ranks in the benchmark's world (judge.timing.measure_world): one a core here
benchmark.number = 10  # calls per round, the same on every rank


SPEC = KataSpec(
    kata="tensor_parallel_linear",
    symbol="ColumnParallelLinear",
    also={"RowParallelLinear": TENSOR_PARALLEL},
    reference="the full nn.Linear (and the Megatron MLP) in float64 from the same weights; each rank's slices",
    forbidden=TENSOR_PARALLEL,
    tolerances=per_dtype(float64=(1e-10, 1e-12), float32=(1e-5, 1e-5)),
    tolerance_note="float64: sums over ranks in another order than one matmul (worst seen 2e-15); "
    "float32: against the float64 reference",
    cases=CaseTable(
        draw=draw,
        edges=(
            edge("the Megatron MLP", "Megatron 的 MLP", **sized(world=2, kind="mlp", **{"in": 4, "out": 6})),
            edge(
                "gathered column output",
                "列并行输出再 all-gather",
                **sized(world=3, kind="column", **{"in": 5, "out": 6}),
            ),
            edge(
                "unsplit row input",
                "行并行的输入未切分",
                **sized(world=2, kind="row", split=False, **{"in": 6, "out": 3}),
            ),
            edge("3-D input", "3 维输入", **sized(world=4, kind="row", lead=(2, 3), **{"in": 8, "out": 5})),
            edge(
                "no bias", "没有 bias", **sized(world=2, kind="column", bias=False, split=False, **{"in": 3, "out": 4})
            ),
            edge("world size 1", "只有 1 个进程", **sized(world=1, kind="mlp", **{"in": 3, "out": 2})),
        ),
        draws=3,
    ),
    world=True,
    benchmark=benchmark,
)


def weights(sizes, seed: int) -> dict:
    """Every parameter random (biases included), float64, and the input and upstream gradient."""
    generator = torch.Generator().manual_seed(seed)
    shapes = {"x": (*sizes["lead"], sizes["in"])}
    if sizes["kind"] == "mlp":
        shapes |= {"w1": (sizes["hidden"], sizes["in"]), "b1": (sizes["hidden"],)}
        shapes |= {"w2": (sizes["out"], sizes["hidden"]), "b2": (sizes["out"],)}
    else:
        shapes |= {"w1": (sizes["out"], sizes["in"]), "b1": (sizes["out"],)}
    shapes["grad"] = (*sizes["lead"], sizes["out"])
    return {name: torch.randn(shape, generator=generator, dtype=torch.float64) for name, shape in shapes.items()}


def linear(weight, bias, dtype) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


def own(tensor, rank: int, world: int):
    """This rank's slice of the last dim."""
    return tensor.chunk(world, dim=-1)[rank]


@world_scenario
def played(kata, cases: list) -> list:
    """On every rank, for each case: the layer (or the MLP) built with from_linear from the full
    weights, called on the input (this rank's slice where the layer takes a slice), backward from
    the upstream gradient (this rank's slice where the layer gives a slice); what came out, the
    gradients, and the collectives of forward and of backward."""
    rank, world = dist.get_rank(), dist.get_world_size()
    results = []
    for c in cases:
        w, dtype = c["weights"], c["dtype"]
        bias = c["bias"]
        first = linear(w["w1"], w["b1"] if bias else None, dtype)
        if c["kind"] == "mlp":
            up = kata.ColumnParallelLinear.from_linear(first, gather_output=False)
            down = kata.RowParallelLinear.from_linear(linear(w["w2"], w["b2"] if bias else None, dtype))
            layers, x, grad = {"up": up, "down": down}, w["x"], w["grad"]
            forward = nn.Sequential(up, nn.GELU(), down)
        elif c["kind"] == "column":
            layer = kata.ColumnParallelLinear.from_linear(first, gather_output=c["split"])
            layers, x = {"layer": layer}, w["x"]
            grad = w["grad"] if c["split"] else own(w["grad"], rank, world)
            forward = layer
        else:
            layer = kata.RowParallelLinear.from_linear(first, input_is_parallel=c["split"])
            layers, grad = {"layer": layer}, w["grad"]
            x = own(w["x"], rank, world) if c["split"] else w["x"]
            forward = layer
        x = x.to(dtype).clone().requires_grad_()
        with torch.enable_grad(), messages() as sent_forward:
            output = forward(x)
        with messages() as sent_backward:
            output.backward(grad.to(dtype))
        played_case = {"output": output.detach(), "x grad": x.grad, "forward": sent_forward, "backward": sent_backward}
        for name, layer in layers.items():
            played_case[f"{name} weight grad"] = layer.weight.grad
            played_case[f"{name} bias grad"] = layer.bias.grad if layer.bias is not None else None
        results.append(played_case)
    return results


def expected(c, w) -> dict:
    """The full float64 computation: the output, x's gradient, each layer's weight and bias gradients."""
    x = w["x"].clone().requires_grad_()
    first = linear(w["w1"], w["b1"] if c["bias"] else None, torch.float64)
    layers = {"layer": first}
    if c["kind"] == "mlp":
        second = linear(w["w2"], w["b2"] if c["bias"] else None, torch.float64)
        output = second(F.gelu(first(x)))
        layers = {"up": first, "down": second}
    else:
        output = first(x)
    output.backward(w["grad"])
    full = {"output": output.detach(), "x grad": x.grad}
    for name, layer in layers.items():
        full[f"{name} weight grad"] = layer.weight.grad
        full[f"{name} bias grad"] = layer.bias.grad if layer.bias is not None else None
    return full


def rank_share(c, full: dict, rank: int) -> dict:
    """What `rank` must see of the full computation: its slices where it holds slices."""
    world = c["world"]
    want = dict(full)
    if c["kind"] == "column" and not c["split"]:
        want["output"] = own(full["output"], rank, world)
    if c["kind"] == "row" and c["split"]:
        want["x grad"] = own(full["x grad"], rank, world)
    for name in [key.removesuffix(" weight grad") for key in full if key.endswith(" weight grad")]:
        by_rows = name == "up" or (name == "layer" and c["kind"] == "column")
        weight_grad, bias_grad = full[f"{name} weight grad"], full[f"{name} bias grad"]
        want[f"{name} weight grad"] = own(weight_grad.T, rank, world).T if by_rows else own(weight_grad, rank, world)
        want[f"{name} bias grad"] = own(bias_grad, rank, world) if by_rows and bias_grad is not None else bias_grad
    return want


def play(kata, cases, seed: int) -> Iterator[tuple]:
    """(case, its weights, [each rank's play]) for every case (each names its dtype), one world
    per world size: a world costs 0.1-0.3 s, the cases in it next to nothing."""
    prepared = [(c, weights(c, seed + n)) for n, c in enumerate(cases)]
    return play_by_world(kata, played, prepared, lambda c, w: dict(c, weights=w), SPEC)


def rank_plays(implementation, c, w) -> list:
    """[each rank's play] of case `c` with weights `w`, where `implementation` lives (a replay's)."""
    return [play[0] for play in played(implementation, c["world"], [dict(c, weights=w)])]


def replay_of(c, w):
    def replay(implementation):
        plays = rank_plays(implementation, c, w)
        return {f"{what} on rank {rank}": value for rank, play in enumerate(plays) for what, value in play.items()}

    return replay


def call_text(c, dtype) -> str:
    name = {"column": "ColumnParallelLinear", "row": "RowParallelLinear", "mlp": "Column -> GELU -> Row"}[c["kind"]]
    flag = {"column": "gather_output", "row": "input_is_parallel"}.get(c["kind"])
    flags = f"({flag}={c['split']})" if flag else ""
    dtype_name = str(dtype).removeprefix("torch.")
    return pick(
        f"{name}{flags} in {dtype_name} on each of {c['world']} ranks",
        f"在 {c['world']} 个 rank 上各运行 {name}{flags}（{dtype_name}）",
    )


HINTS = {
    "output": (
        (
            "Column keeps ROWS of the weight (output features) and all-gathers along the last dim in rank "
            "order; Row keeps COLUMNS (input features), all-reduces the partial products, then adds the bias once"
        ),
        (
            "Column 保留权重的行（输出特征），在最后一维按 rank 顺序 all-gather；Row 保留列（输入特征），"
            "对部分积做 all-reduce，之后只加一次 bias"
        ),
    ),
    "x grad": (
        (
            "f's backward all-reduces x's gradient (every rank's slice of the weight saw all of x); g's backward "
            "is the identity"
        ),
        "f 的反向要对 x 的梯度做 all-reduce（每个 rank 的权重切片都用到了整个 x）；g 的反向是恒等",
    ),
}


def check_case(c, w, plays, dtype) -> None:
    full, call = expected(c, w), call_text(c, dtype)  # computed once, sliced for each rank
    for rank, got in enumerate(plays):
        for what, value in rank_share(c, full, rank).items():
            key = f"{what} on rank {rank}"
            if value is None:
                if got[what] is not None:
                    raise Mismatch(
                        pick(f"{call}: {key} should be None (no bias)", f"{call}：{key} 应为 None（没有 bias）"),
                        what=key,
                        actual=got[what],
                        expected=None,
                    )
                continue
            check_tensor_kind(got[what], value.to(dtype), call=call, what=key)
            hint = HINTS.get(what, HINTS["x grad"] if "grad" in what else HINTS["output"])
            assert_close(
                got[what], value.to(dtype), call=call, what=key, tolerance=SPEC.tolerance(dtype), hint=pick(*hint)
            )


@core(zh="输出、x 的梯度、每个 rank 的权重与 bias 梯度切片都与完整的 nn.Linear 一致")
def test_outputs_and_gradients_match_the_full_layer(kata, rng, seed):
    dtypes = (torch.float64, torch.float32)
    cases = [c | {"dtype": dtype} for dtype in dtypes for c in SPEC.cases.cases(rng, edges=dtype == torch.float64)]
    for c, w, plays in play(kata, cases, seed):
        with c.judged(), SPEC.diagnosing(replay_of(c, w), sizes=c):
            check_case(c, w, plays, c["dtype"])


def collectives(log) -> list[str]:
    return [what for what, _, _ in log]


ONCE_EACH_WAY = {"forward": ["allreduce_"], "backward": ["allreduce_"]}


def counted(plays) -> dict:
    """{"collectives on rank r": the collectives rank r called in forward and in backward}."""
    return {
        f"collectives on rank {rank}": {
            "forward": collectives(got["forward"]),
            "backward": collectives(got["backward"]),
        }
        for rank, got in enumerate(plays)
    }


@core(zh="Megatron MLP 前向一次 all-reduce、反向一次 all-reduce，没有 all-gather")
def test_the_megatron_mlp_all_reduces_once_each_way(kata, seed):
    mlp = SPEC.cases.edges[0]
    for world in (2, 3):
        c = mlp | {"world": world, "in": 2 * world, "hidden": 2 * world, "dtype": torch.float64}
        for _, w, plays in play(kata, [c], seed):

            def replay(implementation, c=c, w=w) -> dict:
                return counted(rank_plays(implementation, c, w))

            with c.judged(), SPEC.diagnosing(replay, sizes=c):
                for rank, (what, calls) in enumerate(counted(plays).items()):
                    if calls != ONCE_EACH_WAY:
                        raise Mismatch(
                            pick(
                                f"{call_text(c, torch.float64)}: rank {rank} called {calls}; the Megatron MLP "
                                "needs one all-reduce in forward (g, after Row) and one in backward (f, before "
                                "Column), and no all-gather",
                                f"{call_text(c, torch.float64)}：rank {rank} 调用了 {calls}；Megatron MLP 前向只需一次 "
                                "all-reduce（Row 之后的 g），反向一次（Column 之前的 f），不需要 all-gather",
                            ),
                            what=what,
                            actual=calls,
                            expected=ONCE_EACH_WAY,
                        )


@world_scenario
def refused(kata, sizes: list) -> list:
    """What each constructor does with sizes the world does not divide."""
    found = []
    for in_features, out_features in sizes:
        found.append(
            {
                "ColumnParallelLinear": outcome(lambda i=in_features, o=out_features: kata.ColumnParallelLinear(i, o)),
                "RowParallelLinear": outcome(lambda i=in_features, o=out_features: kata.RowParallelLinear(o, i)),
            }
        )
    return found


@convention(
    "ValueError when the features to split are not divisible by the world size.", zh="不能整除时抛出 ValueError"
)
def test_sizes_the_world_does_not_divide_raise_value_error(kata):
    def outcomes(implementation):
        plays = refused(implementation, 2, [(4, 5)])
        return {f"`{name}` on rank {rank}": said for rank, got in enumerate(plays) for name, said in got[0].items()}

    with SPEC.diagnosing(outcomes):
        for what, said in outcomes(kata).items():
            if said != "raised ValueError":
                name, rank = what.split(" on rank ")
                said_zh = "正常返回了" if said == "returned normally" else "抛出了 " + said.removeprefix("raised ")
                raise Mismatch(
                    pick(
                        f"{what}, 5 features to split over 2 ranks: {said}; expected ValueError",
                        f"rank {rank} 上的 {name}，把 5 个特征切到 2 个 rank 上：{said_zh}；应抛出 ValueError",
                    ),
                    what=what,
                    actual=said,
                    expected="raised ValueError",
                )


@world_scenario
def built(kata, seed: int) -> dict:
    """The plain constructors' parameters (shapes), and whether from_linear shares storage."""
    torch.manual_seed(seed)
    column, row = kata.ColumnParallelLinear(6, 4), kata.RowParallelLinear(4, 3, bias=False)
    full = nn.Linear(4, 6)
    copied = kata.ColumnParallelLinear.from_linear(full)
    shared = any(
        p.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()
        for p in copied.parameters()
        for q in full.parameters()
    )
    return {
        "column": [tuple(p.shape) for p in (column.weight, column.bias)],
        "row": (tuple(row.weight.shape), row.bias is None),
        "shared": shared,
    }


@convention(
    "the plain constructor initialises the full weight and bias as nn.Linear(in_features, out_features) would, "
    "from the global RNG (in the same state on every rank), and keeps this rank's slice.",
    zh="普通构造函数按 nn.Linear 初始化完整权重并保留本 rank 的切片",
)
def test_the_plain_constructors_keep_this_ranks_slice(kata, seed):
    for rank, got in enumerate(built(kata, 2, seed)):
        want = {"column": [(2, 6), (2,)], "row": ((3, 2), True)}
        if {k: got[k] for k in want} != want:
            raise AssertionError(
                pick(
                    f"rank {rank} of 2: ColumnParallelLinear(6, 4) and RowParallelLinear(4, 3, bias=False) hold "
                    f"{got['column']} and {got['row'][0]} (bias None: {got['row'][1]}); expected {want['column']} "
                    "and (3, 2) with no bias",
                    f"2 个 rank 中的 rank {rank}：ColumnParallelLinear(6, 4) 与 RowParallelLinear(4, 3, bias=False) 的参数形状为 "
                    f"{got['column']} 和 {got['row'][0]}（bias 为 None：{got['row'][1]}）；应为 {want['column']} 和 (3, 2)，且没有 bias",
                )
            )


@convention("from_linear copies: the layer shares no storage with `linear`.", zh="from_linear 复制权重，不共享存储")
def test_from_linear_copies_the_weights(kata, seed):
    def sharing(implementation):
        return {
            f"`from_linear` on rank {rank}": got["shared"] for rank, got in enumerate(built(implementation, 1, seed))
        }

    with SPEC.diagnosing(sharing):
        for what, shared in sharing(kata).items():
            if shared:
                raise Mismatch(
                    pick(
                        f"{what}: ColumnParallelLinear.from_linear(linear) shares storage with linear's parameters; "
                        "copy the slices (.detach().clone())",
                        f"rank {what.split(' on rank ')[1]}：ColumnParallelLinear.from_linear(linear) 与 linear 的参数共享存储；"
                        "请复制切片（.detach().clone()）",
                    ),
                    what=what,
                    actual=True,
                    expected=False,
                )
