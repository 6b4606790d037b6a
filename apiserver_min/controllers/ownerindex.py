"""Cheap routing of pod and revision events to the sets that own or may adopt them.

Informer handlers run inside the watch cache's fan-out, on every write of their
kind, so they read what the cache already parsed (an entry's owners and labels)
instead of decoding the object, and parse each set's selector once per version.
"""

from __future__ import annotations

from typing import Iterator

from ..api.helpers import dict_at
from ..api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from ..client.informer import Informer
from ..storage.cacher import Entry


def owner_keys(entry: Entry, kind: str) -> list[str]:
    """``namespace/name`` of each ``apps`` owner of kind ``kind`` the object names."""
    return [
        f"{entry.namespace}/{name}"
        for _uid, api_version, owner_kind, name in entry.owners
        if owner_kind == kind and str(api_version).startswith("apps/")
    ]


class SelectorCache:
    """The parsed ``spec.selector`` of each set of one informer, by resource version."""

    def __init__(self, sets: Informer):
        self.sets = sets
        self._cache: dict[str, tuple[int, LabelSelector | None]] = {}

    def selector(self, entry: Entry) -> LabelSelector | None:
        """None when the selector is malformed."""
        cached = self._cache.get(entry.key)
        if cached is not None and cached[0] == entry.rv:
            return cached[1]
        try:
            sel: LabelSelector | None = label_selector_from_dict(dict_at(entry.object(), "spec").get("selector"))
        except SelectorError:
            sel = None
        if len(self._cache) > 4 * max(len(self.sets), 64):
            self._cache.clear()
        self._cache[entry.key] = (entry.rv, sel)
        return sel

    def matching(self, namespace: str, labels: dict) -> Iterator[str]:
        """``namespace/name`` of the sets whose selector matches ``labels``."""
        for e in self.sets.list(namespace):
            sel = self.selector(e)
            if sel is not None and sel.matches(labels):
                yield f"{e.namespace}/{e.name}"


def claim_candidates(informer: Informer, namespace: str, owner_uid: str, selector: LabelSelector) -> list[dict]:
    """The objects of ``namespace`` a claim by the owner ``owner_uid`` can concern: those it
    owns and the orphans its selector matches, found through the informer's indexes;
    the rest are not decoded."""
    return [e.object() for e in informer.claimable(namespace, owner_uid, selector)]
