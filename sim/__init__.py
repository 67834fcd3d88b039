"""The simulated cluster: gpu-intent's only test double.

An HTTP subset of the Kubernetes API (store, watch, admission, CRD validation),
kube-scheduler and the GPU-sharing layers' schedulers, a kubelet, and Karpenter with an
instance catalog. The demo, the tests and the benchmarks run the real webhook and
controller against it; nothing in the product imports it.
"""
