"""Variant of attention_function (correct): einsum, an additive causal bias, and only the
gradients that ctx.needs_input_grad asks for."""

import torch


class AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None):
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        scores = torch.einsum("...le,...se->...ls", query, key) * scale
        if is_causal:
            L, S = scores.shape[-2:]
            scores = scores + torch.full((L, S), float("-inf"), dtype=scores.dtype, device=scores.device).triu(1)
        p = scores.softmax(dim=-1)
        ctx.save_for_backward(query, key, value, p)
        ctx.scale = scale
        return torch.einsum("...ls,...sv->...lv", p, value)

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, p = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        d_q = d_k = d_v = None
        if need_v:
            d_v = torch.einsum("...ls,...lv->...sv", p, grad_output)
        if need_q or need_k:
            d_p = torch.einsum("...lv,...sv->...ls", grad_output, value)
            d_s = p * (d_p - (d_p * p).sum(dim=-1, keepdim=True))
            if need_q:
                d_q = torch.einsum("...ls,...se->...le", d_s, key) * ctx.scale
            if need_k:
                d_k = torch.einsum("...ls,...le->...se", d_s, query) * ctx.scale
        return d_q, d_k, d_v, None, None
