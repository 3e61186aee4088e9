"""The channel between the judging process and the kata process (judge/remote/wire.py):
what the kata process sends is data and nothing else."""

import os
import pickle

import numpy as np
import pytest
import torch

from judge.remote.wire import dump_answer, load_answer


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
