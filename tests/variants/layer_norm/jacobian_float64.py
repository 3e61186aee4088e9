"""Variant of layer_norm (correct): every dtype computed in float64 (torch.var_mean), the
backward through each row's N x N Jacobian of x_hat, built explicitly and applied with bmm."""

import torch


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    dims = [x.dim() - i for i in range(1, len(normalized_shape) + 1)]
    xd = x.double()
    var, mean = torch.var_mean(xd, dim=dims, correction=0, keepdim=True)
    y = (xd - mean) / (var + eps).sqrt()
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype)


def layer_norm_backward(grad_output, x, normalized_shape, weight=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    n_dims = len(normalized_shape)
    N = 1
    for size in normalized_shape:
        N *= size
    xd = x.double().reshape(-1, N)  # (R, N)
    g = grad_output.double().reshape(-1, N)
    var, mean = torch.var_mean(xd, dim=1, correction=0, keepdim=True)
    rstd = (var + eps).rsqrt()  # (R, 1)
    xhat = (xd - mean) * rstd  # (R, N)
    eye = torch.eye(N, dtype=torch.float64, device=x.device)
    # d xhat_i / d x_j = rstd * (delta_ij - 1/N - xhat_i * xhat_j / N)
    jac = rstd[:, :, None] * (eye - 1.0 / N - xhat[:, :, None] * xhat[:, None, :] / N)  # (R, N, N)
    gxhat = g if weight is None else g * weight.double().reshape(1, N)
    gx = torch.bmm(gxhat[:, None, :], jac)[:, 0, :]  # (R, N): row vector times the Jacobian
    grad_input = gx.reshape(x.shape).to(x.dtype)
    if weight is None:
        return grad_input, None, None
    grad_weight = torch.einsum("rn,rn->n", g, xhat).reshape(x.shape[x.dim() - n_dims :])
    grad_bias = torch.einsum("rn->n", g).reshape(x.shape[x.dim() - n_dims :])
    return grad_input, grad_weight.to(weight.dtype), grad_bias.to(weight.dtype)
