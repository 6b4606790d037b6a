"""Merging the hint providers' answers into one NUMA affinity, as upstream's policies do.

Every provider's answer becomes one list per resource (no answer at all or ``None``:
one preferred "any" hint; an empty list: one non-preferred "any" hint). The cross
product of those lists is walked; each combination merges into the intersection of
its NUMA sets (preferred only when every member is preferred and all name the same
set); empty intersections are dropped. The best merged hint is a preferred one if
any, the narrowest among those; among non-preferred ones the one whose size comes
closest, from below, to the largest of the providers' narrowest sets. With nothing
left the result is every NUMA node, not preferred.

``single-numa-node`` first keeps only preferred hints that are "any" or one node,
and reports a best hint equal to all nodes as "any".
"""

from __future__ import annotations

import itertools
from typing import Iterable, Sequence

from ..topology import Hints, TopologyHint

__all__ = ["filter_provider_hints", "merge_hints", "narrowest"]


def filter_provider_hints(providers: Iterable[Hints]) -> list[list[TopologyHint]]:
    out: list[list[TopologyHint]] = []
    for hints in providers:
        if not hints:
            out.append([TopologyHint(None, True)])
            continue
        for resource in sorted(hints):
            lst = hints[resource]
            if lst is None:
                out.append([TopologyHint(None, True)])
            elif len(lst) == 0:
                out.append([TopologyHint(None, False)])
            else:
                out.append(list(lst))
    return out


def _mask_key(mask: frozenset[int]) -> int:
    return sum(1 << n for n in mask)


def narrowest(a: frozenset[int], b: frozenset[int]) -> frozenset[int]:
    """Fewer nodes wins; between equal sizes the lower bit mask."""
    if len(a) != len(b):
        return a if len(a) < len(b) else b
    return a if _mask_key(a) <= _mask_key(b) else b


def _merge_permutation(default: frozenset[int], perm: Sequence[TopologyHint]) -> TopologyHint:
    preferred = True
    affinities: list[frozenset[int]] = []
    for hint in perm:
        if hint.numa_affinity is not None:
            affinities.append(hint.numa_affinity)
            if hint.numa_affinity != affinities[0]:
                preferred = False
        if not hint.preferred:
            preferred = False
    merged = default
    for a in affinities:
        merged = merged & a
    return TopologyHint(frozenset(merged), preferred)


def _min_affinity_of(hints: list[TopologyHint]) -> int:
    sizes = [len(h.numa_affinity) for h in hints if h.numa_affinity is not None]
    if not sizes:
        return 0
    best: frozenset[int] | None = None
    for h in hints:
        if h.numa_affinity is None:
            continue
        best = h.numa_affinity if best is None else narrowest(best, h.numa_affinity)
    return len(best) if best is not None else 0


def _fitter(current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
    assert current.numa_affinity is not None and candidate.numa_affinity is not None
    if candidate.numa_affinity == current.numa_affinity:
        return current
    best = narrowest(current.numa_affinity, candidate.numa_affinity)
    return current if best == current.numa_affinity else candidate


def _compare(current: TopologyHint | None, candidate: TopologyHint, best_non_preferred: int) -> TopologyHint | None:
    cand = len(candidate.numa_affinity or ())
    if cand == 0:
        return current
    if current is None:
        return candidate
    if not current.preferred and candidate.preferred:
        return candidate
    if current.preferred and not candidate.preferred:
        return current
    if current.preferred and candidate.preferred:
        return _fitter(current, candidate)
    cur = len(current.numa_affinity or ())
    if cur > best_non_preferred:
        return _fitter(current, candidate)
    if cur == best_non_preferred:
        return current if cand != best_non_preferred else _fitter(current, candidate)
    if cand > best_non_preferred:
        return current
    if cand == best_non_preferred:
        return candidate
    if cand > cur:
        return candidate
    if cand < cur:
        return current
    return _fitter(current, candidate)


def _best(nodes: frozenset[int], filtered: list[list[TopologyHint]]) -> TopologyHint:
    best_non_preferred = max((_min_affinity_of(h) for h in filtered), default=0)
    best: TopologyHint | None = None
    for perm in itertools.product(*filtered):
        best = _compare(best, _merge_permutation(nodes, perm), best_non_preferred)
    return best if best is not None else TopologyHint(nodes, False)


def merge_hints(policy: str, numa_nodes: Iterable[int], providers: Iterable[Hints]) -> tuple[TopologyHint, bool]:
    """(best hint, admit) under ``policy`` (``best-effort``, ``restricted``, ``single-numa-node``)."""
    nodes = frozenset(numa_nodes)
    filtered = filter_provider_hints(providers)
    if policy == "single-numa-node":
        filtered = [
            [h for h in lst if h.preferred and (h.numa_affinity is None or len(h.numa_affinity) == 1)]
            for lst in filtered
        ]
        best = _best(nodes, filtered)
        if best.numa_affinity == nodes:
            best = TopologyHint(None, best.preferred)
        return best, best.preferred
    best = _best(nodes, filtered)
    if policy == "restricted":
        return best, best.preferred
    return best, True
