"""A distributed kata's cases, played one world per world size (judge/worlds.py): a world costs
0.1-0.3 s to start, the cases in it next to nothing."""

from __future__ import annotations

from collections.abc import Iterator


def play_by_world(kata, scenario, prepared: list[tuple], batch, spec) -> Iterator[tuple]:
    """(case, its data, [each rank's result for it]) for every (case, data) of `prepared`, in
    its order (the named edge cases first: the first failure is the most telling one), though
    played one world per world size, each when the first of its cases comes: a file wrong at
    the first case plays one world, not four. `scenario(kata, world, [batch(case, data) ...])`
    is a world scenario whose every rank returns one result per case, in order; inside
    `spec.diagnosing`, so what a rank raises is matched against the known slips' own."""
    played: dict = {}  # world size -> {index in prepared: [each rank's result]}
    for n, (case, data) in enumerate(prepared):
        world = case["world"]
        if world not in played:
            mine = [k for k, (each, _) in enumerate(prepared) if each["world"] == world]
            cases = [batch(*prepared[k]) for k in mine]
            with spec.diagnosing(
                lambda implementation, world=world, cases=cases: {"plays": scenario(implementation, world, cases)}
            ):
                plays = scenario(kata, world, cases)
            played[world] = {k: [plays[rank][i] for rank in range(world)] for i, k in enumerate(mine)}
        yield case, data, played[world][n]
