"""Worlds of ranks (judge/worlds.py), the distributed katas' harness: traffic stays on
loopback, a deadlock is a verdict within seconds that names where each rank waits, a world
ends whole, and what a rank raises comes back as its error."""

import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from judge.forbidden import COLLECTIVES, ForbiddenCallError
from judge.paths import SOLUTIONS
from judge.remote.client import KataProcess
from judge.testing.scenarios import world_scenario
from judge.worlds import IDLE_SECONDS, WorldDeadlock

TCP_LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


@world_scenario
def network(kata) -> dict:
    """What a rank sees of the network: its interfaces, and its TCP sockets' local addresses."""
    with open("/proc/net/dev") as devices:
        interfaces = sorted(line.split(":")[0].strip() for line in devices.readlines()[2:])
    addresses = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as sockets:
                addresses += [line.split()[1].split(":")[0] for line in sockets.readlines()[1:]]
        except OSError:
            continue
    return {"interfaces": interfaces, "addresses": addresses, "rank": dist.get_rank()}


@world_scenario
def everyone_sends_first(kata) -> None:
    """The deadlock of the ring kata's fifth slip: a blocking send on every rank, first."""
    rank, size = dist.get_rank(), dist.get_world_size()
    dist.send(torch.ones(4), (rank + 1) % size)
    dist.recv(torch.empty(4), (rank - 1) % size)


@world_scenario
def rank_one_raises(kata) -> None:
    if dist.get_rank() == 1:
        raise ValueError("rank one's own error")
    dist.recv(torch.empty(1), 1)  # waits for rank 1, which never sends


@world_scenario
def all_reduce_anyway(kata) -> None:
    dist.all_reduce(torch.ones(2))


@pytest.fixture(scope="module")
def hosted(request):
    """The ring kata's solution, hosted by a kata process as a grade hosts it (sandboxed worlds)."""
    process = KataProcess(request.config.kata_zygote, mirror_death=False)
    symbols = {"ring_all_reduce": COLLECTIVES}
    kata = process.load(
        str(SOLUTIONS / "ring_all_reduce.py"), "ring_all_reduce", symbols, (__name__, list(sys.path)), world=True
    )
    yield kata
    process.close()


def test_ranks_see_only_loopback_and_bind_only_to_it(hosted):
    for rank, seen in enumerate(network(hosted, 3)):
        assert seen["rank"] == rank
        assert seen["interfaces"] == ["lo"], f"rank {rank} sees {seen['interfaces']}: its network is not its own"
        assert seen["addresses"], f"rank {rank} holds no TCP socket: gloo's connections are missing from the check"
        assert set(seen["addresses"]) <= {TCP_LOOPBACK, "00000000000000000000000001000000"}, seen["addresses"]


@pytest.mark.waits  # seconds of idle ranks, by design
def test_a_deadlock_is_stopped_within_seconds_and_says_where_each_rank_waits(hosted):
    start = time.monotonic()
    with pytest.raises(Exception, match="deadlock: 3 of 3 ranks") as raised:
        everyone_sends_first(hosted, 3)
    assert time.monotonic() - start < IDLE_SECONDS + 8
    assert raised.value.kata_error[0] == "deadlock"


@pytest.mark.waits  # seconds of idle ranks, by design
def test_a_deadlock_in_a_local_world_raises_world_deadlock():
    module = type(sys)("nothing")
    with pytest.raises(WorldDeadlock, match="deadlock: 2 of 2 ranks stopped"):
        everyone_sends_first(module, 2)


def test_a_ranks_error_ends_the_world_and_comes_back_as_that_error(hosted):
    start = time.monotonic()
    with pytest.raises(ValueError, match="rank one's own error"):
        rank_one_raises(hosted, 2)
    assert time.monotonic() - start < IDLE_SECONDS, "the other rank waited for rank 1 until a deadlock was called"


@pytest.mark.waits  # seconds of idle ranks, by design
def test_no_rank_outlives_its_world(hosted):
    """Ranks 0, 2 and 3 still wait for rank 1 when its error ends the world: they go with it,
    as every rank goes when a deadlock is called."""
    host = hosted._process.pid
    with pytest.raises(ValueError, match="rank one's own error"):
        rank_one_raises(hosted, 4)
    assert children(host) == [], "ranks of an ended world are still alive"
    with pytest.raises(Exception, match="deadlock"):
        everyone_sends_first(hosted, 2)
    assert children(host) == [], "ranks of a deadlocked world are still alive"


def children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def test_a_collective_is_refused_in_a_rank(hosted):
    with pytest.raises(ForbiddenCallError, match="dist.all_reduce"):
        all_reduce_anyway(hosted, 2)
