"""Well-known keys of other components: labels, annotations, resource names and pod
condition values defined by Kubernetes, Karpenter, NVIDIA, AMD and HAMi, each spelled
once here and cited to where it is defined. Purely constants.

gpu-intent's own keys (``gpu-intent.io/...``) are in `intent.contract`; the sim has its
own names for the components it mimics and points at these where they are identical.
"""

from __future__ import annotations

from typing import Final

# -- Extended resources -------------------------------------------------------------------

#: Whole NVIDIA GPUs, the extended resource the NVIDIA device plugin advertises
#: (NVIDIA/k8s-device-plugin, ``nvidia.com/gpu``; also what HAMi and time-slicing nodes
#: advertise, REFERENCE.md section 3).
NVIDIA_GPU: Final = "nvidia.com/gpu"
#: Whole AMD GPUs, the extended resource of the ROCm device plugin (ROCm/k8s-device-plugin).
AMD_GPU: Final = "amd.com/gpu"
#: HAMi's per-container GPU memory (MiB), memory share (percent) and core share (percent)
#: resources, and its GPU type filter annotations (Project-HAMi/HAMi, docs "Resource
#: names" and pkg/device/nvidia/device.go; REFERENCE.md section 3).
HAMI_GPUMEM: Final = "nvidia.com/gpumem"
HAMI_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
HAMI_GPUCORES: Final = "nvidia.com/gpucores"
HAMI_USE_GPUTYPE: Final = "nvidia.com/use-gputype"
HAMI_NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"

# -- Kubernetes well-known labels (kubernetes.io docs, "Well-Known Labels, Annotations and
# -- Taints"; k8s.io/api core/v1 well_known_labels.go) --------------------------------------

#: The node's hostname; restricted for Karpenter (pkg/apis/v1/labels.go RestrictedLabels).
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
#: The node's CPU architecture (``LabelArchStable``).
ARCH_LABEL: Final = "kubernetes.io/arch"
#: The node's operating system (``LabelOSStable``).
OS_LABEL: Final = "kubernetes.io/os"
#: The node's instance type, set by the cloud provider (``LabelInstanceTypeStable``).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
#: Its deprecated beta spelling (``LabelInstanceType``), still on some nodes.
INSTANCE_TYPE_BETA_LABEL: Final = "beta.kubernetes.io/instance-type"
#: The Windows build of a Windows node (``LabelWindowsBuild``).
WINDOWS_BUILD_LABEL: Final = "node.kubernetes.io/windows-build"
#: The node's zone and region (``LabelTopologyZone``, ``LabelTopologyRegion``).
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"

# -- Pod conditions (k8s.io/api core/v1 types.go) ------------------------------------------

#: The pod condition type the scheduler sets (``PodScheduled``).
POD_SCHEDULED: Final = "PodScheduled"
#: Its reason when no node fits (``PodReasonUnschedulable``); Karpenter provisions for
#: pods with this reason (pkg/utils/pod/scheduling.go FailedToSchedule).
UNSCHEDULABLE: Final = "Unschedulable"

# -- Karpenter (kubernetes-sigs/karpenter pkg/apis/v1/labels.go; REFERENCE.md section 1) ---

#: Karpenter's API group, and the version of its NodePool and NodeClaim kinds.
KARPENTER_GROUP: Final = "karpenter.sh"
KARPENTER_API_VERSION: Final = f"{KARPENTER_GROUP}/v1"
#: Label on NodeClaims and nodes naming their NodePool (``NodePoolLabelKey``).
NODEPOOL_LABEL: Final = f"{KARPENTER_GROUP}/nodepool"
#: Spot or on-demand (``CapacityTypeLabelKey``).
CAPACITY_TYPE_LABEL: Final = f"{KARPENTER_GROUP}/capacity-type"
#: Annotation (``"true"``) that blocks voluntary disruption of a Node or NodeClaim
#: (``DoNotDisruptAnnotationKey``, read by pkg/controllers/disruption/types.go NewCandidate).
DO_NOT_DISRUPT_ANNOTATION: Final = f"{KARPENTER_GROUP}/do-not-disrupt"

# -- Karpenter AWS provider (aws/karpenter-provider-aws pkg/apis/v1/labels.go) -------------

#: The instance type's GPU name (``a100``, ``l4``), memory (MiB) and family (``p4d``).
AWS_GPU_NAME_LABEL: Final = "karpenter.k8s.aws/instance-gpu-name"
AWS_GPU_MEMORY_LABEL: Final = "karpenter.k8s.aws/instance-gpu-memory"
AWS_INSTANCE_FAMILY_LABEL: Final = "karpenter.k8s.aws/instance-family"
#: The GPU manufacturer (``nvidia``) and GPUs per instance.
AWS_GPU_MANUFACTURER_LABEL: Final = "karpenter.k8s.aws/instance-gpu-manufacturer"
AWS_GPU_COUNT_LABEL: Final = "karpenter.k8s.aws/instance-gpu-count"

# -- Karpenter Azure provider (Azure/karpenter-provider-azure pkg/apis/v1beta1/labels.go,
# -- Group ``karpenter.azure.com``; docs/sources/placement.md section 2.2) --------------------

#: The VM size's accelerator type parsed from its name (``T4``, ``A100``: upper case), GPU
#: manufacturer (``nvidia``/``amd``) and GPUs per VM. There is no GPU memory label.
AZURE_GPU_NAME_LABEL: Final = "karpenter.azure.com/sku-gpu-name"
AZURE_GPU_MANUFACTURER_LABEL: Final = "karpenter.azure.com/sku-gpu-manufacturer"
AZURE_GPU_COUNT_LABEL: Final = "karpenter.azure.com/sku-gpu-count"
#: The VM size (``Standard_NC4as_T4_v3``) and its family letter (``N``).
AZURE_SKU_NAME_LABEL: Final = "karpenter.azure.com/sku-name"
AZURE_SKU_FAMILY_LABEL: Final = "karpenter.azure.com/sku-family"

# -- Karpenter GCP provider (cloudpilot-ai/karpenter-provider-gcp pkg/apis/v1alpha1/labels.go,
# -- Group ``karpenter.k8s.gcp``; docs/sources/placement.md section 2.3) ----------------------

#: The GCE accelerator type of the machine type (``nvidia-tesla-a100``, ``nvidia-l4``) and
#: GPUs per machine. The provider registers ``-gpu-manufacturer`` and ``-gpu-memory`` too
#: but only ever sets them ``DoesNotExist`` (pkg/providers/instancetype/types.go).
GCP_GPU_NAME_LABEL: Final = "karpenter.k8s.gcp/instance-gpu-name"
GCP_GPU_COUNT_LABEL: Final = "karpenter.k8s.gcp/instance-gpu-count"
GCP_INSTANCE_FAMILY_LABEL: Final = "karpenter.k8s.gcp/instance-family"
#: GKE's accelerator label, which the provider sets to the same value as the GPU name
#: (``LabelGKEAccelerator``, read by the NVIDIA device plugin DaemonSet's node affinity).
GKE_ACCELERATOR_LABEL: Final = "cloud.google.com/gke-accelerator"

# -- Karpenter TKE provider (TencentCloud/karpenter-provider-tke pkg/apis/v1beta1/labels.go,
# -- Group ``karpenter.k8s.tke``; docs/sources/placement.md section 2.4) ----------------------

#: The CVM instance family (``GN7``, ``S5``), vCPUs and memory (GB). TKE has no GPU label.
TKE_INSTANCE_FAMILY_LABEL: Final = "karpenter.k8s.tke/instance-family"
TKE_INSTANCE_CPU_LABEL: Final = "karpenter.k8s.tke/instance-cpu"
TKE_INSTANCE_MEMORY_LABEL: Final = "karpenter.k8s.tke/instance-memory-gb"

# -- NVIDIA GPU Feature Discovery (NVIDIA/k8s-device-plugin, gpu-feature-discovery) --------

#: The GPU product name GFD labels a node with (``NVIDIA-A100-SXM4-80GB``).
NVIDIA_GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
