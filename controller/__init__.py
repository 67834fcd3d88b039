"""The trigger controller: informers feed a cache, a pure planner decides, one adapter acts.

Modules: `model` and `nodes` (parsing API objects into values: the pods' side and
Karpenter's), `plan` (pure planning, in stages) with `decisions` (its settings, input
and output), `pools` (NodePool resolution), `packing` (GPU needs and bins), `statuses`
(what pods are told), `capacity` and `failures` (GPU accounting, failure rules),
`triggers` (trigger pod specs), `karpenter` (what Karpenter can and cannot provision
for), `informer` and `cache` (list/watch into the informer cache), `memory` (what the
controller remembers of its decisions and of the pods it served), `snapshot` (the
planner's input, read from both), `incremental` (partitioned planning), `passes` (what a
pass applies, and the memory's bookkeeping of it: pure), `executor` (a plan's writes, in
lanes) with `reports` (the status writer), `reconciler` (the loop), `dra` and
`dra_intents` (DRA pods), `leader` and `shutdown`, `server` and `metrics` (health and
Prometheus endpoints). The one adapter to the API server is `intent.kube`.
"""
