"""The channel between the judging process and the kata process (judge/remote/wire.py):
what the kata process sends is data and nothing else."""

import os
import pickle

import numpy as np
import pytest
import torch

from judge.remote import wire
from judge.remote.wire import MAX_DEPTH, WireError, dump_answer, load_answer


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def test_an_answer_that_would_run_code_is_refused():
    payload = pickle.dumps({"storages": [], "body": RunsCode()})
    with pytest.raises(pickle.UnpicklingError, match="not data"):
        load_answer(payload)


def test_tensors_cross_with_their_views_strides_and_dtypes():
    base = torch.arange(12.0).reshape(3, 4)
    sent = {
        "base": base,
        "view": base[:, 1::2],
        "half": torch.ones(2, dtype=torch.bfloat16),
        "meta": torch.empty(2, 3, device="meta"),
    }
    got = load_answer(dump_answer(sent))
    assert torch.equal(got["view"], base[:, 1::2]) and got["view"].stride() == (4, 2)
    assert got["view"].untyped_storage().data_ptr() == got["base"].untyped_storage().data_ptr()
    assert got["half"].dtype == torch.bfloat16 and got["meta"].is_meta and got["meta"].shape == (2, 3)


def test_numbers_from_numpy_arrive_as_python_numbers():
    got = load_answer(dump_answer((np.float64(2.5), np.int64(3), torch.float16, torch.Size([2]), slice(1, None))))
    assert got == (2.5, 3, torch.float16, torch.Size([2]), slice(1, None))
    assert type(got[0]) is float and type(got[1]) is int


def test_lazily_negated_and_conjugated_tensors_cross_with_their_values():
    """x.conj() and torch._neg_view(x) keep the un-negated values in their storage (issue 21)."""
    z = torch.tensor([1 + 2j, 3 - 4j])
    y = torch.tensor([1.0, -2.0])
    got = load_answer(dump_answer({"conj": z.conj(), "neg": torch._neg_view(y)}))
    assert torch.equal(got["conj"], z.conj().resolve_conj()) and not got["conj"].is_conj()
    assert torch.equal(got["neg"], -y)


def test_a_tensor_the_wire_cannot_carry_is_refused_with_what_to_return():
    with pytest.raises(WireError, match="sparse_coo tensor cannot be judged: return a dense tensor"):
        dump_answer(torch.eye(2).to_sparse())


def test_an_answer_nested_too_deep_or_too_wide_is_refused(monkeypatch):
    # the same budget, smaller: the real one (MAX_VALUES) is spent rebuilding 4M values first (3.7 s)
    monkeypatch.setattr(wire, "MAX_VALUES", 1 << 12)
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(WireError, match="nests deeper"):
        load_answer(dump_answer(deep))
    wide: list = [0, 1]
    for _ in range(40):  # 2**40 values by reference, a few hundred bytes pickled
        wide = [wide, wide]
    with pytest.raises(WireError, match="more than"):
        load_answer(pickle.dumps({"storages": [], "body": wide}))
