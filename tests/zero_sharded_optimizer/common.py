"""zero_sharded_optimizer: what its tests share (the models, the case table, the stories, the
scenario every rank plays, the reference, the checks, the SPEC).

A story is one training run made concrete: a model (its initial values, float64), the
optimizer class and its keywords, how the parameters are passed (a list, a generator, groups),
and a full batch per step (ROWS rows per rank). Every rank of a world plays it on its own
rows with the learner's ShardedOptimizer, around a recording subclass of the optimizer class
(RecordingAdamW, RecordingSGD: the judge reads their instances' param_groups and state), and
returns its trace: the parameters after every step, the gradients left after zero_grad(), its
param_groups, the parameters it owns (its optimizer_cls instances' param_groups) and the state
it holds. Here the same story is played once by the unsharded torch optimizer on the whole
batch (the reference), and both are compared.

Tolerance (TOLERANCE): every value is float64 on both sides; the only difference is the
order of additions (the ranks' gradients averaged by gloo against one backward over the whole
batch), which AdamW's normalisation and ten steps carry to the parameters. Measured over 100
seeds x every case (the edge cases and 2 draws a seed) for the solution and both variants (a
script over the stories, not kept): worst error 2.4e-13 on a parameter (1.2e-3 of the
tolerance, rtol 1e-9 + atol 1e-10), 2.2e-15 on the optimizer state (1.6e-5 of it); the three
files alike. Summed instead of averaged gradients move AdamW's parameters by 5.5e-6 to 6.6e-4
after one step of the CS336 case (5 seeds): its eps no longer matches.
"""

import math
import warnings

import torch
import torch._dynamo  # noqa: F401 - the first optimizer's construction imports it: once, in the warm process
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

with warnings.catch_warnings():  # its functional optimizers are TorchScript: deprecation warnings, 66 of them
    warnings.simplefilter("ignore", DeprecationWarning)
    import torch.distributed.optim  # noqa: F401 - where ZERO_SHARDING's sites live (0.5 s): loaded once, warm

from judge.forbidden import ZERO_SHARDING
from judge.protocol import ErrorKind
from judge.testing.scenarios import world_scenario
from judge.testing.spec import CaseTable, KataSpec, edge

ROWS = 4  # rows of each rank's micro-batch
TOLERANCE = {"rtol": 1e-9, "atol": 1e-10}
STATE_KEYS = {"AdamW": ("exp_avg", "exp_avg_sq", "step"), "SGD": ("momentum_buffer",)}


# --------------------------------------------------------------------------- models


class _FC2(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 50)
        self.fc.bias.requires_grad = False  # frozen: no gradient, never stepped, never decayed


class ToyModel(nn.Module):
    """The model of CS336 assignment 2's sharded-optimizer test, in its spirit: a frozen bias
    and a fixed parameter, both passed to the optimizer."""

    out = 5

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 10, bias=False)
        self.fc2 = _FC2()
        self.fc3 = nn.Linear(50, 5, bias=False)
        self.no_grad_fixed_param = nn.Parameter(torch.tensor([2.0, 2.0]), requires_grad=False)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2.fc(F.relu(self.fc1(x)))))


class TiedModel(nn.Module):
    """fc4.weight is fc2.weight: one parameter, listed once, its gradient the sum of both uses."""

    out = 5

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 10, bias=False)
        self.fc2 = nn.Linear(10, 50, bias=False)
        self.fc3 = nn.Linear(50, 10, bias=False)
        self.fc4 = nn.Linear(10, 50, bias=False)
        self.fc5 = nn.Linear(50, 5, bias=False)
        self.fc4.weight = self.fc2.weight

    def forward(self, x):
        for layer in (self.fc1, self.fc2, self.fc3, self.fc4):
            x = F.relu(layer(x))
        return self.fc5(x)


class LinearModel(nn.Module):
    """Two parameters: fewer than the ranks of a world of 3 or 4."""

    out = 5

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 5)

    def forward(self, x):
        return self.fc(x)


class Block(nn.Module):
    """A [10, 10] matrix followed by 11 scalars (0-d parameters)."""

    def __init__(self):
        super().__init__()
        self.matrix = nn.Parameter(torch.zeros(10, 10))
        self.scalars = nn.ParameterList([nn.Parameter(torch.zeros(())) for _ in range(11)])

    def forward(self, x):
        scalars = torch.stack(list(self.scalars))
        return torch.tanh(x @ self.matrix.T + scalars[:10]) * scalars[10]


class BlocksModel(nn.Module):
    """Three blocks, one parameter group each: 333 elements. By index round robin the three
    matrices (indices 0, 12, 24) all go to rank 0 at N = 2, 3 and 4; so do they when the
    loads restart at each group."""

    out = 10

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class HeadModel(nn.Module):
    """The toy model under a head that starts frozen, outside the optimizer: unfrozen and
    added with add_param_group during training."""

    out = 3

    def __init__(self):
        super().__init__()
        self.body = ToyModel()
        self.head = nn.Linear(5, 3)
        self.head.requires_grad_(False)

    def forward(self, x):
        return self.head(self.body(x))


MODELS = {"toy": ToyModel, "tied": TiedModel, "linear": LinearModel, "blocks": BlocksModel, "toy+head": HeadModel}


# --------------------------------------------------------------------------- the optimizers

MADE: list = []  # the optimizer_cls instances made on this rank since its story began


class RecordingAdamW(torch.optim.AdamW):
    """torch.optim.AdamW that records its instances: the judge reads their groups and state."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        MADE.append(self)


class RecordingSGD(torch.optim.SGD):
    """torch.optim.SGD that records its instances: the judge reads their groups and state."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        MADE.append(self)


# name: (what the learner's ShardedOptimizer gets, the reference, its keywords)
OPTIMIZERS = {
    "AdamW": (RecordingAdamW, torch.optim.AdamW, {"lr": 0.1, "weight_decay": 0.1}),  # CS336's
    "SGD": (RecordingSGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}),
}
GROUP_OWN = {"lr": 0.02, "weight_decay": 0.0}  # the first group's own keys, in the two-group stories
HEAD_LR = 0.05  # the head's group, added during training


def param_argument(model, how: str):
    """What ShardedOptimizer (and the reference) get as `params`."""
    params = list(model.body.parameters() if isinstance(model, HeadModel) else model.parameters())
    if how == "list":
        return params
    if how == "generator":
        return (p for p in params)
    if how == "two_groups":  # the last parameter alone in the second group: one rank owns nothing in it at N = 2
        return [{"params": params[:-1], **GROUP_OWN}, {"params": params[-1:]}]
    return [{"params": list(block.parameters())} for block in model.blocks]  # "a group per block"


def argument_text(how: str) -> str:
    return {
        "list": "list(model.parameters())",
        "generator": "model.parameters()",
        "two_groups": "[{'params': params[:-1], 'lr': 0.02, 'weight_decay': 0.0}, {'params': params[-1:]}]",
        "blocks": "[{'params': block.parameters()} for block in model.blocks]",
    }[how]


# --------------------------------------------------------------------------- the case table

# world: ranks; model: MODELS' key; optimizer: OPTIMIZERS' key; steps; params: param_argument's
# `how`; schedule: every group's lr halved after every step; added: the step after which the
# head is unfrozen and added (0: never); closure: step(closure) "always", "never", on odd steps
# ("alternate") or on even ones ("even": a first step without, where a closure handed on to the local
# optimizer differs from gradients never averaged); idle: a step() before the first backward.
# A case names only the keys it changes from BASE.
BASE = {"schedule": False, "added": 0, "closure": "never", "idle": False}
# fmt: off
EDGES = (  # the most telling first
    edge("CS336 toy model", "CS336 的玩具模型",
         world=2, model="toy", optimizer="AdamW", steps=10, params="list"),
    edge("another optimizer class", "换一个优化器类",
         world=3, model="toy", optimizer="SGD", steps=4, params="list"),
    edge("two param groups", "两个参数组",
         world=2, model="toy", optimizer="AdamW", steps=3, params="two_groups"),
    edge("lr changed between steps", "步与步之间改 lr",
         world=2, model="toy", optimizer="AdamW", steps=4, params="two_groups", schedule=True),
    edge("param group added during training", "训练中途加入参数组",
         world=3, model="toy+head", optimizer="AdamW", steps=5, params="list", added=3),
    edge("unbalanced sizes", "大小悬殊的参数",
         world=2, model="blocks", optimizer="AdamW", steps=2, params="blocks"),
    edge("tied weights", "共享权重",
         world=3, model="tied", optimizer="AdamW", steps=4, params="list"),
    edge("more ranks than parameters", "rank 比参数还多",
         world=4, model="linear", optimizer="AdamW", steps=3, params="list"),
    edge("closure", "用 closure 调用 step",
         world=2, model="toy", optimizer="AdamW", steps=4, params="list", closure="even"),
    edge("world size 1", "只有 1 个进程",
         world=1, model="toy", optimizer="AdamW", steps=3, params="list"),
)
# fmt: on


def draw(rng, count: int) -> list[dict]:
    """Any model on 2 to 4 ranks, either optimizer, 2 or 3 steps, a scheduler or a closure now and then."""
    cases = []
    for _ in range(count):
        model = rng.choice(("toy", "tied", "linear", "blocks"))
        how = "blocks" if model == "blocks" else rng.choice(("list", "two_groups"))
        cases.append(
            {"world": rng.choice((2, 3, 4)), "model": model, "optimizer": rng.choice(tuple(OPTIMIZERS))}
            | {"steps": rng.randint(2, 3), "params": how, "schedule": rng.random() < 0.3}
            | {"closure": rng.choice(("never", "never", "always"))}
        )
    return cases


def benchmark(kata, device):
    """On every rank of a world of 2: the kata's step against the unsharded optimizer's as DDP
    runs it (all_reduce(SUM) / N of every gradient, then a full AdamW step), on a model of four
    256 x 256 layers (263 k parameters, float32), gradients set once."""
    generator = torch.Generator().manual_seed(0)
    sizes = [(256, 256), (256,)] * 4

    def parameters():
        made = [nn.Parameter(torch.randn(size, generator=generator) * 0.05) for size in sizes]
        for p in made:
            p.grad = torch.randn(p.shape, generator=generator) * 1e-3
        return made

    sharded = kata.ShardedOptimizer(parameters(), torch.optim.AdamW, lr=1e-3, weight_decay=0.1)
    full = parameters()
    unsharded = torch.optim.AdamW(full, lr=1e-3, weight_decay=0.1)

    def reference():
        for p in full:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(dist.get_world_size())
        unsharded.step()

    return sharded.step, reference


benchmark.world_size = 2  # ranks in the benchmark's world (judge.timing.measure_world): one a core here
benchmark.number = 10  # calls per round, the same on every rank (a step is ~20 ms here: 16 gloo collectives)


SPEC = KataSpec(
    kata="zero_sharded_optimizer",
    symbol="ShardedOptimizer",
    reference="an unsharded torch.optim.AdamW / SGD over a float64 copy of the model, stepped on the whole batch",
    forbidden=ZERO_SHARDING,
    tolerances={torch.float64: TOLERANCE},
    tolerance_note="float64 parameters and optimizer state after every step, on every rank, against the unsharded "
    "optimizer on the whole batch; worst correct file 1.2e-3 of it over 100 seeds",
    cases=CaseTable(draw=draw, edges=EDGES, draws=2),
    world=True,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- stories


def story_of(case, seed: int) -> dict:
    """The case made concrete from `seed`: every parameter random (float64), a batch per step."""
    generator = torch.Generator().manual_seed(seed)
    model = MODELS[case["model"]]().double()
    initial = {}
    for name, p in model.named_parameters():
        scale = 1 / math.sqrt(p.shape[-1]) if p.dim() >= 2 else 0.5
        initial[name] = torch.randn(p.shape, generator=generator, dtype=torch.float64) * scale
    rows = ROWS * case["world"]
    batches = [
        (
            torch.randn(rows, 10, generator=generator, dtype=torch.float64),
            torch.randn(rows, MODELS[case["model"]].out, generator=generator, dtype=torch.float64),
        )
        for _ in range(case["steps"])
    ]
    closure = {"never": [False], "always": [True], "alternate": [True, False], "even": [False, True]}[
        case.get("closure", "never")
    ]
    steps = [closure[t % len(closure)] for t in range(case["steps"])]
    return BASE | dict(case) | {"initial": initial, "batches": batches, "closures": steps}


def build(story) -> nn.Module:
    model = MODELS[story["model"]]().double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(story["initial"][name])
    return model


def train(story, make_optimizer, rows: slice) -> tuple:
    """Play the story: per step zero_grad(), forward and backward on `rows` of the batch
    (loss = the mean over them), step() (or step(closure)); then the scheduler or the new group.
    (model, optimizer, {id(param): name}, trace)."""
    model = build(story)
    names = {id(p): name for name, p in model.named_parameters()}
    optimizer = make_optimizer(param_argument(model, story["params"]))
    trace = {"left": [], "params": [], "returned": [], "losses": [], "calls": []}
    if story["idle"]:
        optimizer.step()
        trace["idle"] = {name: p.detach().clone() for name, p in model.named_parameters()}
    for t, (x, y) in enumerate(story["batches"]):
        optimizer.zero_grad()
        left = [names.get(id(p), "?") for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        trace["left"].append(left)
        x, y, calls, losses = x[rows], y[rows], [], []

        def closure():
            loss = F.mse_loss(model(x), y)
            loss.backward()
            calls.append(1)
            losses.append(loss.detach().clone())
            return loss

        if story["closures"][t]:
            returned = optimizer.step(closure)
        else:
            closure()
            calls.clear()  # called here, not by step()
            returned = optimizer.step()
        trace["returned"].append(returned.detach().clone() if isinstance(returned, torch.Tensor) else returned)
        trace["losses"].append(losses[-1] if story["closures"][t] and losses else None)
        trace["calls"].append(len(calls))
        trace["params"].append({name: p.detach().clone() for name, p in model.named_parameters()})
        if story["schedule"]:
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        if story["added"] == t + 1:
            model.head.requires_grad_(True)
            optimizer.add_param_group({"params": list(model.head.parameters()), "lr": HEAD_LR})
    keys = sorted(set(OPTIMIZERS[story["optimizer"]][2]) | {"lr", "weight_decay"})
    trace["groups"] = [
        {"params": [names.get(id(p), "?") for p in g["params"]]} | {k: g.get(k) for k in keys}
        for g in optimizer.param_groups
    ]
    return model, optimizer, names, trace


def state_of(optimizer, names: dict) -> list:
    """[(parameter name, {key: value})] for every parameter `optimizer` holds state for."""
    found = []
    for p, state in optimizer.state.items():
        if state:
            entries = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
            found.append((names.get(id(p), "?"), entries))
    return found


@world_scenario
def trained(kata, stories: list) -> list:
    """On every rank: each story played with the learner's ShardedOptimizer on this rank's rows,
    and what the judge reads of it."""
    rank = dist.get_rank()
    played = []
    for story in stories:
        MADE.clear()
        recording, _, keywords = OPTIMIZERS[story["optimizer"]]
        made = []

        def make(params):
            made.append(kata.ShardedOptimizer(params, recording, **keywords))
            return made[0]

        _, optimizer, names, trace = train(story, make, slice(rank * ROWS, (rank + 1) * ROWS))
        trace["is an Optimizer"] = isinstance(optimizer, torch.optim.Optimizer)
        trace["owned"] = [names.get(id(p), "?") for each in MADE for g in each.param_groups for p in g["params"]]
        trace["state"] = [entry for each in (*MADE, optimizer) for entry in state_of(each, names)]
        MADE.clear()
        played.append(trace)
    return played


def reference_trace(story) -> tuple[dict, dict, dict]:
    """(trace, {name: state}, {name: numel}) of the unsharded optimizer on the whole batch."""
    _, reference, keywords = OPTIMIZERS[story["optimizer"]]
    model, optimizer, names, trace = train(story, lambda params: reference(params, **keywords), slice(None))
    return trace, dict(state_of(optimizer, names)), {name: p.numel() for name, p in model.named_parameters()}


# --------------------------------------------------------------------------- playing the worlds


PLAYED: dict = {}  # (kata, seed, cases, world size) -> each rank's answers: the worlds played so far


def play(kata, cases: list, seed: int):
    """(case, its story, [each rank's trace]) for every case, in the table's order: one world
    per world size, played when the first of its cases comes (a file wrong at the first case
    plays one world, not four). A world that raises (the kata's own error) is played again
    story by story when its cases' turn comes, so the error is told at the case that raises it
    alone, after the cases before it in the table, and diagnosed there. A world that answered
    is kept (PLAYED): the core tests judge the same table from the same seed, its worlds played
    once a grade."""
    prepared = [(case, story_of(case, seed + n)) for n, case in enumerate(cases)]
    table = (id(kata), seed, repr([dict(case) for case in cases]))
    played = {}  # world size -> each rank's answers, or the kata's own error
    for case, story in prepared:
        world = case["world"]
        mine = [(each, its) for each, its in prepared if each["world"] == world]
        if world not in played:
            played[world] = _world(kata, (*table, world), [its for _, its in mine])
        answers = played[world]
        if isinstance(answers, Exception):
            with case.judged(), SPEC.diagnosing(raised_by(story), sizes=case):
                if len(mine) == 1:
                    raise answers
                answers = trained(kata, world, [story])
            yield case, story, [answer[0] for answer in answers]
        else:
            n = next(i for i, (each, _) in enumerate(mine) if each is case)
            yield case, story, [answers[rank][n] for rank in range(world)]


def _world(kata, key: tuple, stories: list):
    """Each rank's answers to `stories`, played in one world of key[-1] ranks (kept in PLAYED);
    the kata's own error where it raised. Anything else (the stub, a refusal, a deadlock)
    raises, plain as it is."""
    try:
        if key not in PLAYED:
            PLAYED[key] = trained(kata, key[-1], stories)
        return PLAYED[key]
    except Exception as error:
        if getattr(error, "kata_error", (None,))[0] != ErrorKind.RAISED:
            raise
        return error


def raised_by(story):
    """A replay for an error: the story played by a known slip (which raises the same, or not)."""

    def replay(implementation):
        trained(implementation, story["world"], [story])
        return {}

    return replay
