"""A distributed kata's cases, played one world per world size (judge/worlds.py): a world costs
0.1-0.3 s to start, the cases in it next to nothing."""

from __future__ import annotations


def play_by_world(kata, scenario, prepared: list[tuple], batch, spec) -> list[tuple]:
    """(case, its data, [each rank's result for it]) for every (case, data) of `prepared`, world
    sizes in increasing order. `scenario(kata, world, [batch(case, data) ...])` is a world
    scenario whose every rank returns one result per case, in order; inside
    `spec.diagnosing`, so what a rank raises is matched against the known slips' own."""
    found = []
    for world in sorted({case["world"] for case, _ in prepared}):
        mine = [(case, data) for case, data in prepared if case["world"] == world]
        cases = [batch(case, data) for case, data in mine]
        with spec.diagnosing(
            lambda implementation, world=world, cases=cases: {"plays": scenario(implementation, world, cases)}
        ):
            plays = scenario(kata, world, cases)
        found += [(case, data, [plays[rank][n] for rank in range(world)]) for n, (case, data) in enumerate(mine)]
    return found
