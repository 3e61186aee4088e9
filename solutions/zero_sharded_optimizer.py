"""Kata【ZeRO-1 优化器状态分片】: ZeRO stage 1, the optimizer state sharded over the ranks."""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


class ShardedOptimizer(torch.optim.Optimizer):
    """Data-parallel training where each rank keeps the optimizer state of its own parameters only.

    ZeRO stage 1 (Rajbhandari et al. 2020; torch.distributed.optim.ZeroRedundancyOptimizer does
    the same). Called on every rank of an initialised default process group (torch.distributed,
    gloo backend, world size N >= 1: dist.get_rank(), dist.get_world_size()), with the same
    model on every rank (same parameters, same order, same values). Each rank runs forward and
    backward on its own micro-batch (all the same size, loss = the mean over the micro-batch),
    then calls step(). Afterwards every rank holds exactly the parameters that the unsharded
    `optimizer_cls`, stepped on the whole batch (every rank's micro-batch), would give, while
    each parameter's optimizer state (AdamW's exp_avg and exp_avg_sq, SGD's momentum_buffer)
    lives on one rank only: about 1/N of it per rank.

    ShardedOptimizer(params, optimizer_cls, **kwargs):
        params: what torch.optim.Optimizer accepts: an iterable of tensors (model.parameters(),
            a list), or of dicts (parameter groups: {"params": [...], "lr": ...}).
        optimizer_cls: the optimizer each rank runs on the parameters it owns (torch.optim.AdamW,
            torch.optim.SGD, or a subclass of one).
        kwargs: its defaults (lr, betas, weight_decay, momentum, ...); a group's own keys
            override them.
    Call super().__init__(params, kwargs): self.param_groups then lists EVERY parameter of
    EVERY group on EVERY rank (groups in the order given, missing keys filled from kwargs), so a
    learning-rate scheduler can write self.param_groups[i]["lr"]. The base constructor calls
    self.add_param_group(group) once per group: do the sharding there, and set up whatever it
    needs BEFORE calling super().__init__.

    add_param_group(group) (at construction, and later by the user: a frozen layer unfrozen):
    - every parameter of the group (frozen ones too: requires_grad may be turned on later) gets
      one owner rank, the same on every rank without any communication. Balanced: give each
      parameter to the rank that owns the fewest elements so far (numel; ties to the lower
      rank), taking the group's parameters largest first; the loads carry over from group to
      group, groups added later included. (Judged as a bound: every rank owns at most
      total numel / N + the largest parameter's numel. Index round robin does not meet it, nor
      loads that restart at each group.)
    - the parameters this rank owns go to a local optimizer_cls, with their group's
      hyperparameters (every key of the group but "params": the group's own, and kwargs for the
      rest): one optimizer_cls(owned, **hyperparameters) per group, say, or one optimizer with
      a group per group. It works on the model's Parameter objects themselves (no flat copies:
      the judge reads each optimizer_cls instance's .state and .param_groups). A rank that owns
      nothing in a group makes nothing for it (optimizer_cls([]) raises ValueError "optimizer
      got an empty parameter list"), and still takes part in every collective. The optimizer
      state lives in these local optimizers alone: keep nothing in self.state (the base's dict).

    step(closure=None), on every rank, in this order:
    1. closure given: `with torch.enable_grad(): loss = closure()`, once, before anything else
       (the closure runs forward and backward on this rank's micro-batch);
    2. average the gradients over the ranks: every parameter whose .grad is not None (the same
       ones on every rank) gets the mean of the ranks' gradients, at least on its owner
       (dist.all_reduce(grad, op=dist.ReduceOp.SUM) then / N; or dist.reduce to the owner);
    3. copy every hyperparameter (every key but "params") of self.param_groups[i] into the local
       optimizer's group for it, so that a change of self.param_groups[i]["lr"] takes effect;
    4. each local optimizer steps (optimizer state is created for owned parameters only; a
       parameter whose .grad is None is skipped by optimizer_cls itself: no state, no change);
    5. every parameter is sent from its owner to every rank: dist.broadcast(p.data, src=owner),
       or an all-gather of the owners' shards (dist.all_gather_single: torch 2.13 warns on
       all_gather_into_tensor); afterwards every rank holds the same values;
    6. return the closure's loss (None without a closure).
    zero_grad(): the base class's (set_to_none=True) over self.param_groups, so every
    parameter's .grad is None afterwards, owned or not (gradients that are not cleared are
    added to at the next backward, and averaged again).
    Collectives (dist.all_reduce, reduce, broadcast, all_gather) on the tensors' own dtype (the
    judge's models are float64, compared within 1e-9). torch.distributed.optim
    (ZeroRedundancyOptimizer), FSDP, DTensor and torch.distributed._shard are off limits: the
    point is to write the sharding yourself. state_dict() is not asked for.

    Conventions:
        - params may be any iterable torch.optim.Optimizer accepts, a generator such as
          model.parameters() included (read it once).
        - step(closure) calls the closure once and returns its loss; step() returns None.
        - step() with no gradient at all (before the first backward, or every parameter frozen)
          changes nothing and raises nothing.

    Example (2 ranks, the same model on each):
        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=0.1, weight_decay=0.1)
        opt.zero_grad()
        F.mse_loss(model(x[4 * rank : 4 * rank + 4]), y[4 * rank : 4 * rank + 4]).backward()
        opt.step()  # = torch.optim.AdamW on the loss of all 8 rows, on both ranks
    """

    def __init__(self, params, optimizer_cls: type[torch.optim.Optimizer], **kwargs: Any):
        ### BEGIN SOLUTION
        # TODO: remember the rank, the world size, the optimizer class and its kwargs; the
        # TODO: owner of each parameter, each rank's load, and the local optimizers (one per
        # TODO: group, or None where this rank owns nothing in it). Then super().__init__.
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.owner: dict[Tensor, int] = {}
        self.loads = [0] * self.world  # elements owned by each rank, over every group so far
        self.locals: list[tuple[dict, torch.optim.Optimizer | None]] = []  # (group, its local optimizer)
        super().__init__(params, kwargs)  # calls add_param_group for each group
        ### END SOLUTION

    def add_param_group(self, param_group: dict) -> None:
        ### BEGIN SOLUTION
        # TODO: let the base class check and complete the group (it appends it to param_groups).
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        # TODO: owners: largest parameter first, to the least-loaded rank (ties to the lower rank).
        for p in sorted(group["params"], key=lambda p: p.numel(), reverse=True):
            rank = min(range(self.world), key=lambda r: self.loads[r])
            self.owner[p] = rank
            self.loads[rank] += p.numel()
        # TODO: a local optimizer for the parameters this rank owns, with the group's hyperparameters.
        owned = [p for p in group["params"] if self.owner[p] == self.rank]
        hyperparameters = {key: value for key, value in group.items() if key != "params"}
        local = self.optimizer_cls(owned, **hyperparameters) if owned else None
        self.locals.append((group, local))
        ### END SOLUTION

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        ### BEGIN SOLUTION
        # TODO: the closure first, with gradients on.
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"]]
        # TODO: average the gradients over the ranks.
        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                p.grad.div_(self.world)
        # TODO: copy the hyperparameters in, and step the local optimizers.
        for group, local in self.locals:
            if local is not None:
                local.param_groups[0].update({key: value for key, value in group.items() if key != "params"})
                local.step()
        # TODO: every parameter from its owner to every rank.
        for p in params:
            dist.broadcast(p.data, src=self.owner[p])
        return loss
        ### END SOLUTION
