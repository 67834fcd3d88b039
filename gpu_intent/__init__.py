"""gpu-intent: GPU intent for Karpenter, for pods that ask through GPU-sharing layers."""

__version__ = "0.1.0"
