"""Kata【DPO：序列对数概率与 sigmoid 偏好损失】: Direct Preference Optimization (DPO): sequence log-probabilities and the sigmoid loss, as TRL's."""

import torch
import torch.nn.functional as F
from torch import Tensor


def sequence_log_probs(logits: Tensor, labels: Tensor, ignore_index: int = -100) -> Tensor:
    """Return the summed log-probability of each sequence's labels under `logits`, [B].

    A causal language model's logits at position t predict the token at t + 1, so the
    logits and the labels are SHIFTED by one before they are compared:

        log_p  = log_softmax(logits[:, :-1], over the vocabulary)     # (B, T - 1, V)
        result = sum over t of log_p[b, t, labels[b, t + 1]],
                 for every t whose label labels[b, t + 1] != ignore_index

    The first label (labels[:, 0]) is never predicted; the last logits (logits[:, -1])
    predict nothing.

    Shapes and conventions:
        - logits [B, T, V] (B sequences of T positions, a vocabulary of V tokens), labels
          [B, T] of int64 token ids in [0, V), or ignore_index where a position is left out
          (the prompt, the padding): it contributes nothing. ignore_index may be any int (a
          legal token id too); an ignored label is ignore_index itself, which need not be a
          valid index (-100): never index (gather) with it.
        - Returns [B]. V = 1 is allowed (every log-probability is then 0).
        - Logits as large as 1e4 in magnitude are judged: take log-probabilities stably
          (a log-softmax, never log(softmax(...)), whose small probabilities underflow to
          0 and their log to -inf). Errors compatible with float32 arithmetic at the
          logits' magnitude are accepted (for float64 logits too: see the float64
          convention below).
        - dtypes: the result has the logits' dtype; float32 is computed in float32.
        - Gradients flow back to `logits` as autograd through the formula gives them;
          nothing is printed.
        - Every PyTorch function may be used (F.log_softmax, torch.logsumexp, gather,
          F.cross_entropy...).

    Conventions (judged apart from the math, as production code would need them):
        - a sequence with nothing to predict (T = 1, or every shifted label ignored)
          gives 0.
        - float16 and bfloat16 logits are computed in float32 (or better) and the result
          returned in the logits' dtype.
        - the result is on the logits' device.
        - the inputs are never modified.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]])
        >>> sequence_log_probs(logits, torch.tensor([[-100, 1, 0]]))  # log(1/2) + log(e^2 / (e^2 + 1))
        tensor([-0.8201])
    """
    # TODO: half precision is computed in float32, float32 and float64 in their own dtype.
    # TODO: shift: the logits at t predict the label at t + 1 (drop the last logits and the first label).
    # TODO: ignored labels (any value, -100 included) must not be used as indices: replace them first.
    # TODO: log p(label) = its logit - logsumexp over the vocabulary (a log-softmax, gathered at each label).
    # TODO: sum over the kept positions only, and return the logits' dtype.
    raise NotImplementedError


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    reference_chosen_logps: Tensor,
    reference_rejected_logps: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Return (losses, chosen_rewards, rejected_rewards), each [B]: DPO's sigmoid loss, as in
    the DPO paper and TRL's DPOTrainer (loss_type="sigmoid").

    The four inputs are [B] sequence log-probabilities (as sequence_log_probs returns them)
    of B preference pairs: the chosen and the rejected completion under the policy being
    trained (pi_c, pi_r) and under the frozen reference model (ref_c, ref_r). With
    beta > 0 and eps = label_smoothing (0 <= eps < 0.5, conservative DPO):

        z                = (pi_c - pi_r) - (ref_c - ref_r)
        losses           = -logsigmoid(beta * z) * (1 - eps) - logsigmoid(-beta * z) * eps
        chosen_rewards   = beta * (pi_c - ref_c)     DETACHED
        rejected_rewards = beta * (pi_r - ref_r)     DETACHED

    - losses is per pair (no mean): gradients flow back through it to all four inputs
      (the reference ones too, as autograd through the formula gives, when they require
      grad).
    - |beta * z| as large as 1e3 is judged: the losses and their gradients must stay
      finite. log(sigmoid(x)) underflows to log(0) = -inf for x below about -88 (float32)
      or -709 (float64): use F.logsigmoid (or an equally stable form). Errors compatible
      with the dtype's arithmetic at the inputs' magnitude are accepted (z subtracts
      numbers of several hundreds; float32's for float64 inputs too: see the float64
      convention below).
    - dtypes: the four inputs share one dtype and device; the three results have the
      inputs' dtype; float32 is computed in float32.
    - Nothing is printed. Every PyTorch function may be used.

    Conventions (judged apart from the math, as production code would need them):
        - the rewards are for logging only: they must carry no gradient (requires_grad
          False, even when the inputs require grad).
        - float16 and bfloat16 inputs are computed in float32 (or better: z subtracts
          log-probabilities of hundreds, whose differences bfloat16 rounds by up to a
          unit) and the results returned in their dtype.
        - the three results are on the inputs' device.
        - the inputs are never modified.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> losses, chosen, rejected = dpo_loss(
        ...     torch.tensor([-10.0]), torch.tensor([-20.0]), torch.tensor([-12.0]), torch.tensor([-18.0]))
        >>> losses, chosen, rejected  # z = 10 - 6 = 4: -logsigmoid(0.4)
        (tensor([0.5130]), tensor([0.2000]), tensor([-0.2000]))
    """
    # TODO: half precision is computed in float32, float32 and float64 in their own dtype.
    # TODO: z: the policy's log-ratio of chosen over rejected, minus the reference's.
    # TODO: the sigmoid loss with label smoothing, written with a stable log-sigmoid.
    # TODO: the implicit rewards, detached: they are logged, never trained through.
    raise NotImplementedError
