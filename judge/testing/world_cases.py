"""A distributed kata's cases, played one world per world size (judge/worlds.py): a world costs
0.1-0.3 s to start, the cases in it next to nothing."""

from __future__ import annotations


def play_by_world(kata, scenario, prepared: list[tuple], batch, spec) -> list[tuple]:
    """(case, its data, [each rank's result for it]) for every (case, data) of `prepared`, in
    its order (the named edge cases first: the first failure is the most telling one), though
    played one world per world size. `scenario(kata, world, [batch(case, data) ...])` is a world
    scenario whose every rank returns one result per case, in order; inside
    `spec.diagnosing`, so what a rank raises is matched against the known slips' own."""
    found: list = [None] * len(prepared)
    for world in sorted({case["world"] for case, _ in prepared}):
        mine = [n for n, (case, _) in enumerate(prepared) if case["world"] == world]
        cases = [batch(*prepared[n]) for n in mine]
        with spec.diagnosing(
            lambda implementation, world=world, cases=cases: {"plays": scenario(implementation, world, cases)}
        ):
            plays = scenario(kata, world, cases)
        for k, n in enumerate(mine):
            found[n] = (*prepared[n], [plays[rank][k] for rank in range(world)])
    return found
