"""The learner's code in a process of its own.

The judging process (pytest with the kata's tests, its references, comparisons, diagnosis
and results writer) never imports the learner's file. The kata process does, with what the
kata forbids removed and inside a sandbox (judge.sandbox), and runs the tests' scenarios on it
(`server`); the judging process hands the tests a handle that sends scenarios there
(`client`). Only tensors and plain data cross (`wire`), and what the kata process sends is
read by an unpickler that refuses every class and function. Kata processes are forked by a
small fork server (`zygote`) started before the judging process runs any tensor operation.
"""
