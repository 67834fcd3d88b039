"""The ``restricted`` Pod Security Standard as a check of a Pod body, for tests.

Written from https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the
Baseline controls, which Restricted includes, then the Restricted ones; the policy as of
Kubernetes v1.25+, "latest"), the rules as the Pod Security admission controller applies
them (k8s.io/pod-security-admission ``policy/check_*.go``): a field that is absent passes
where the doc says "Undefined/nil" is allowed. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Restricted "Volume Types": only these volume sources.
ALLOWED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
#: Baseline "Capabilities": what may be added (Restricted allows only NET_BIND_SERVICE).
RESTRICTED_ADDABLE = frozenset({"NET_BIND_SERVICE"})
#: Baseline "Sysctls": the safe set.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        c
        for field in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(field) or []
    ]


def violations(pod: Mapping[str, Any]) -> list[str]:
    """Every control of the restricted policy ``pod`` breaks, one line each (empty: it
    passes)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    psc = spec.get("securityContext") or {}
    out: list[str] = []
    # Baseline.
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("HostProcess: pod windowsOptions.hostProcess")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"Host Namespaces: {field}")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            out.append(f"HostPath Volumes: {volume.get('name')}")
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"Volume Types: {volume.get('name')} uses {sorted(kinds - ALLOWED_VOLUMES)}")
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"AppArmor: annotation {key}={value}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"Sysctls: {sysctl.get('name')}")

    def selinux(ctx: Mapping[str, Any], where: str) -> None:
        options = ctx.get("seLinuxOptions") or {}
        if (
            options.get("type", "") not in SELINUX_TYPES
            or options.get("user")
            or options.get("role")
        ):
            out.append(f"SELinux: {where}")

    def seccomp_ok(ctx: Mapping[str, Any]) -> bool | None:
        profile = (ctx.get("seccompProfile") or {}).get("type")
        if profile is None:
            return None
        return profile in ("RuntimeDefault", "Localhost")

    def apparmor_ok(ctx: Mapping[str, Any]) -> bool:
        profile = (ctx.get("appArmorProfile") or {}).get("type")
        return profile in (None, "RuntimeDefault", "Localhost")

    selinux(psc, "pod")
    if not apparmor_ok(psc):
        out.append("AppArmor: pod appArmorProfile")
    pod_seccomp = seccomp_ok(psc)
    if pod_seccomp is False:
        out.append("Seccomp: pod profile not RuntimeDefault/Localhost")
    if psc.get("runAsUser") == 0:
        out.append("Running as Non-root user: pod runAsUser 0")
    for c in _containers(spec):
        name = c.get("name")
        csc = c.get("securityContext") or {}
        if (csc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"HostProcess: container {name}")
        if csc.get("privileged"):
            out.append(f"Privileged Containers: {name}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"Host Ports: {name}")
        selinux(csc, f"container {name}")
        if not apparmor_ok(csc):
            out.append(f"AppArmor: container {name}")
        if csc.get("procMount", "Default") != "Default":
            out.append(f"/proc Mount Type: {name}")
        # Restricted.
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"Privilege Escalation: {name} allowPrivilegeEscalation must be false")
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"Running as Non-root: {name} runAsNonRoot must be true")
        if csc.get("runAsUser") == 0:
            out.append(f"Running as Non-root user: {name} runAsUser 0")
        container_seccomp = seccomp_ok(csc)
        if container_seccomp is False or (container_seccomp is None and pod_seccomp is not True):
            out.append(f"Seccomp: {name} needs RuntimeDefault or Localhost")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"Capabilities: {name} must drop ALL")
        added = set(caps.get("add") or []) - RESTRICTED_ADDABLE
        if added:
            out.append(f"Capabilities: {name} adds {sorted(added)}")
    return out
