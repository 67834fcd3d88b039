"""``gpu-intent controller``: run the trigger controller against a cluster.

`add_parser` adds the subcommand. Its options' defaults are those of
`controller.plan.PlanConfig`, `controller.triggers.TriggerSettings` (the planning flags,
`gpu_intent.cli.planning`), `controller.reconciler.ControllerConfig`,
`controller.leader.LeaderElectionConfig` and `controller.shutdown.run_until_stopped`,
imported only when the subcommand is used (they load the Kubernetes client), except
`TRIGGER_CREATES_PER_SECOND` and `METRICS_ADDRESS`, which are the command's own.
``--catalog`` is the webhook's (`gpu_intent.cli.common.add_catalog_flag`): the GPU
catalog the controller infers DRA pods' intents with. `run` loads it, connects, serves
the metrics and runs the controller until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import socket
from typing import TYPE_CHECKING, Any

from gpu_intent.cli.common import (
    Subcommands,
    UsageError,
    add_catalog_flag,
    address,
    connect,
    field_default,
    log,
    non_negative,
    non_negative_int,
    os_reason,
    parameter_default,
    positive,
    positive_int,
    read_catalog,
    show_address,
)
from gpu_intent.cli.planning import add_planning_flags, plan_config
from intent.runtime import tune_gc

if TYPE_CHECKING:
    from controller.leader import LeaderElectionConfig
    from controller.plan import PlanConfig
    from controller.reconciler import ControllerConfig
    from intent.catalog import Catalog

#: ``--metrics-address``'s default (host, port).
METRICS_ADDRESS = ("0.0.0.0", 8080)

#: ``--trigger-creates-per-second``'s default. The command limits trigger creations;
#: ``ControllerConfig`` alone does not (its default is 0, no limit).
TRIGGER_CREATES_PER_SECOND = 50.0


def add_parser(commands: Subcommands) -> argparse.ArgumentParser:
    """Add ``controller`` to ``commands``; returns its parser."""
    return commands.add_command(
        "controller",
        "run the trigger controller against a cluster",
        "Run the trigger controller: it watches pods with a GPU intent that no node can"
        " take, creates trigger pods Karpenter provisions nodes for, and tells each pod"
        " what is happening (annotation and Events). Serves /metrics, /livez and /readyz.",
        add_arguments,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The controller's options, in the order ``--help`` shows them: the cluster, the
    planning flags, the metrics address, failures and caps (their own group), the pass
    timing, the shutdown, leader election and ``--catalog``."""
    from controller.reconciler import ControllerConfig
    from controller.triggers import TriggerSettings

    config = ControllerConfig()
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: current)")
    namespace = TriggerSettings().namespace
    add_planning_flags(
        parser,
        namespace=os.environ.get("POD_NAMESPACE", namespace),
        namespace_help=f"namespace for trigger pods (default: $POD_NAMESPACE or {namespace})",
    )
    parser.add_argument(
        "--metrics-address", type=address, default=METRICS_ADDRESS, metavar="HOST:PORT",
        help="address to serve /metrics, /livez and /readyz on, plain HTTP"
        f" (default {show_address(METRICS_ADDRESS)})",
    )  # fmt: skip
    _add_failure_flags(parser, config)
    _add_pass_flags(parser, config)
    _add_leader_flags(parser)
    add_catalog_flag(parser)


def _add_failure_flags(parser: argparse.ArgumentParser, config: ControllerConfig) -> None:
    """The controller's failure handling, protection and safety cap flags (see
    `controller.failures`); `_failure_settings` reads them."""
    plan = config.plan
    group = parser.add_argument_group("failures, protection and safety caps")
    group.add_argument(
        "--max-gpus-per-trigger",
        type=non_negative_int,
        default=plan.max_gpus_per_trigger,
        help="most GPUs one trigger asks for; pods needing more wait"
        f" (default {plan.max_gpus_per_trigger})",
    )
    group.add_argument(
        "--max-triggers-per-pool",
        type=non_negative_int,
        default=plan.max_triggers_per_pool,
        help="most live trigger pods per NodePool, 0 for no cap but --max-triggers"
        f" (default {plan.max_triggers_per_pool})",
    )
    group.add_argument(
        "--trigger-creates-per-second",
        type=non_negative,
        default=TRIGGER_CREATES_PER_SECOND,
        help="trigger creations per second at most (token bucket, burst the same), 0 for no "
        f"limit (default {TRIGGER_CREATES_PER_SECOND:g})",
    )
    _add_retry_flags(group, plan)
    group.add_argument(
        "--protect-seconds",
        type=positive,
        default=config.protect_seconds,
        help="how long a new node stays karpenter.sh/do-not-disrupt after Ready while none of "
        f"its pods has bound (default {config.protect_seconds:g})",
    )
    group.add_argument(
        "--dra",
        choices=("auto", "on", "off"),
        default=config.dra,
        help="follow DRA ResourceClaims and ResourceSlices: auto when the API server serves "
        f"resource.k8s.io/v1 (default {config.dra})",
    )


def _add_retry_flags(group: argparse._ArgumentGroup, plan: PlanConfig) -> None:
    """Backoff, attempts, the NodeClaim init timeout and the cooldown (seconds)."""
    group.add_argument(
        "--retry-base-seconds",
        type=positive,
        default=plan.retry_base_seconds,
        help="backoff after a pod's first failed scale-up, doubled per failure"
        f" (default {plan.retry_base_seconds:g})",
    )
    group.add_argument(
        "--retry-max-seconds",
        type=positive,
        default=plan.retry_max_seconds,
        help=f"longest backoff between scale-up attempts (default {plan.retry_max_seconds:g})",
    )
    group.add_argument(
        "--retry-attempts",
        type=positive_int,
        default=plan.retry_attempts,
        help=f"failed scale-ups after which a pod is told Failed (default {plan.retry_attempts})",
    )
    group.add_argument(
        "--init-timeout-seconds",
        type=positive,
        default=plan.init_timeout_seconds,
        help="a trigger's NodeClaim not Ready this long after creation has failed and is "
        f"deleted (default {plan.init_timeout_seconds:g}; Karpenter's registration timeout"
        " is 900)",
    )
    group.add_argument(
        "--cooldown-seconds",
        type=non_negative,
        default=plan.cooldown_seconds,
        help="after a trigger no pod needed is removed, no new trigger for its group for this "
        f"long (default {plan.cooldown_seconds:g})",
    )


def _add_pass_flags(parser: argparse.ArgumentParser, config: ControllerConfig) -> None:
    """When a planning pass runs, the status write rate and the shutdown grace."""
    from controller.shutdown import run_until_stopped

    parser.add_argument(
        "--pass-idle-seconds",
        type=positive,
        default=config.idle_seconds,
        help=f"plan once changes have been quiet this long (default {config.idle_seconds:g})",
    )
    parser.add_argument(
        "--pass-max-delay-seconds",
        type=positive,
        default=config.max_delay_seconds,
        help="plan at most this long after the first change, however busy"
        f" (default {config.max_delay_seconds:g})",
    )
    parser.add_argument(
        "--resync-seconds",
        type=positive,
        default=config.resync_seconds,
        help=f"plan at least this often with no change (default {config.resync_seconds:g})",
    )
    parser.add_argument(
        "--report-writes-per-second",
        type=positive,
        default=config.report_writes_per_second,
        help="status and Event writes per second at most"
        f" (default {config.report_writes_per_second:g}); trigger writes are not limited",
    )
    grace: float = parameter_default(run_until_stopped, "grace_seconds")
    parser.add_argument(
        "--shutdown-timeout",
        type=positive,
        default=grace,
        metavar="SECONDS",
        help="after SIGTERM, how long the pass in flight and queued status writes may take "
        f"before the rest is cut and the Lease released (default {grace:g}; keep it under"
        " the pod's terminationGracePeriodSeconds)",
    )


def _add_leader_flags(parser: argparse.ArgumentParser) -> None:
    """Leader election: on or off, the Lease's namespace and name, its timings (seconds,
    `LeaderElectionConfig`'s defaults)."""
    from controller.leader import LeaderElectionConfig

    def default(name: str) -> Any:
        return field_default(LeaderElectionConfig, name)

    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="act only while holding a coordination.k8s.io Lease, so several replicas can "
        "run (default on; --no-leader-elect for a single replica)",
    )
    parser.add_argument(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease (default: the trigger namespace)",
    )
    parser.add_argument(
        "--leader-election-lease-name",
        default=default("name"),
        help=f"name of the Lease (default {default('name')})",
    )
    parser.add_argument(
        "--leader-election-lease-duration",
        type=positive,
        default=default("lease_seconds"),
        help="seconds a follower waits after the leader's last renewal before taking over "
        f"(default {default('lease_seconds'):g})",
    )
    parser.add_argument(
        "--leader-election-renew-deadline",
        type=positive,
        default=default("renew_deadline_seconds"),
        help="seconds the leader keeps trying to renew before it stops acting and exits 1 "
        f"(default {default('renew_deadline_seconds'):g})",
    )
    parser.add_argument(
        "--leader-election-retry-period",
        type=positive,
        default=default("retry_seconds"),
        help=f"seconds between attempts to take or renew the Lease (default {default('retry_seconds'):g})",
    )


def _failure_settings(args: argparse.Namespace, plan: PlanConfig) -> dict[str, Any]:
    """`ControllerConfig` keyword arguments for the flags of `_add_failure_flags`."""
    return {
        "plan": dataclasses.replace(
            plan,
            max_gpus_per_trigger=args.max_gpus_per_trigger,
            max_triggers_per_pool=args.max_triggers_per_pool,
            retry_base_seconds=args.retry_base_seconds,
            retry_max_seconds=args.retry_max_seconds,
            retry_attempts=args.retry_attempts,
            init_timeout_seconds=args.init_timeout_seconds,
            cooldown_seconds=args.cooldown_seconds,
        ),
        "trigger_creates_per_second": args.trigger_creates_per_second,
        "protect_seconds": args.protect_seconds,
        "dra": args.dra,
    }


def controller_config(args: argparse.Namespace, catalog: Catalog | None = None) -> ControllerConfig:
    """The ``ControllerConfig`` for the parsed ``controller`` options (``args``) and the
    catalog ``--catalog`` loaded (`read_catalog`; None: the built-in one); raises
    ValueError if the settings do not hold together."""
    from controller.reconciler import ControllerConfig

    return ControllerConfig(
        **_failure_settings(args, plan_config(args)),
        idle_seconds=args.pass_idle_seconds,
        max_delay_seconds=args.pass_max_delay_seconds,
        resync_seconds=args.resync_seconds,
        report_writes_per_second=args.report_writes_per_second,
        catalog=catalog,
    )


def leader_election_config(
    args: argparse.Namespace, config: ControllerConfig
) -> LeaderElectionConfig | None:
    """The Lease to hold (in ``--leader-election-namespace``, else the trigger namespace;
    identity ``$POD_NAME`` or ``host_pid``), or None with ``--no-leader-elect``; raises
    ValueError for timings client-go would refuse."""
    from controller.leader import LeaderElectionConfig

    if not args.leader_elect:
        return None
    return LeaderElectionConfig(
        namespace=args.leader_election_namespace or config.namespace,
        identity=os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}",
        name=args.leader_election_lease_name,
        lease_seconds=args.leader_election_lease_duration,
        renew_deadline_seconds=args.leader_election_renew_deadline,
        retry_seconds=args.leader_election_retry_period,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``gpu-intent controller``; returns the exit code: 0 stopped by a signal, 1 an
    API error, a lost Lease or bad settings. Raises `UsageError` (exit code 2) for a
    ``--catalog`` that does not load, when no cluster configuration loads or the metrics
    address cannot be served on."""
    from controller.leader import LeadershipLost
    from intent.kube import KubeError

    catalog = read_catalog(args)
    try:
        asyncio.run(_run(args, catalog))
    except (KubeError, OSError, LeadershipLost, ValueError) as e:
        log.error("controller: %s", e)
        return 1
    return 0


async def _run(args: argparse.Namespace, catalog: Catalog | None = None) -> None:
    from prometheus_client import CollectorRegistry

    from controller.leader import LeaderElector
    from controller.metrics import ControllerMetrics
    from controller.reconciler import Controller
    from controller.server import start
    from controller.shutdown import run_until_stopped
    from intent.kube import Kube

    config = controller_config(args, catalog)
    elector_config = leader_election_config(args, config)
    # One registry per controller: the API adapter, the elector and the controller
    # (its informers, its status writer) count on it, and /metrics serves it.
    metrics = ControllerMetrics(CollectorRegistry())
    kube = Kube(await connect(args.kubeconfig, args.context), metrics)
    tune_gc(freeze=True)  # what is loaded now lives as long as the process
    try:
        elector = LeaderElector(kube, elector_config, metrics=metrics) if elector_config else None
        if elector is None:
            metrics.leader.set(1)  # a single replica without election always acts
        controller = Controller(kube, config, elector=elector, metrics=metrics)
        host, port = args.metrics_address
        try:
            runner = await start(controller, host, port)
        except OSError as e:
            raise UsageError(
                f"cannot serve metrics on --metrics-address {host}:{port}: {os_reason(e)}"
            ) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await run_until_stopped(controller, stop, args.shutdown_timeout)
        finally:
            await runner.cleanup()
    finally:
        await kube.close()
