"""The trigger controller: informers feed a cache, a pure planner decides, one adapter acts.

Modules: `model` (parsing API objects into values), `plan` (pure planning), `triggers`
(trigger pod specs), `karpenter` (what Karpenter can and cannot provision for), `kube`
(the one adapter to the API server), `informer`/`state`/`reconciler` (list/watch, cache,
loop), `server` and `metrics` (health and Prometheus endpoints).
"""
