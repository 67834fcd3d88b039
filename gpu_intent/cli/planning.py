"""The controller's planning flags, which ``controller`` and ``demo`` share, and the
`PlanConfig` they make (`plan_config`). Their defaults are those of
`controller.plan.PlanConfig` and `controller.triggers.TriggerSettings`, imported when the
flags are added (so only by a subcommand that has them)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpu_intent.cli.common import non_negative, non_negative_int, positive, positive_int

if TYPE_CHECKING:
    from controller.plan import PlanConfig
    from controller.triggers import TriggerSettings


def add_planning_flags(
    parser: argparse.ArgumentParser,
    *,
    namespace: str | None = None,
    namespace_help: str = "namespace for trigger pods",
    default_nodepool: str | None = None,
) -> None:
    """Add the controller's planning flags to ``parser``: ``--namespace`` (trigger pods'
    namespace, default ``namespace``, or ``TriggerSettings().namespace`` when None),
    ``--default-nodepool`` (default ``default_nodepool``, or ``PlanConfig``'s when None),
    ``--provider`` (the Karpenter provider whose labels select a GPU model, default
    ``TriggerSettings().provider``), ``--gpu-name-label``, ``--gpu-memory-label``
    (overrides of the provider's), ``--binding-triggers``,
    ``--trigger-image``, ``--trigger-priority-class``, ``--trigger-deadline-seconds``,
    ``--placement`` (repeatable, applied after the layers' defaults), ``--cover-seconds``,
    ``--cover-max-seconds``, ``--contest-seconds``, ``--gather-seconds``,
    ``--gather-max-seconds`` (seconds) and ``--max-triggers``.
    `plan_config` turns the parsed values into a ``PlanConfig``."""
    from controller.plan import PlanConfig
    from controller.triggers import TriggerSettings

    plan, trigger = PlanConfig(), TriggerSettings()
    parser.add_argument(
        "--namespace", default=trigger.namespace if namespace is None else namespace,
        help=namespace_help,
    )  # fmt: skip
    parser.add_argument(
        "--default-nodepool",
        default=plan.default_nodepool if default_nodepool is None else default_nodepool,
        help="NodePool for GPU intents that name no model",
    )
    _add_trigger_flags(parser, trigger)
    _add_placement_flag(parser, plan)
    _add_cover_flags(parser, plan)


def _placement(text: str) -> str:
    """A ``--placement`` value, checked (`controller.placement.parse_placement`)."""
    from controller.placement import parse_placement

    try:
        parse_placement(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def _add_placement_flag(parser: argparse.ArgumentParser, plan: PlanConfig) -> None:
    """``--placement``: where each GPU-sharing layer's pods can run."""
    defaults = plan.placement.flags()
    parser.add_argument(
        "--placement",
        action="append",
        type=_placement,
        default=defaults,
        metavar="LAYER=REQ[,REQ...]",
        help="node labels a GPU-sharing layer's nodes carry (hami, kai, tensor-fusion, dra), "
        "as requirements key=value, key!=value, 'key In (a|b)', 'key Exists'; repeat for "
        "each layer to change, LAYER= for any node. Triggers ask for them and only NodePools "
        "that make such nodes serve the layer's pods. The layers' own defaults: "
        + " ".join(defaults),
    )


def _add_trigger_flags(parser: argparse.ArgumentParser, trigger: TriggerSettings) -> None:
    """How trigger pods are built: provider and labels, binding, image, PriorityClass,
    deadline."""
    from intent.providers import PROFILES

    parser.add_argument(
        "--provider",
        choices=tuple(PROFILES),
        default=trigger.provider.name,
        help="Karpenter provider whose node labels select a GPU model and memory: aws "
        "(instance-gpu-name t4), azure (sku-gpu-name T4), gcp (instance-gpu-name "
        "nvidia-tesla-t4), tke (no GPU label: instance-family GN7) "
        f"(default {trigger.provider.name})",
    )
    parser.add_argument(
        "--gpu-name-label",
        default=trigger.gpu_name_label,
        help="node label carrying the canonical GPU model (t4), instead of the provider's",
    )
    parser.add_argument(
        "--gpu-memory-label",
        default=trigger.gpu_memory_label,
        help="node label carrying MiB of memory per GPU, instead of the provider's",
    )
    parser.add_argument(
        "--binding-triggers",
        action="store_true",
        help="make triggers ordinary pods kube-scheduler binds, instead of non-binding ones "
        "(only for clusters that reject pods naming an unknown scheduler)",
    )
    parser.add_argument(
        "--trigger-image",
        default=trigger.image,
        help="image of trigger pods (never run with non-binding triggers; binding ones run"
        " it until their node is Ready)",
    )
    parser.add_argument(
        "--trigger-priority-class", default=trigger.priority_class,
        help="PriorityClass for trigger pods (default: none)",
    )  # fmt: skip
    parser.add_argument(
        "--trigger-deadline-seconds",
        type=positive_int,
        default=trigger.deadline_seconds,
        metavar="SECONDS",
        help="activeDeadlineSeconds of trigger pods, a last resort: a kubelet running a "
        "(binding) trigger this long ends it, since one alive that long is a bug or a "
        f"stuck NodeClaim (default {trigger.deadline_seconds})",
    )


def _add_cover_flags(parser: argparse.ArgumentParser, plan: PlanConfig) -> None:
    """How long scaled-up pods are left to their scheduler; the trigger cap."""
    parser.add_argument(
        "--cover-seconds",
        type=positive,
        default=plan.cover_seconds,
        metavar="SECONDS",
        help="how long pods whose node is Ready are left to their scheduler before buying again",
    )
    parser.add_argument(
        "--cover-max-seconds",
        type=positive,
        default=plan.cover_max_seconds,
        metavar="SECONDS",
        help="how long that may last while their schedulers are still binding pods "
        "gpu-intent scaled up for (a burst binds one pod after another)",
    )
    parser.add_argument(
        "--contest-seconds",
        type=non_negative,
        default=plan.contest_seconds,
        metavar="SECONDS",
        help="how long a new trigger may wait, from when its oldest pod became "
        "Unschedulable, for the capacity on its way for KAI pods that could take its node "
        "first; a KAI trigger Karpenter has not bought for yet is withdrawn for as long; "
        "also how long, from its creation, a NodeClaim Karpenter launched for other pods "
        "that went elsewhere holds back triggers for the pods its free GPUs can take "
        f"(0: never waits; default {plan.contest_seconds:g})",
    )
    parser.add_argument(
        "--gather-seconds",
        type=non_negative,
        default=plan.gather_seconds,
        metavar="SECONDS",
        help="a burst's new pods that Karpenter cannot provision by itself get triggers once "
        "no new pod of their group came for this "
        "long, as Karpenter batches (whole seconds of creationTimestamp: up to a second "
        f"less; 0: at once; default {plan.gather_seconds:g})",
    )
    parser.add_argument(
        "--gather-max-seconds",
        type=non_negative,
        default=plan.gather_max_seconds,
        metavar="SECONDS",
        help="the longest a burst's first new pod waits for the rest "
        f"(default {plan.gather_max_seconds:g})",
    )
    parser.add_argument(
        "--max-triggers",
        type=non_negative_int,
        default=plan.max_triggers,
        help="most live trigger pods (0: none)",
    )


def plan_config(args: argparse.Namespace) -> PlanConfig:
    """The ``PlanConfig`` for the flags added by `add_planning_flags` (its other fields
    keep their defaults)."""
    from controller.placement import placements_from
    from controller.plan import PlanConfig
    from controller.triggers import TriggerSettings
    from intent.providers import profile

    return PlanConfig(
        trigger=TriggerSettings(
            namespace=args.namespace,
            image=args.trigger_image,
            provider=profile(args.provider),
            gpu_name_label=args.gpu_name_label,
            gpu_memory_label=args.gpu_memory_label,
            priority_class=args.trigger_priority_class,
            binding=args.binding_triggers,
            deadline_seconds=args.trigger_deadline_seconds,
        ),
        default_nodepool=args.default_nodepool,
        cover_seconds=args.cover_seconds,
        cover_max_seconds=args.cover_max_seconds,
        contest_seconds=args.contest_seconds,
        gather_seconds=args.gather_seconds,
        gather_max_seconds=args.gather_max_seconds,
        max_triggers=args.max_triggers,
        placement=placements_from(args.placement),
    )
