"""The learner's code in a process of its own.

The judging process (pytest with the kata's tests, its references, comparisons, diagnosis
and results writer) never imports the learner's file. The kata process does, under the
forbidden-call guard, and serves the tests' calls over a socket (`server`); the judging
process sees the kata through proxies (`client`): functions and classes that call across,
and mirrors of the objects the kata builds (modules with their parameters and buffers,
caches with their tensors), kept in step before and after each call (`tensors`). Only
tensors and plain data cross (`wire`), and what the kata process sends is read by an
unpickler that refuses every class and function. Kata processes are forked by a small
fork server (`zygote`) started before the judging process runs any tensor operation.
"""
