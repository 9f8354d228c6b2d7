"""How the compare_* scripts report interleaved rounds: each side's median with every round's
figure, then lockstep over each reference as the median of the per-round ratios with their range
(never each side's best round: a shared VM's slow and fast minutes fall on both sides of a round).

    import rounds
    ok = rounds.report(per, mine=["lockstep"], refs=["torch", "tf"])

per maps a name to one figure per round (None where that run gave none; higher is faster). For a
round, lockstep's figure is the best of `mine` (its configurations, e.g. one device and replicas)."""

from __future__ import annotations

import statistics


def _spread(v: list[float]) -> str:
    return f"{statistics.median(v):6.2f}x (range {min(v):.2f}-{max(v):.2f})" if v else "n/a"


def per_round_ratios(per: dict, mine: list[str], den) -> list[float]:
    """lockstep's best of `mine` over den(round), for each round where both are there."""
    out = []
    for r in range(len(per[mine[0]])):
        ours = [per[k][r] for k in mine if per[k][r] is not None]
        d = den(r)
        if ours and d:
            out.append(max(ours) / d)
    return out


def report(per: dict, mine: list[str], refs: list[str], unit: str = "steps/s") -> bool:
    """Prints the figures and ratios; True when every run of every round gave a figure."""
    ok = True
    for k, v in per.items():
        got = [x for x in v if x is not None]
        ok &= len(got) == len(v)
        every = ", ".join("-" if x is None else f"{x:.2f}" for x in v)
        print(f"  {k:20s} " + (f"{statistics.median(got):10.2f} {unit} (rounds: {every})" if got else "unavailable"))
    who = "lockstep" if len(mine) == 1 else "lockstep best"
    for ref in refs:
        print(f"  {who + '/' + ref:30s} {_spread(per_round_ratios(per, mine, lambda r, ref=ref: per[ref][r]))}")
    if len(refs) > 1:
        def best(r):
            got = [per[k][r] for k in refs if per[k][r] is not None]
            return max(got) if got else None
        name = f"{who}/max({','.join(refs)})"
        print(f"  {name:30s} {_spread(per_round_ratios(per, mine, best))}")
    return ok
