"""``gpu-intent demo``: the whole story on an embedded simulated cluster.

It starts the sim (API server over HTTPS, scheduler, kubelet, Karpenter) in a process
of its own (`sim.process`: its own core, as a real control plane has its own machines),
and in the demo's process the real webhook over HTTPS and the real controller (talking to the sim through kubernetes_asyncio
and a kubeconfig, exactly as to a real cluster), applies an examples directory (default
``examples/``, installed as ``gpu_intent.examples``), prints a live timeline and final
tables. The directory holds Namespaces, NodePools, Pods, DRA ResourceClaims and
ResourceClaimTemplates and DeviceClasses (applied as given, beside the NVIDIA DRA
driver's defaults the sim installs; one of the same name replaces it), and the node
classes NodePools reference (``EC2NodeClass``, ``AKSNodeClass``, ``GCENodeClass``,
``TKEMachineNodeClass``: accepted, not applied, one line says the sim's instance-type
catalog stands in for them); any other kind is one line on ``err`` and exit 2. ``--without-controller`` shows the other side: the sharing-layer pods stay
Pending with Karpenter's ``FailedScheduling`` while whole-GPU pods get a node.

**What is followed.** Every Pod manifest in the directory, in whatever namespace, is a
*GPU pod* the demo follows to a node. Pods, NodeClaims and Events are listed and then
watched from that list's resourceVersion *before* the first pod is created, so every
NodeClaim Karpenter creates is recorded, including ones deleted later. At the end the
demo waits (within ``--timeout``) until each NodeClaim has launched (condition
``Launched=True``) or is gone, and reconciles its record with a fresh list.

**Providers.** The controller's provider (``--provider``: `intent.providers`) is the
sim's cloud too (`sim.providers`: that provider's instance types and labels), and without
``examples`` the demo applies ``examples/providers/<provider>/`` for a provider other
than AWS: the same story on NodePools shaped for that provider, with no AWS label.

**The end of the story.** The demo stops waiting as soon as every example pod is
*closed* and no trigger pod is left (or at ``--timeout``): bound with a closed scale-up
status (``Scheduled`` or ``Native``; no status for a pod the controller does not
follow: no GPU intent, or an intent the webhook did not annotate and no DRA claims, nor
for one its scheduler bound before it ever refused it: nothing was pending), or
given up (``Unresolvable``, ``InvalidIntent``; ``Failed`` while unbound;
`intent.contract.Phase`, ``controller/statuses.py``). While it waits it shows pods
bound and closed, NodeClaims and seconds elapsed on ``err`` (`progress.StoryProgress`):
a live bar (``rich``) when ``err`` is a terminal, else a plain line every 5 s.

**The need.** What the same demand, written as native whole-GPU pods packed as tightly
as a person would, makes the same Karpenter buy: the sim's pure `sim.karpenter.solve`
(Karpenter's ``Scheduler.Solve``) on an otherwise empty cluster with the same NodePools
(as stored by the API server), over the *ideal native twin* (`twin.ideal_twins`, shared
with ``bench.cost``): per (model, pool), the pods sharing a GPU are packed
first-fit-decreasing into 1-GPU pods (a HAMi card holds at most its split count, 10,
of them; their cpu and memory requests carried; none larger than an instance type of
its pool holds), a pod of whole GPUs becomes one pod of ``ceil`` GPUs, a memory-only
pod one whole GPU with enough memory. Each twin selects the model as the provider spells
it (`intent.providers`; AWS ``karpenter.k8s.aws/instance-gpu-name``) and the pool on ``karpenter.sh/nodepool`` (the
intent's pool; for an intent without a model, the default NodePool the controller would
use) and tolerates what its pods tolerate. So two 0.5-GPU L4 pods make one 1-GPU twin,
and 160 quarter-GPU T4 pods forty. A pod with no GPU intent enters the solve as it is.
The intent is the webhook's annotation, or for a pod the webhook did not annotate (its
namespace is not opted in) what `intent.inference.infer_intent` finds in the pod.

From that solve (`native_need`) and the NodeClaims created, `balance` computes:

- ``gpusNeeded``: per model, ``ceil`` of the summed intents (``any`` for intents naming
  no model); ``gpusLowerBound``: per model, the whole GPUs of the ideal twin's packing;
  ``gpusBought``: per model, the GPUs of every NodeClaim created (instance type from
  the sim catalog);
- ``costPerHour``: ``bought`` sums the on-demand price (sim catalog, USD/hour) of every
  launched NodeClaim created, deleted ones included; ``native`` (also
  ``idealCostPerHour``) sums the cheapest instance type of each NodeClaim of the ideal
  twin's solve (the one the sim launches);
- NodeClaims *beyond the need*, taken in creation order: every NodeClaim after as many
  as the ideal twin's solve makes; a launched one whose GPUs take its model's bought
  total above ``max(lower bound, ideal solve)`` for that model; a launched one without
  GPUs beyond the ideal solve's count of GPU-less NodeClaims. Any NodeClaim beyond the
  need fails the demo (exit 1), named in the message.

**Timings** (`TIMINGS`). ``fast`` (default) is the sim's own (`KarpenterTimings()`:
launch 1 s, register 2 s, initialize 1 s). ``eks`` keeps Karpenter's batching and takes
the NodeClaim lifecycle to about 60 s from creation to Ready, estimated from public
measurements: EC2 ``Instance Created`` about 1 s after the request and kubelet node
registration at 39 s for a c5.xlarge (awslabs/amazon-eks-ami#1099, the EKS team's
node-latency measurements); "new nodes come up in about 30-40s in a ready state" for
general instance types, with GPU types taking longer to boot (Karpenter maintainer in
aws/karpenter-provider-aws#6165, and amazon-eks-ami#1099); users expect Ready "in about
60 seconds" (aws/karpenter-provider-aws#3102). So launch 2 s (the CreateFleet call),
register 38 s, initialize 20 s (node Ready plus the NVIDIA device plugin advertising
``nvidia.com/gpu``; the 20 s is an estimate). The default timeout scales with them
(`default_timeout`).

**Output.** ``output="text"`` prints the timeline, the tables and the summary lines on
``out``. ``output="json"`` prints the same human text on ``err`` and one JSON object on
``out`` (`summary_json` gives the shape).

Exit codes: 0 every example pod bound with a closed status, no trigger left, every NodeClaim launched or
gone, every launched one running an example pod, and none beyond the need (``with_controller=False``: whole-GPU pods bound, the
sharing-layer pods Pending with Karpenter's FailedScheduling, none beyond the need);
1 otherwise; 2 when the examples cannot be read or applied (one line on ``err``).
"""

from gpu_intent.demo.manifests import (
    ExamplesError,
    apply,
    default_examples,
    load_manifests,
    webhook_configuration,
)
from gpu_intent.demo.need import (
    Balance,
    ClaimCost,
    DemandPod,
    Need,
    balance,
    bought_claim,
    gpus_needed,
    native_need,
    native_twins,
)
from gpu_intent.demo.story import TIMINGS, default_timeout, run_demo
from gpu_intent.demo.twin import Ideal, Twin, gpus_lower_bound, ideal_twins

__all__ = [
    "TIMINGS",
    "Balance",
    "ClaimCost",
    "DemandPod",
    "ExamplesError",
    "Ideal",
    "Need",
    "Twin",
    "apply",
    "balance",
    "bought_claim",
    "default_examples",
    "default_timeout",
    "gpus_lower_bound",
    "gpus_needed",
    "ideal_twins",
    "load_manifests",
    "native_need",
    "native_twins",
    "run_demo",
    "webhook_configuration",
]
