"""Toleration arithmetic the admission plugins share: superset, merge, allow-lists."""

from __future__ import annotations


def is_superset(ss: dict, t: dict) -> bool:
    """Whether toleration SS tolerates every taint T tolerates."""
    if ss == t:
        return True
    ss_key, ss_op = ss.get("key", ""), ss.get("operator") or "Equal"
    if t.get("key", "") != ss_key and (ss_key != "" or ss_op != "Exists"):
        return False  # only an empty key with Exists matches every key
    if t.get("effect", "") != ss.get("effect", "") and ss.get("effect", ""):
        return False  # an empty effect matches every effect
    if ss.get("effect") == "NoExecute" and ss.get("tolerationSeconds") is not None:
        if t.get("tolerationSeconds") is None or t["tolerationSeconds"] > ss["tolerationSeconds"]:
            return False
    if ss_op == "Equal":
        return (t.get("operator") or "Equal") == "Equal" and t.get("value", "") == ss.get("value", "")
    return ss_op == "Exists"


def merge(first: list[dict], second: list[dict]) -> list[dict]:
    """Both lists in one, dropping a toleration another one kept already covers."""
    everything = list(first) + list(second)
    merged: list[dict] = []
    for i, t in enumerate(everything):
        if any(is_superset(m, t) for m in merged):
            continue
        if any(t != later and is_superset(later, t) for later in everything[i + 1 :]):
            continue
        merged.append(t)
    return merged


def allowed_by(tolerations: list[dict], allow: list[dict]) -> bool:
    """Whether every toleration is covered by one of the allow-list's."""
    if not allow or not tolerations:
        return True
    return all(any(is_superset(w, t) for w in allow) for t in tolerations)


def add_or_update(tolerations: list[dict], toleration: dict) -> list[dict]:
    """TOLERATIONS with TOLERATION in it: one equal by key, operator, value and effect is
    replaced, else it is added (upstream's AddOrUpdateTolerationInPod)."""

    def same(a: dict, b: dict) -> bool:
        return all(a.get(f, "") == b.get(f, "") for f in ("key", "operator", "value", "effect"))

    out, updated = [], False
    for t in tolerations:
        if same(toleration, t):
            out.append(dict(toleration))
            updated = True
        else:
            out.append(t)
    if not updated:
        out.append(dict(toleration))
    return out
