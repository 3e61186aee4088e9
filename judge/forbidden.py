"""What a kata may not call (the very thing it asks you to write), removed for good from the
kata process before the learner's file is imported.

The kata process never needs the implementations a kata forbids: the references run in the
judging process. So `remove(rules, ...)` takes them out of the process, and nothing the kata
can import or patch brings them back:
- every aten operator whose name contains one of the rules' substrings (every overload; the
  siblings and composites that compute the same thing are listed in the rules: group_norm
  for layer norm, the flash kernels' logsumexp for softmax) gets, at the dispatcher, for each
  dispatch key it has a kernel for, a kernel that records the offence and raises. Every way
  of reaching an operator meets it: Python, TorchScript, custom ops, tensor subclasses,
  callbacks, threads, forked children, torch.compile's tracing. The registrations are held by
  the dispatcher alone (no Python object the kata can reach can undo them);
- the Python entry points that compose allowed operators (nn.MultiheadAttention's forward,
  generate_square_subsequent_mask) have their code replaced by a refusal, so every reference
  to them, one taken at import included, refuses;
- for the backward katas, autograd: grad mode off for good (turning it on refuses; no thread
  can be started, see judge/sandbox.py), the engine and torch.func's transforms refuse.
Each refusal is recorded for the process (TRIPPED), so one the kata swallows still fails its
test. A static scan refuses, at load, the names that reach around the process (re-running
PyTorch's own Python source, ctypes, the interpreter's internals): no kata needs them. What
is not detected: a kata that copies PyTorch's Python source into its own file.
"""

from __future__ import annotations

import ast
import functools
import importlib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from judge.language import tr, tr_data


class ForbiddenCallError(Exception):
    """The kata called something its task forbids. The grader's verdict: forbidden."""


# (owner, attribute, the name shown to the learner); an owner is a module name, or
# "module:Class" (imported only when the rules are applied: the rules pickle by name).
Site = tuple[str, str, str]


@dataclass(frozen=True)
class Rules:
    # substrings of operator names: removed, every overload; "c10d::send" names another
    # namespace than aten (torch.distributed's communication operators live in c10d)
    operators: tuple[str, ...] = ()
    python: tuple[Site, ...] = ()  # Python functions whose code is replaced by a refusal
    autograd: bool = False  # autograd removed: grad mode off for good, no engine, no torch.func
    modules: tuple[str, ...] = ()  # "module:Class" a kata's module may not contain (check_structure)
    why: str = ""
    # False where the judge traces the kata's calls (a dispatch mode is thread-local: a thread
    # would hide what it computes): the sandbox refuses new threads (judge/sandbox.py)
    threads: bool = True

    def __add__(self, other: Rules) -> Rules:
        return Rules(
            self.operators + other.operators,
            self.python + other.python,
            self.autograd or other.autograd,
            self.modules + other.modules,
            "; ".join(dict.fromkeys(why for rules in (self, other) for why in rules.why.split("; ") if why)),
            self.threads and other.threads,
        )


NONE = Rules()

_LAYERS = ("TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder")
# Every PyTorch implementation of attention, under every name: the operators (the fused
# kernels and their flash/efficient/math/cuDNN variants, the native MHA), and the Python code
# of the modules that compose allowed operators into attention.
ATTENTION = Rules(
    operators=(
        "scaled_dot_product",
        "flash_attention",
        "efficient_attention",
        "_fused_sdp",
        "cudnn_attention",
        "multi_head_attention",
        "_transformer_encoder_layer_fwd",
        "_native_multi_head_attention",
    ),
    python=(
        ("torch.nn.functional", "multi_head_attention_forward", "F.multi_head_attention_forward"),
        ("torch.nn:MultiheadAttention", "forward", "nn.MultiheadAttention.forward"),
        ("torch.nn:Transformer", "forward", "nn.Transformer.forward"),
        ("torch.ao.nn.quantizable:MultiheadAttention", "forward", "torch.ao.nn.quantizable.MultiheadAttention"),
        ("torch.ao.nn.quantizable:MultiheadAttention", "_forward_impl", "torch.ao.nn.quantizable.MultiheadAttention"),
        *(
            (f"torch.nn:{layer}", method, f"nn.{layer}.{method}")
            for layer in _LAYERS
            for method in ("forward", "_sa_block", "_mha_block", "_ff_block")
            if hasattr(getattr(torch.nn, layer), method)
        ),
    ),
    modules=tuple(f"torch.nn:{layer}" for layer in ("MultiheadAttention", "Transformer", *_LAYERS)),
    why="this kata asks you to write attention yourself",
)
# flex_attention: its Python entry point, and the eager kernels of its higher-order operator
# (a HigherOrderOperator, no aten operator to remove), for the katas that write a masked
# attention (a sliding window is one mask_mod away from it).
SLIDING_WINDOW_ATTENTION = ATTENTION + Rules(
    python=(
        ("torch.nn.attention.flex_attention", "flex_attention", "torch.nn.attention.flex_attention.flex_attention"),
        ("torch._higher_order_ops.flex_attention", "sdpa_dense", "torch.nn.attention.flex_attention.flex_attention"),
        (
            "torch._higher_order_ops.flex_attention",
            "math_attention",
            "torch.nn.attention.flex_attention.flex_attention",
        ),
    ),
    why="this kata asks you to write attention yourself",
)
_ENGINE = "autograd (torch.autograd.grad, .backward(), torch.func or grad mode)"
AUTOGRAD = Rules(
    operators=("_backward", "_make_dual"),  # autograd's kernels (softmax_backward_data & co), forward-mode AD
    autograd=True,
    why="this kata asks you to derive the gradients by hand",
)
CAUSAL_MASK = Rules(
    python=(
        ("torch.nn:Transformer", "generate_square_subsequent_mask", "nn.Transformer.generate_square_subsequent_mask"),
        (
            "torch.nn.modules.transformer",
            "_generate_square_subsequent_mask",
            "nn.Transformer.generate_square_subsequent_mask",
        ),
        ("torch.nn.attention.bias:CausalBias", "_materialize", "torch.nn.attention.bias.causal_upper_left"),
        ("torch.nn.attention.bias:CausalBias", "_upper_left", "torch.nn.attention.bias.causal_upper_left"),
        ("torch.nn.attention.bias:CausalBias", "_lower_right", "torch.nn.attention.bias.causal_lower_right"),
    ),
    why="this kata asks you to build that mask yourself",
)
RMS_NORM = Rules(
    operators=("rms_norm",),
    python=(("torch.nn:RMSNorm", "forward", "nn.RMSNorm.forward"),),
    modules=("torch.nn:RMSNorm",),
    why="this kata asks you to write RMSNorm yourself",
)
# The softmax under every name, and the kernels that return it or its log-normaliser (the
# flash attention kernels' logsumexp).
SOFTMAX = Rules(
    operators=("softmax", "logsumexp", "scaled_dot_product", "flash_attention", "efficient_attention"),
    why="this kata asks you to write the (log-)softmax yourself",
)
CROSS_ENTROPY = SOFTMAX + Rules(
    operators=("nll_loss", "cross_entropy", "multilabel_soft_margin", "kl_div"),
    why="this kata asks you to write the cross-entropy yourself",
)
# GELU and SiLU under every name (F.gelu, nn.GELU and Tensor methods reach the aten operators;
# the backward kernels too); torch.erf, torch.tanh and torch.sigmoid stay allowed.
ACTIVATIONS = Rules(
    operators=("gelu", "silu"),
    why="this kata asks you to write GELU and SiLU yourself",
)
# The KL divergence: F.kl_div and nn.KLDivLoss reach the operator; torch.distributions' KL
# is Python over allowed operators, so its entry point is replaced.
KL_DIVERGENCE = Rules(
    operators=("kl_div",),
    python=(("torch.distributions.kl", "kl_divergence", "torch.distributions.kl.kl_divergence"),),
    why="this kata asks you to write the KL divergence yourself",
)
# BatchNorm under every name: F.batch_norm, torch.batch_norm and nn.BatchNorm* reach the
# aten operators (native, cudnn, miopen, the sync-BN kernels); instance norm computes it over
# another axis. The modules are refused inside the kata's own module (check_structure).
BATCH_NORM = Rules(
    operators=("batch_norm", "instance_norm"),
    modules=("torch.nn:BatchNorm1d", "torch.nn:BatchNorm2d", "torch.nn:BatchNorm3d", "torch.nn:SyncBatchNorm"),
    why="this kata asks you to write batch norm yourself",
)
# Adam and AdamW: the optimizers' steps (AdamW inherits Adam's: torch.optim.AdamW(...).step()
# and a subclass of it refuse), their functional forms (torch.optim._functional.adam/adamw are
# the same functions) and the fused kernels (the operator substring covers _fused_adam_ and
# _fused_adamw_, every overload). torch.optim.Optimizer itself (param_groups, state,
# state_dict, zero_grad) and the torch._foreach_* arithmetic stay allowed: a kata needs them.
ADAMW = Rules(
    operators=("_fused_adam",),
    python=(
        ("torch.optim:Adam", "step", "torch.optim.Adam.step"),
        ("torch.optim:AdamW", "step", "torch.optim.AdamW.step"),
        ("torch.optim.adam", "adam", "torch.optim.adam.adam"),
        ("torch.optim.adam", "_single_tensor_adam", "torch.optim.adam.adam"),
        ("torch.optim.adam", "_multi_tensor_adam", "torch.optim.adam.adam"),
        ("torch.optim.adam", "_fused_adam", "torch.optim.adam.adam"),
        ("torch.optim.adamw", "adamw", "torch.optim.adamw.adamw"),
    ),
    why="this kata asks you to write AdamW yourself",
)
# The warmup-cosine schedule: torch's schedulers that compute a cosine or a warmup for you
# (their chainable get_lr and their closed forms; SequentialLR's step, which hands over from
# one to the next), and transformers' schedule lambdas where transformers is installed (it is
# no dependency: a site whose module does not import is skipped when the rules are applied).
# LambdaLR, LRScheduler itself and math stay allowed: a correct solution needs them.
_TORCH_SCHEDULES = "torch.optim.lr_scheduler"
_TRANSFORMERS_SCHEDULES = (
    "_get_cosine_schedule_with_warmup_lr_lambda",  # get_cosine_schedule_with_warmup, ..._with_min_lr_...
    "_get_cosine_with_min_lr_schedule_with_warmup_lr_rate_lambda",
    "_get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda",
    "_get_linear_schedule_with_warmup_lr_lambda",
    "_get_wsd_scheduler_lambda",
)
LR_SCHEDULE = Rules(
    python=(
        *(
            (f"{_TORCH_SCHEDULES}:{cls}", method, f"{_TORCH_SCHEDULES}.{cls}")
            for cls, methods in (
                ("CosineAnnealingLR", ("get_lr", "_get_closed_form_lr")),
                ("CosineAnnealingWarmRestarts", ("get_lr", "step")),
                ("LinearLR", ("get_lr", "_get_closed_form_lr")),
                ("OneCycleLR", ("get_lr",)),
                ("SequentialLR", ("step",)),
            )
            for method in methods
        ),
        *(
            ("transformers.optimization", name, "transformers.get_cosine_schedule_with_warmup")
            for name in _TRANSFORMERS_SCHEDULES
        ),
    ),
    why="this kata asks you to write the learning-rate schedule yourself",
)
# Gradient clipping by norm (and by value): torch.nn.utils' helpers, under every name they
# are re-exported by. Each is a `_no_grad` wrapper (a closure: its code cannot change), and
# torch.nn.utils binds the wrappers themselves, so the function each one wraps (`__wrapped__`)
# has its code replaced: every name of a wrapper, and the wrapped function, then refuse. The
# module attributes are replaced too (torch versions without the wrapper). The clipping
# primitives (torch.linalg.vector_norm, torch._foreach_norm, torch._foreach_mul_) stay allowed.
_CLIPPING = (
    ("clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
    ("clip_grad_value_", "torch.nn.utils.clip_grad_value_"),
    ("_get_total_norm", "torch.nn.utils.get_total_norm"),
    ("_clip_grads_with_norm_", "torch.nn.utils.clip_grads_with_norm_"),
)
GRAD_CLIPPING = Rules(
    python=(
        *((f"torch.nn.utils.clip_grad:{name}", "__wrapped__", shown) for name, shown in _CLIPPING),
        *(("torch.nn.utils.clip_grad", name, shown) for name, shown in _CLIPPING),
        ("torch.nn.utils.clip_grad", "clip_grad_norm", "torch.nn.utils.clip_grad_norm"),
    ),
    why="this kata asks you to accumulate and clip the gradients yourself",
)
# Dynamic loss scaling: GradScaler under every name (torch.amp's; torch.cuda.amp's and
# torch.cpu.amp's subclasses construct through its __init__, so refusing that refuses them all),
# its methods (a reference taken before construction), and its two kernels, which
# FSDP's ShardedGradScaler also reaches. torch.isfinite, mul_ and torch._foreach_mul_ stay allowed.
LOSS_SCALING = Rules(
    operators=("_amp_foreach_non_finite_check_and_unscale", "_amp_update_scale"),
    python=tuple(
        ("torch.amp.grad_scaler:GradScaler", method, "torch.amp.GradScaler")
        for method in ("__init__", "scale", "unscale_", "step", "update", "_unscale_grads_", "_maybe_opt_step")
    ),
    why="this kata asks you to write dynamic loss scaling yourself",
)
# Beam search: transformers' own, where it is installed (it is no dependency: a site whose module
# does not import is skipped): the vectorized _beam_search (>= 4.50) and its helpers, and the
# BeamSearchScorer and BeamHypotheses of older releases. torch.topk and sorting stay allowed.
_HF_BEAM_HELPERS = (
    "_beam_search",
    "_get_top_k_continuations",
    "_get_running_beams_for_next_iteration",
    "_update_finished_beams",
    "_beam_search_has_unfinished_sequences",
)
BEAM_SEARCH = Rules(
    python=(
        *(
            ("transformers.generation.utils:GenerationMixin", name, "transformers GenerationMixin._beam_search")
            for name in _HF_BEAM_HELPERS
        ),
        *(
            ("transformers.generation.beam_search:BeamSearchScorer", name, "transformers.BeamSearchScorer")
            for name in ("__init__", "process", "finalize")
        ),
        ("transformers.generation.beam_search:BeamHypotheses", "add", "transformers BeamHypotheses"),
    ),
    why="this kata asks you to write beam search yourself",
)
# Every collective of torch.distributed, at torch's communication operators (namespace c10d):
# dist.all_reduce and the others, a process group's own methods, torch.distributed.nn's autograd
# functions, the object collectives and the functional collectives all reach them (and the
# functional ones are removed whole). Point-to-point stays (send, recv_), and so does the barrier;
# a receive from any source is refused (the ring names its peer). No thread may be started: the
# judge counts messages with a dispatch mode, which a thread would leave.
COLLECTIVES = Rules(
    operators=(
        "c10d::allreduce",
        "c10d::gather",  # allgather_, _allgather_base_, allgather_into_tensor_coalesced_, gather_
        "c10d::scatter",  # scatter_, reduce_scatter_ and its variants
        "c10d::reduce",
        "c10d::broadcast",
        "c10d::alltoall",
        "c10d::recv_any_source",
        "_c10d_functional::",
        "_c10d_functional_autograd::",
    ),
    threads=False,
    why="this kata asks you to build the all-reduce from sends and receives (each rank naming its peer)",
)
# Tensor parallelism done for you: DTensor's entry points and torch.distributed.nn's autograd-aware
# collectives (Python over dist.all_reduce & co, which the kata may call), and the functional
# collectives at their operators. dist.all_reduce and dist.all_gather stay: the kata wraps them
# in its own autograd Functions. No thread may be started: the judge counts collectives.
_DIST_NN = ("all_reduce", "all_gather", "_all_gather_base", "reduce_scatter", "broadcast", "reduce", "all_to_all")
TENSOR_PARALLEL = Rules(
    operators=("_c10d_functional::", "_c10d_functional_autograd::"),
    python=(
        *(("torch.distributed.nn.functional", name, f"torch.distributed.nn.functional.{name}") for name in _DIST_NN),
        ("torch.distributed.tensor", "distribute_tensor", "torch.distributed.tensor.distribute_tensor"),
        ("torch.distributed.tensor:DTensor", "from_local", "torch.distributed.tensor.DTensor.from_local"),
        (
            "torch.distributed.tensor.parallel",
            "parallelize_module",
            "torch.distributed.tensor.parallel.parallelize_module",
        ),
    ),
    threads=False,
    why="this kata asks you to write the tensor-parallel operators yourself",
)
# Optimizer-state sharding done for you: torch.distributed.optim (ZeroRedundancyOptimizer, its
# methods too, which a subclass or an unbound call reaches; the other distributed optimizers),
# FSDP (FullyShardedDataParallel and fully_shard: the function a @contract wrapper wraps, so
# every alias refuses), DTensor's entry points, torch.distributed._composable's replicate and
# torch.distributed._shard (its own ShardedOptimizer, sharded tensors). Refused where they are
# called, never where they are loaded: torch._dynamo imports fsdp, tensor and _composable, and
# the first torch.optim.AdamW(...) imports torch._dynamo. The collectives stay allowed.
_ZERO_METHODS = (
    "__init__",
    "add_param_group",
    "step",
    "_local_step",
    "_partition_parameters",
    "_partition_param_group",
    "_sync_params",
    "_broadcast_params_from_rank",
    "_sync_param_groups",
    "_init_local_optimizer",
    "consolidate_state_dict",
    "load_state_dict",
    "state_dict",
)
_OPTIM, _FSDP, _SHARD = "torch.distributed.optim", "torch.distributed.fsdp", "torch.distributed._shard"
ZERO_SHARDING = Rules(
    python=(
        *((f"{_OPTIM}:ZeroRedundancyOptimizer", m, f"{_OPTIM}.ZeroRedundancyOptimizer") for m in _ZERO_METHODS),
        (f"{_OPTIM}:PostLocalSGDOptimizer", "__init__", f"{_OPTIM}.PostLocalSGDOptimizer"),
        (f"{_OPTIM}:_NamedOptimizer", "__init__", f"{_OPTIM}._NamedOptimizer"),
        (f"{_OPTIM}.optimizer:DistributedOptimizer", "__init__", f"{_OPTIM}.DistributedOptimizer"),
        (f"{_OPTIM}.apply_optimizer_in_backward", "_apply_optimizer_in_backward", f"{_OPTIM}.apply_in_backward"),
        (f"{_FSDP}:FullyShardedDataParallel", "__init__", f"{_FSDP}.FullyShardedDataParallel"),
        (f"{_FSDP}._fully_shard._fully_shard:fully_shard", "__wrapped__", f"{_FSDP}.fully_shard"),
        ("torch.distributed.tensor._api", "distribute_tensor", "torch.distributed.tensor.distribute_tensor"),
        ("torch.distributed.tensor._api", "distribute_module", "torch.distributed.tensor.distribute_module"),
        ("torch.distributed.tensor._api:DTensor", "from_local", "torch.distributed.tensor.DTensor.from_local"),
        ("torch.distributed._composable.replicate:replicate", "__wrapped__", "torch.distributed._composable.replicate"),
        (f"{_SHARD}.sharded_optim:ShardedOptimizer", "__init__", f"{_SHARD}.sharded_optim.ShardedOptimizer"),
        (f"{_SHARD}.sharded_optim:ShardedOptimizer", "step", f"{_SHARD}.sharded_optim.ShardedOptimizer"),
        (f"{_SHARD}.api", "shard_parameter", f"{_SHARD}.shard_parameter"),
        (f"{_SHARD}.api", "_shard_tensor", f"{_SHARD}.shard_parameter"),
        (f"{_SHARD}.api", "shard_module", f"{_SHARD}.shard_module"),
    ),
    why="this kata asks you to shard the optimizer state yourself",
)
# Layer norm, and the norms that compute it over another axis (group_norm with one group,
# batch or instance norm of a reshaped input).
LAYER_NORM = Rules(
    operators=("layer_norm", "group_norm", "batch_norm", "instance_norm"),
    python=(("torch.nn:LayerNorm", "forward", "nn.LayerNorm.forward"),),
    why="this kata asks you to write the layer norm yourself",
)

# Names that reach around the process: re-running PyTorch's own Python source (reload, exec),
# another interpreter, raw memory, the interpreter's internals. No kata needs them.
ESCAPE_HATCHES = (
    "importlib",
    "reload",
    "runpy",
    "ctypes",
    "cffi",
    "__builtins__",
    "builtins",
    "__subclasses__",
    "__closure__",
    "__globals__",
    "__code__",
    "subprocess",
    "multiprocessing",
    "judge",  # the grader's own package: nothing in it is for the kata
)
# Builtins refused as plain names only: model.eval() and torch.compile stay allowed.
_BUILTIN_CALLS = ("exec", "eval", "compile", "__import__")


def scan_escape_hatches(path: Path) -> list[tuple[int, str]]:
    """(line, name) for each escape-hatch name the file mentions (attribute, import or name)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []  # the import itself reports these
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [part for alias in node.names for part in alias.name.split(".")]
            names += (node.module or "").split(".") if isinstance(node, ast.ImportFrom) else []
        hatches = ESCAPE_HATCHES + (_BUILTIN_CALLS if isinstance(node, ast.Name) else ())
        found += [(node.lineno, name) for name in names if name in hatches]
    return sorted(found)


def refuse_escape_hatches(path: Path) -> None:
    hatches = scan_escape_hatches(path)
    if hatches:
        line, name = hatches[0]
        raise ForbiddenCallError(
            f"{path.name} uses {name} (line {line}), which reaches around the grader's checks; no kata needs it"
        )


# --------------------------------------------------------------------------- refusals


TRIPPED: list[str] = []  # every refusal in this process, in order: what a swallowed one leaves
_context = {"kata": "the kata", "file": "", "why": ""}


def trips() -> int:
    """How many refusals this process has seen; `TRIPPED[n:]` are those since `n`."""
    return len(TRIPPED)


def _where() -> str:
    """' (at kata.py, line 12)': the innermost line of the kata's file on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        if _context["file"] and frame.f_code.co_filename == _context["file"]:
            return tr(" (at {file}, line {line})", file=Path(_context["file"]).name, line=frame.f_lineno)
        frame = frame.f_back
    return ""


def refuse(shown: str = "", *, action: str = "", _tr=tr, _tr_data=tr_data, _where=_where):
    """Record the refusal of a call of `shown` (or of what `action` says the kata did) and
    raise it, naming the kata's line that led there; in the learner's language. Its helpers
    are bound here, like refuse in the kernels: a kata that replaces the module's functions
    changes nothing of a refusal."""
    message = _tr(
        "{kata} {action}{where}, which is not allowed: {why}",
        kata=_context["kata"],
        action=action or _tr("calls {shown}", shown=_tr_data(shown)),  # a name, or what _ENGINE says
        where=_where(),
        why=_tr("; ").join(_tr_data(why) for why in _context["why"].split("; ")),
    )
    TRIPPED.append(message)
    raise ForbiddenCallError(message)


def _refusing_kernel(shown: str):
    # refuse is bound here: a kata that replaces judge.forbidden.refuse (reaching the module
    # through sys.modules) changes how a refusal is told, never whether the operator runs.
    def kernel(*args, _refuse=refuse, _error=ForbiddenCallError, **kwargs):
        _refuse(shown)
        raise _error(shown)

    return kernel


def _refused(*args, **kwargs):
    """The code every removed Python function runs: its message is the constant below."""
    raise __import__("judge.forbidden", fromlist=["refuse"]).refuse("§shown")


# --------------------------------------------------------------------------- removal


def remove(rules: Rules, *, kata: str, kata_file: str) -> None:
    """Take what `rules` forbid out of this process, for good (see the module docstring)."""
    _context.update(kata=kata, file=kata_file, why=rules.why, modules=rules.modules)
    if rules.operators:
        _remove_operators(rules.operators)
    for owner, attribute, shown in rules.python:
        _remove_python(owner, attribute, shown)
    if rules.autograd:
        _remove_autograd()


def _remove_operators(substrings: tuple[str, ...]) -> None:
    """A refusing kernel for every key of every aten operator whose name has a substring, on a
    dispatcher library whose only reference is dropped: the registrations live on, unreachable."""
    libraries = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        for operator, keys in _operators(substrings):
            namespace, _, name = operator.rpartition("::")
            if namespace not in libraries:
                libraries[namespace] = torch._C._dispatch_library("IMPL", namespace or "aten", "", "", 0)
            kernel = _refusing_kernel(public_name(operator))
            for key in keys:
                try:
                    libraries[namespace].impl(name, key, kernel, False)
                except RuntimeError:  # a key that takes no direct kernel (Meta of a composite)
                    continue
    for library in libraries.values():
        _leak(library)


def _operators(substrings: tuple[str, ...]) -> list[tuple[str, tuple]]:
    """(aten operator with its overload, the dispatch keys it has a kernel for) for each one
    whose name has one of the substrings, each operator once."""
    found = {}
    for substring in substrings:
        found.update(_operators_with(substring))
    return list(found.items())


@functools.cache
def _all_operators() -> tuple[str, ...]:
    return tuple(torch._C._dispatch_get_all_op_names())


# The keys whose kernels compute: every backend and the composite kernels. The others
# (autograd, autocast, functionalization, functorch's batching) wrap a call and pass it down
# to one of these, where the refusal is waiting.
_KEYS = (
    "CPU",
    "CUDA",
    "Meta",
    "MPS",
    "XPU",
    "HPU",
    "PrivateUse1",
    "SparseCPU",
    "SparseCUDA",
    "SparseMeta",
    "SparseCsrCPU",
    "SparseCsrCUDA",
    "SparseCsrMeta",
    "NestedTensorCPU",
    "NestedTensorCUDA",
    "NestedTensorMeta",
    "NestedTensorHPU",
    "QuantizedCPU",
    "QuantizedCUDA",
    "MkldnnCPU",
    "CompositeImplicitAutograd",
    "CompositeImplicitAutogradNestedTensor",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)


@functools.cache
def _operators_with(substring: str) -> dict[str, tuple]:
    """{operator: its dispatch keys with a kernel} for the operators whose name has `substring`
    (aten's: "softmax"; another namespace's: "c10d::allreduce", named "c10d::allreduce_"):
    the same for every kata, so worked out once per process (prepare())."""
    keys = [getattr(torch._C.DispatchKey, k) for k in _KEYS if hasattr(torch._C.DispatchKey, k)]
    namespace, _, substring = substring.rpartition("::")
    prefix = f"{namespace or 'aten'}::"
    found = {}
    for full in _all_operators():
        if full.startswith(prefix) and substring in full[len(prefix) :]:
            with_kernel = []
            for key in keys:
                try:
                    if torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
                        with_kernel.append(key)
                except RuntimeError:
                    continue
            found[full[6:] if prefix == "aten::" else full] = tuple(with_kernel)
    return found


# The public names of the operators a learner reaches (what a refusal names): aten name -> name.
_PUBLIC = {
    "scaled_dot_product_attention": "F.scaled_dot_product_attention",
    "softmax": "torch.softmax",
    "_softmax": "torch.softmax",
    "_safe_softmax": "torch.softmax",
    "log_softmax": "torch.log_softmax",
    "_log_softmax": "torch.log_softmax",
    "special_softmax": "torch.special.softmax",
    "special_log_softmax": "torch.special.log_softmax",
    "logsumexp": "torch.logsumexp",
    "layer_norm": "F.layer_norm",
    "native_layer_norm": "F.layer_norm",
    "group_norm": "F.group_norm",
    "native_group_norm": "F.group_norm",
    "batch_norm": "F.batch_norm",
    "native_batch_norm": "F.batch_norm",
    "instance_norm": "F.instance_norm",
    "rms_norm": "F.rms_norm",
    "_fused_rms_norm": "F.rms_norm",
    "cross_entropy_loss": "F.cross_entropy",
    "nll_loss": "F.nll_loss",
    "nll_loss_nd": "F.nll_loss",
    "nll_loss2d": "F.nll_loss",
    "kl_div": "F.kl_div",
    "_native_multi_head_attention": "torch._native_multi_head_attention",
    "c10d::allreduce_": "dist.all_reduce",
    "c10d::allreduce_coalesced_": "dist.all_reduce_coalesced",
    "c10d::allgather_": "dist.all_gather",
    "c10d::_allgather_base_": "dist.all_gather_into_tensor",
    "c10d::reduce_scatter_": "dist.reduce_scatter",
    "c10d::_reduce_scatter_base_": "dist.reduce_scatter_tensor",
    "c10d::reduce_": "dist.reduce",
    "c10d::broadcast_": "dist.broadcast",
    "c10d::alltoall_": "dist.all_to_all",
    "c10d::alltoall_base_": "dist.all_to_all_single",
    "c10d::scatter_": "dist.scatter",
    "c10d::gather_": "dist.gather",
    "c10d::recv_any_source_": "dist.recv without a source (src=None)",
}


def public_name(operator: str) -> str:
    """How a refusal names an operator ("softmax.int", "c10d::allreduce_"): its public name
    where it has one."""
    namespace, _, name = operator.rpartition("::")
    base = name.split(".")[0]
    return _PUBLIC.get(base if not namespace else operator.split(".")[0]) or f"torch.ops.{namespace or 'aten'}.{base}"


def _leak(value) -> None:
    """Keep `value` alive with no Python reference to it (an extra count held by nobody)."""
    import ctypes  # noqa: PLC0415 - the judge's own use; the kata's is refused by the scan

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))


def _resolve(owner: str):
    module, _, name = owner.partition(":")
    found = importlib.import_module(module)
    return functools.reduce(getattr, name.split("."), found) if name else found


def _remove_python(owner: str, attribute: str, shown: str) -> None:
    """The function's code replaced by a refusal, so every reference to it refuses."""
    try:
        holder = _resolve(owner)
    except (ImportError, AttributeError):
        return
    raw = vars(holder).get(attribute) if isinstance(holder, type) else getattr(holder, attribute, None)
    function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if function is None or not hasattr(function, "__code__"):
        return
    code = _refused.__code__
    code = code.replace(
        co_consts=tuple(shown if c == "§shown" else c for c in code.co_consts),
        co_name=function.__code__.co_name,
        co_qualname=function.__code__.co_qualname,
    )
    if function.__code__.co_freevars:  # a closure's code cannot change: replace the attribute
        setattr(
            holder, attribute, staticmethod(_with_code(code)) if isinstance(raw, staticmethod) else _with_code(code)
        )
    else:
        function.__code__ = code


def _with_code(code):
    import types  # noqa: PLC0415

    return types.FunctionType(code, {"__builtins__": __builtins__})


def _replace_everywhere(replacements: dict) -> None:
    """Every attribute of torch's modules bound to one of the originals (id -> (original,
    replacement)), bound to its replacement instead: `from torch._C import X` included. (Modules
    imported later, the kata's among them, get the replacement from where they import it.)"""
    index, indexed = _binding_index()
    spots = [spot for key in replacements for spot in index.get(key, ())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated module attributes warn when looked at
        for name, module in list(sys.modules.items()):
            if name not in indexed and _is_torch(name):  # loaded since the index was made
                spots += [(vars(module), key) for key, value in list(vars(module).items()) if id(value) in replacements]
    for namespace, name in spots:
        found = replacements.get(id(namespace.get(name)))
        if found is not None and namespace.get(name) is found[0]:
            namespace[name] = found[1]


def _is_torch(module_name: str) -> bool:
    return module_name == "torch" or module_name.startswith("torch.")


@functools.cache
def _binding_index() -> tuple[dict, frozenset]:
    """({id(value): [(module namespace, name)]} for the callables autograd's removal replaces,
    over torch's modules loaded now; their names): made once, in the warm process (prepare())."""
    wanted = {id(value) for value in _autograd_originals()}
    index: dict[int, list] = {}
    modules = [(name, module) for name, module in list(sys.modules.items()) if _is_torch(name)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, module in modules:
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict):
                for key, value in list(namespace.items()):
                    if id(value) in wanted:
                        index.setdefault(id(value), []).append((namespace, key))
    return index, frozenset(name for name, _ in modules)


def _autograd_originals() -> list:
    functorch = torch._C._functorch
    names = ("_grad_increment_nesting", "_jvp_increment_nesting", "_vjp_increment_nesting")
    return [getattr(torch._C, n) for n in _AUTOGRAD_C] + [getattr(functorch, n) for n in names if hasattr(functorch, n)]


_AUTOGRAD_C = ("_set_grad_enabled", "_InferenceMode", "_ImperativeEngine")


def prepare_rules(rules: Rules) -> None:
    """Work out which operators `rules` remove, and import the modules whose functions they
    replace (torch.distributed.optim: 0.5 s), here, before forking the processes that remove them."""
    _operators(rules.operators)
    for owner, _, _ in rules.python:
        try:
            _resolve(owner)
        except (ImportError, AttributeError):
            continue


def prepare() -> None:
    """Work out, once, which operators each rule set removes (the same for every kata): done in
    the warm process that forks the kata processes, which then only register."""
    for rules in (ATTENTION, AUTOGRAD, CAUSAL_MASK, RMS_NORM, SOFTMAX, CROSS_ENTROPY, LAYER_NORM):
        _operators(rules.operators)
    _binding_index()


class _RefusingEngine:
    """Stands where autograd's engine was."""

    def __getattr__(self, name):
        refuse(_ENGINE)

    def __call__(self, *args, **kwargs):
        refuse(_ENGINE)


class _NoInferenceMode:
    """Stands for torch._C._InferenceMode: grad mode is already off for good, so inference mode
    changes nothing (inference_mode(False) would otherwise turn grad mode on)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _set_grad_enabled(mode: bool) -> None:
    """Where torch._C._set_grad_enabled was: off is where it stays."""
    if mode:
        refuse(action=tr("turns autograd on (torch.enable_grad() or grad mode)"))


def _remove_autograd() -> None:
    """Grad mode off for good in this (single-threaded) process; the engine, torch.func's
    transforms and forward-mode AD refusing; no original kept anywhere."""
    torch._C._set_grad_enabled(False)
    engine = _RefusingEngine()
    named = dict(zip(_AUTOGRAD_C, (_set_grad_enabled, _NoInferenceMode, engine)))
    replacements = {}
    for original in _autograd_originals():
        replacement = named.get(getattr(original, "__name__", "")) or _refusing_kernel(_ENGINE)
        replacements[id(original)] = (original, replacement)
    _replace_everywhere(replacements)
    torch.autograd.variable.Variable._execution_engine = engine
    for owner, attribute in (
        ("torch.autograd", "grad"),
        ("torch.autograd", "backward"),
        ("torch.autograd.graph", "_engine_run_backward"),
        ("torch:Tensor", "backward"),
        *(("torch._functorch.eager_transforms", name) for name in _FUNCTORCH),
    ):
        _remove_python(owner, attribute, _ENGINE)


_FUNCTORCH = ("grad_impl", "grad_and_value_impl", "vjp", "jvp", "jacrev", "jacfwd", "linearize", "hessian")


def check_structure(module) -> None:
    """Refuse a module of the kata's that contains one of the modules its rules name (an
    nn.MultiheadAttention inside an attention kata's layer): the delegation is refused where
    the module is built, before a name or a value is compared."""
    classes = tuple(_resolve(name) for name in _context.get("modules", ()))
    for name, child in module.named_modules() if classes else ():
        if isinstance(child, classes):
            where = f"self.{name}" if name else tr("itself")
            refuse(action=tr("contains an nn.{name} ({where})", name=type(child).__name__, where=where))


def union(symbols: dict[str, Rules]) -> Rules:
    """Every rule of every public symbol: what the kata process removes."""
    return functools.reduce(lambda a, b: a + b, symbols.values(), NONE)
