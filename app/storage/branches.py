"""A conversation's messages as a tree: which path it shows, and what a deletion takes with it.

Pure functions over ``Node``s (id, the id it follows, whether it is the active version there), so
that the rule is one place and testable without a database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Node:
    id: int
    parent_id: int | None    # None: a first message
    active: bool             # the version shown among those following the same message


def children(nodes: Iterable[Node]) -> dict[int | None, list[Node]]:
    """Each message's followers, oldest first (their ids' order: versions are numbered so)."""
    kids: dict[int | None, list[Node]] = {}
    for node in sorted(nodes, key=lambda n: n.id):
        kids.setdefault(node.parent_id, []).append(node)
    return kids


def active_path(nodes: Iterable[Node]) -> list[tuple[Node, int, int]]:
    """(node, its version from 1, how many versions) along the active versions from the first
    message. Where none of the versions is marked active (never written so, but a database can be
    edited by hand) the newest is taken, so the path never stops short of its messages."""
    kids = children(nodes)
    path: list[tuple[Node, int, int]] = []
    parent: int | None = None
    seen: set[int] = set()
    while parent in kids:
        versions = kids[parent]
        chosen = next((n for n in reversed(versions) if n.active), versions[-1])
        if chosen.id in seen:   # a cycle (only a hand-edited file has one): stop rather than loop
            break
        seen.add(chosen.id)
        path.append((chosen, versions.index(chosen) + 1, len(versions)))
        parent = chosen.id
    return path


def subtree(nodes: Iterable[Node], root: int) -> list[int]:
    """``root`` and every message following it, on every branch."""
    kids = children(nodes)
    found, todo = {root: None}, [root]   # a dict: ordered, and a cycle is met once
    while todo:
        for node in kids.get(todo.pop(), ()):
            if node.id not in found:
                found[node.id] = None
                todo.append(node.id)
    return list(found)
