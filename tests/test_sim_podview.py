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
