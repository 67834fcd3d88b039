"""PodView and Store.changes_since: the sim's informer-like pod cache against a real Store."""

from __future__ import annotations

from typing import Any

from sim.podview import PodView
from sim.store import NAMESPACES, PODS, Store, json_copy


def _store(history_limit: int = 10_000) -> Store:
    s = Store(history_limit=history_limit)
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


def _pod(store: Store, name: str, **spec: Any) -> dict[str, Any]:
    body = {"containers": [{"name": "main", "image": "x"}], **spec}
    return store.create(PODS, {"metadata": {"name": name, "namespace": "default"}, "spec": body})


def _bind(store: Store, name: str, node: str) -> None:
    store.mutate(PODS, "default", name, lambda o: o["spec"].update(nodeName=node))


def _index(view: PodView) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    def names(table: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
        return {k: {p["metadata"]["name"] for p in v.values()} for k, v in table.items()}

    return names(view.bound), names(view.pending)


def test_changes_since_returns_the_writes_after_a_resource_version_or_none_when_compacted() -> None:
    store = _store(history_limit=3)
    _pod(store, "a")
    since = store.resource_version
    _pod(store, "b")
    _bind(store, "b", "n1")
    changes = store.changes_since(PODS, since)
    assert changes is not None
    assert [(c.type, c.obj["metadata"]["name"]) for c in changes] == [
        ("ADDED", "b"),
        ("MODIFIED", "b"),
    ]
    assert store.changes_since(PODS, store.resource_version) == []
    _pod(store, "c")
    _pod(store, "d")  # four writes since: the history of three no longer reaches back
    assert store.changes_since(PODS, since) is None


def test_pod_view_follows_adds_binds_scheduler_names_terminal_and_deletes() -> None:
    store = _store()
    _pod(store, "web")
    _pod(store, "hami", schedulerName="hami-scheduler")
    view = PodView(store)
    view.refresh()
    assert _index(view) == ({}, {"default-scheduler": {"web"}, "hami-scheduler": {"hami"}})
    before = dict(view.node_version)
    _bind(store, "web", "n1")
    _pod(store, "done")
    _bind(store, "done", "n1")
    store.mutate(PODS, "default", "done", lambda o: o["status"].update(phase="Succeeded"))
    view.refresh()
    assert _index(view) == ({"n1": {"web", "done"}}, {"hami-scheduler": {"hami"}})
    assert view.node_version["n1"] != before.get("n1")
    store.delete(PODS, "default", "hami")
    store.force_remove(PODS, "default", "web")
    view.refresh()
    assert _index(view) == ({"n1": {"done"}}, {})
    assert set(view.pods) == {store.get(PODS, "default", "done")["metadata"]["uid"]}


def test_released_counts_bound_pods_that_stop_holding_their_node() -> None:
    store = _store()
    view = PodView(store)
    _pod(store, "waiting")
    _pod(store, "runs")
    _pod(store, "finishes")
    view.refresh()
    start = view.released
    _bind(store, "runs", "n1")
    _bind(store, "finishes", "n1")
    store.mutate(
        PODS, "default", "runs", lambda o: o.setdefault("status", {}).update(phase="Running"),
        subresource="status",
    )  # fmt: skip
    store.force_remove(PODS, "default", "waiting")  # never bound: held nothing
    view.refresh()
    assert view.released == start  # binds, a Running status and an unbound delete free nothing
    store.mutate(
        PODS, "default", "finishes", lambda o: o.setdefault("status", {}).update(phase="Succeeded"),
        subresource="status",
    )  # fmt: skip
    view.refresh()
    assert view.released == start + 1
    store.mutate(
        PODS, "default", "finishes", lambda o: o["metadata"].update(labels={"done": "yes"})
    )
    view.refresh()
    assert view.released == start + 1  # already terminal: nothing more was freed
    store.force_remove(PODS, "default", "runs")
    view.refresh()
    assert view.released == start + 2


def test_departures_count_what_can_end_a_pods_group_membership() -> None:
    store = _store()
    view = PodView(store)
    _pod(store, "a")
    _pod(store, "b")
    view.refresh()
    start = view.departures

    def status(name: str, phase: str) -> None:
        store.mutate(
            PODS, "default", name, lambda o: o.setdefault("status", {}).update(phase=phase),
            subresource="status",
        )  # fmt: skip

    _bind(store, "a", "n1")
    status("a", "Running")
    _pod(store, "c")
    view.refresh()
    assert view.departures == start  # a bind, Pending -> Running and a new pod: still members
    store.mutate(PODS, "default", "b", lambda o: o["metadata"].update(labels={"g": "1"}))
    view.refresh()
    assert view.departures == start + 1
    status("a", "Failed")
    view.refresh()
    assert view.departures == start + 2
    store.force_remove(PODS, "default", "c")
    view.refresh()
    assert view.departures == start + 3


def test_pod_view_rebuilds_when_the_history_is_gone_and_equals_a_fresh_view() -> None:
    store = _store(history_limit=2)
    view = PodView(store)
    view.refresh()
    for i in range(5):
        _pod(store, f"p{i}")
    _bind(store, "p1", "n1")
    view.refresh()
    fresh = PodView(store)
    fresh.refresh()
    assert _index(view) == _index(fresh) == (
        {"n1": {"p1"}},
        {"default-scheduler": {"p0", "p2", "p3", "p4"}},
    )
    assert view.resource_version == store.resource_version


def test_a_terminating_pending_pod_leaves_the_pending_set() -> None:
    store = _store()
    _pod(store, "going")
    store.mutate(
        PODS,
        "default",
        "going",
        lambda o: o["metadata"].update(finalizers=["example.com/hold"]),
    )
    view = PodView(store)
    view.refresh()
    assert _index(view)[1] == {"default-scheduler": {"going"}}
    store.delete(PODS, "default", "going")  # a finalizer: only marked
    view.refresh()
    assert _index(view) == ({}, {})


def test_json_copy_is_deep_for_dicts_and_lists() -> None:
    original: dict[str, Any] = {"a": [{"b": 1}, [2, 3]], "c": {"d": "e"}}
    copied = json_copy(original)
    assert copied == original
    copied["a"][0]["b"] = 9
    copied["a"][1].append(4)
    copied["c"]["d"] = "x"
    assert original == {"a": [{"b": 1}, [2, 3]], "c": {"d": "e"}}
