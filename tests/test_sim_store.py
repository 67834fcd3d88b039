"""The sim's object store: resourceVersion, conflicts, finalizers, graceful delete, watch."""

from __future__ import annotations

import asyncio

import pytest

from sim.store import (
    NAMESPACES,
    NODECLAIMS,
    PODS,
    AlreadyExists,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    Store,
)


@pytest.fixture
def store() -> Store:
    s = Store(history_limit=5)
    s.create(NAMESPACES, {"metadata": {"name": "ns"}})
    return s


def pod(name: str = "p", **meta: object) -> dict[str, object]:
    return {
        "metadata": {"name": name, **meta},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def test_every_write_takes_the_next_resource_version_and_names_are_generated(store: Store) -> None:
    first = store.create(PODS, {"metadata": {"generateName": "web-"}, "spec": {}}, "ns")
    name = first["metadata"]["name"]
    assert name.startswith("web-") and len(name) == len("web-") + 5
    assert first["metadata"]["uid"] and first["metadata"]["creationTimestamp"]
    second = store.mutate(PODS, "ns", name, lambda o: o["metadata"].update(labels={"a": "b"}))
    assert (
        int(second["metadata"]["resourceVersion"]) == int(first["metadata"]["resourceVersion"]) + 1
    )
    with pytest.raises(Invalid):
        store.create(PODS, {"metadata": {}}, "ns")
    with pytest.raises(AlreadyExists):
        store.create(PODS, {"metadata": {"name": name}}, "ns")
    with pytest.raises(NotFound):
        store.create(PODS, pod(), "missing-namespace")


def test_stale_update_is_a_conflict_and_status_is_a_subresource(store: Store) -> None:
    created = store.create(PODS, pod(), "ns")
    stale = dict(created, status={"phase": "Running"})
    store.mutate(PODS, "ns", "p", lambda o: o["metadata"].update(labels={"x": "y"}))
    with pytest.raises(Conflict):
        store.update(PODS, stale)
    current = store.get(PODS, "ns", "p")
    current["status"] = {"phase": "Running"}
    updated = store.update(PODS, current)
    assert updated["status"] == {}, "a main-resource update ignores status"
    with pytest.raises(Conflict, match='on pods "p": the object has been modified'):
        store.update(PODS, current, subresource="status")
    updated["status"] = {"phase": "Running"}
    assert store.update(PODS, updated, subresource="status")["status"] == {"phase": "Running"}


def test_finalizers_hold_deletion_until_the_last_one_is_removed(store: Store) -> None:
    claim = {"metadata": {"name": "nc", "finalizers": ["karpenter.sh/termination"]}, "spec": {}}
    store.create(NODECLAIMS, claim)
    marked = store.delete(NODECLAIMS, None, "nc")
    assert marked["metadata"]["deletionTimestamp"]
    assert store.get(NODECLAIMS, None, "nc")
    store.mutate(NODECLAIMS, None, "nc", lambda o: o["metadata"].update(finalizers=[]))
    with pytest.raises(NotFound):
        store.get(NODECLAIMS, None, "nc")


def test_bound_pods_are_deleted_gracefully_and_unbound_ones_at_once(store: Store) -> None:
    store.create(PODS, pod("unbound"), "ns")
    store.delete(PODS, "ns", "unbound")
    with pytest.raises(NotFound):
        store.get(PODS, "ns", "unbound")
    bound = pod("bound")
    bound["spec"] = {"nodeName": "n1", "containers": []}
    uid = store.create(PODS, bound, "ns")["metadata"]["uid"]
    with pytest.raises(Conflict):
        store.delete(PODS, "ns", "bound", precondition_uid="someone-else")
    marked = store.delete(PODS, "ns", "bound", precondition_uid=uid)
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    store.force_remove(PODS, "ns", "bound")
    with pytest.raises(NotFound):
        store.get(PODS, "ns", "bound")


async def test_watch_replays_from_a_resource_version_and_maps_selector_changes(
    store: Store,
) -> None:
    start = store.resource_version
    store.create(PODS, pod("a", labels={"team": "x"}), "ns")
    store.mutate(PODS, "ns", "a", lambda o: o["metadata"].update(labels={"team": "y"}))
    store.mutate(PODS, "ns", "a", lambda o: o["metadata"].update(labels={"team": "x"}))
    watcher = store.watch(
        PODS, None, start, lambda o: o["metadata"].get("labels", {}).get("team") == "x"
    )
    seen = [await anext(watcher) for _ in range(3)]
    # Leaving the selection is DELETED, coming back is ADDED (the apiserver's cacher).
    assert [e.type for e in seen] == ["ADDED", "DELETED", "ADDED"]
    # The DELETED event carries the previous object (still labelled team=x), stamped with
    # the resourceVersion of the change that made it leave (cache_watcher.go).
    leaving = seen[1].obj
    assert leaving["metadata"]["labels"] == {"team": "x"}
    assert leaving["metadata"]["resourceVersion"] == str(start + 2)
    assert store.get(PODS, "ns", "a")["metadata"]["labels"] == {"team": "x"}
    watcher.close()


async def test_watch_from_a_compacted_resource_version_is_gone(store: Store) -> None:
    start = store.resource_version
    for i in range(7):  # history_limit is 5
        store.create(PODS, pod(f"p{i}"), "ns")
    with pytest.raises(Gone):
        store.watch(PODS, None, start)
    recent = store.resource_version - 1
    assert (await anext(store.watch(PODS, None, recent))).type == "ADDED"


async def test_slow_watcher_is_closed_instead_of_growing_without_bound() -> None:
    store = Store(watch_queue_limit=3)
    store.create(NAMESPACES, {"metadata": {"name": "ns"}})
    watcher = store.watch(PODS, None, store.resource_version)
    for i in range(5):
        store.create(PODS, pod(f"p{i}"), "ns")
    assert watcher.closed
    events = [e async for e in watcher]
    assert len(events) == 3


async def test_wait_changed_does_not_lose_a_write_made_before_waiting(store: Store) -> None:
    seen = store.resource_version
    store.create(PODS, pod(), "ns")  # e.g. a controller's own write during its pass
    assert await store.wait_changed(5, since=seen) is True
    assert await store.wait_changed(0.01, since=store.resource_version) is False
    waiter = asyncio.create_task(store.wait_changed(5))
    await asyncio.sleep(0)  # a yield: the waiter starts waiting
    store.create(PODS, pod("q"), "ns")
    assert await waiter is True


async def test_wait_changed_for_some_kinds_sleeps_through_writes_to_others(store: Store) -> None:
    """A scheduler waits for pod and node writes only; an Event or a NodeClaim write in
    between does not wake it, and the pod write after them does."""
    waiter = asyncio.create_task(store.wait_changed(5, kinds=(PODS,)))
    await asyncio.sleep(0)  # a yield: the waiter starts waiting
    witness = asyncio.create_task(store.wait_changed(5))  # any write wakes it
    await asyncio.sleep(0)
    store.create(NAMESPACES, {"metadata": {"name": "other"}})
    # The write woke both; the witness, woken second, has returned: the waiter would have.
    assert await witness is True
    assert not waiter.done()
    store.create(PODS, pod("r"), "ns")
    assert await waiter is True
    seen = store.resource_version
    store.create(NAMESPACES, {"metadata": {"name": "third"}})
    assert await store.wait_changed(0.01, since=seen, kinds=(PODS,)) is False
    assert await store.wait_changed(0.01, since=seen) is True


def test_copies_are_deep_and_values_json_cannot_carry_are_kept() -> None:
    from decimal import Decimal

    from sim.store import json_copy

    value = {"a": [{"b": "c"}], "n": 1.5, "t": True, "z": None}
    copied = json_copy(value)
    assert copied == value
    assert copied["a"] is not value["a"] and copied["a"][0] is not value["a"][0]
    odd = {"q": Decimal("0.5"), "big": 2**70, 3: "non-str key"}  # orjson refuses these
    assert json_copy(odd) == odd and json_copy(odd) is not odd


def test_owned_writes_keep_the_object_handed_over_and_older_versions_intact(
    store: Store,
) -> None:
    from sim.patch import apply_patch

    body = pod()
    created = store.create(PODS, body, "ns", owned=True)
    assert created is body  # handed over, not copied
    assert store.get(PODS, "ns", "p") == created
    before = store.get(PODS, "ns", "p")
    patched = apply_patch(
        "application/strategic-merge-patch+json",
        store.peek(PODS, "ns", "p"),
        b'{"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "y"}]}}',
        custom=False,
    )
    stored = store.update(PODS, patched, owned=True)
    assert stored["spec"]["containers"] == [{"name": "c", "image": "y"}]
    assert stored["metadata"]["labels"] == {"a": "b"}
    # the version before the patch, as a watch from its resourceVersion replays it
    assert created == before and "labels" not in created["metadata"]
    assert created["spec"]["containers"][0]["image"] == "x"
    history = store.changes_since(PODS, int(before["metadata"]["resourceVersion"]))
    assert history is not None and history[-1].old == before
