"""The trigger controller: informers feed a cache, a pure planner decides, one adapter acts.

Modules: `model` and `nodes` (parsing API objects into values: the pods' side and
Karpenter's), `plan` (pure planning, in stages) with `decisions` (its settings, input
and output), `pools` (NodePool resolution), `packing` (GPU needs and bins), `statuses`
(what pods are told), `capacity` and `failures` (GPU accounting, failure rules),
`triggers` (trigger pod specs), `karpenter` (what Karpenter can and cannot provision
for), `kube` (the one adapter to the API server), `informer`/`state`/`incremental`/
`reconciler` (list/watch, cache, partitioned planning, loop), `reports` (the status
writer), `dra` and `dra_intents` (DRA pods), `leader` and `shutdown`, `server` and
`metrics` (health and Prometheus endpoints).
"""
