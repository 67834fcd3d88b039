def test_tolerations_match_taints_as_kubernetes_does() -> None:
    from controller.model import Toleration, parse_tolerations, untolerated_taint

    taint = {"key": "gpu", "value": "a100", "effect": "NoSchedule"}
    assert Toleration("gpu", "Equal", "a100", "NoSchedule").tolerates(taint)
    assert Toleration("gpu", "", "a100", "").tolerates(taint)  # unset operator is Equal
    assert not Toleration("gpu", "Equal", "h100", "NoSchedule").tolerates(taint)
    assert Toleration("gpu", "Exists", "", "").tolerates(taint)
    assert Toleration("", "Exists", "", "").tolerates(taint)  # tolerates everything
    assert not Toleration("gpu", "Exists", "", "NoExecute").tolerates(taint)
    assert not Toleration("other", "Exists", "", "").tolerates(taint)
    spec = {"tolerations": [{"key": "gpu", "operator": "Exists"}]}
    tolerations = parse_tolerations(spec)
    assert parse_tolerations({"tolerations": [{"key": "gpu", "operator": "Exists"}]}) is tolerations
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    assert (
        untolerated_taint(tolerations, [taint, soft]) is None
    )  # PreferNoSchedule keeps no pod off
    hard = {"key": "dra-only", "effect": "NoExecute"}
    assert untolerated_taint(tolerations, [taint, hard]) == hard
    assert untolerated_taint((), [taint]) == taint


def test_gpu_need_reads_memory_as_a_share_of_the_named_card() -> None:
    """What a pod takes of a GPU when packed: the intents the webhook writes for the
    sharing layers (intent.demand), read as the layers place them."""
    from decimal import Decimal

    from controller.packing import gpu_need
    from intent.contract import Intent, Source

    a10g = 22888  # MiB, the catalog's A10G
    hami = (Source("hami", "nvidia.com/gpumem"), Source("hami", "nvidia.com/use-gputype"))
    # HAMi gpumem alone: the intent's 1 GPU is a placeholder; the memory decides.
    assert gpu_need(Intent(Decimal(1), "a10g", None, 6000, hami, a10g)) == Decimal(6000) / a10g
    # With cores stated, the larger share of the two.
    cores = (*hami, Source("hami", "nvidia.com/gpucores"))
    assert gpu_need(Intent(Decimal("0.5"), "a10g", None, 6000, cores, a10g)) == Decimal("0.5")
    assert gpu_need(Intent(Decimal("0.1"), "a10g", None, 6000, cores, a10g)) == Decimal(6000) / a10g
    # HAMi puts at most ten vGPUs on a device (deviceSplitCount): a tenth at least.
    assert gpu_need(Intent(Decimal(1), "a10g", None, 500, hami, a10g)) == Decimal("0.1")
    # KAI gpu-memory's 0.1 is a placeholder too; a card too small is one whole GPU.
    kai = (Source("kai", "gpu-memory"), Source("user", "gpu-intent.io/model"))
    assert gpu_need(Intent(Decimal("0.1"), "l4", None, 11444, kai, a10g)) == Decimal("0.5")
    assert gpu_need(Intent(Decimal("0.1"), "l4", None, 30000, kai, a10g)) == 1
    # The card's memory unknown (no model named): one whole GPU, shared with none.
    assert gpu_need(Intent(Decimal("0.1"), None, None, 20000, (Source("kai", "gpu-memory"),))) == 1
    # Several devices: whole GPUs. No memory stated: the intent's GPUs as they are.
    assert gpu_need(Intent(Decimal("1.5"), "a10g", None, 6000, hami, a10g)) == 2
    fraction = (Source("kai", "gpu-fraction"),)
    assert gpu_need(Intent(Decimal("1.5"), "l4", None, None, fraction)) == Decimal("1.5")
    assert gpu_need(Intent(Decimal("0.25"), "l4", None, None, fraction)) == Decimal("0.25")


def test_gpu_use_counts_a_bound_multi_device_pod_by_its_devices_memory_shares() -> None:
    """Bound, a pod of several vGPUs that states memory takes each device's share, not
    the whole GPUs buying for it needs: two such pods sharing two L4 cards once counted
    4 GPUs on a 4-GPU node whose other two cards held eight quarter pods (6 of 4), so
    the pods told NodeReady there lost their cover and got triggers nobody used."""
    from decimal import Decimal

    from controller.packing import HAMI_MIN_SHARE, gpu_need, gpu_use
    from intent.contract import Intent, Source

    l4, a10g = 23034, 22888  # MiB, the catalog's cards
    tf = (
        Source("tensor-fusion", "tensor-fusion.ai/gpu-count"),
        Source("tensor-fusion", "tensor-fusion.ai/vram-request"),
    )
    two = Intent(Decimal(2), "l4", None, 10240, tf, l4)
    assert gpu_need(two) == 2
    assert gpu_use(two) == 2 * (Decimal(10240) / l4)
    hami = (Source("hami", "nvidia.com/gpu"), Source("hami", "nvidia.com/gpumem"))
    assert gpu_use(Intent(Decimal(2), "a10g", None, 10000, hami, a10g)) == 2 * (
        Decimal(10000) / a10g
    )
    assert gpu_use(Intent(Decimal(3), "a10g", None, 500, hami, a10g)) == 3 * HAMI_MIN_SHARE
    # More memory than the card has: a whole device each; the card unknown: the same.
    assert gpu_use(Intent(Decimal(2), "a10g", None, 30000, hami, a10g)) == 2
    assert gpu_use(Intent(Decimal(2), None, None, 10000, hami)) == 2
    # One device, or no memory stated: what packing counts.
    one = Intent(Decimal(1), "a10g", None, 6000, hami, a10g)
    assert gpu_use(one) == gpu_need(one)
    whole = Intent(Decimal(2), "l4", None, None, (Source("kai", "gpu-fraction"),))
    assert gpu_use(whole) == gpu_need(whole) == 2


def test_mig_slices_are_packed_by_compute_slices_not_memory() -> None:
    """A node advertises whole MIG profiles per GPU: seven ``1g.5gb`` on an A100-40GB,
    though 5120 MiB is an eighth of its memory. Seven fill one GPU (their 6-digit
    annotation, 0.142858, would sum past 1), an eighth needs another."""
    from decimal import Decimal

    from controller.model import PendingPod, PodRef
    from controller.packing import device_shares, gpu_need, gpu_use, pack
    from intent.contract import Intent, Source

    def pending(name: str, intent: Intent) -> PendingPod:
        return PendingPod(PodRef("ml", name, name), intent, None, None, ("mig",), (), None)

    mig = (Source("mig", "nvidia.com/mig-1g.5gb"),)
    slice_ = Intent(Decimal("0.142858"), "a100", None, 5120, mig, 40960)
    assert 1 - Decimal("1e-19") < gpu_need(slice_) * 7 <= 1
    three = Intent(
        Decimal("0.428572"), "a100", None, 20480, (Source("mig", "nvidia.com/mig-3g.20gb"),), 40960
    )
    assert abs(gpu_need(three) - Decimal(3) / Decimal(7)) < Decimal("1e-19")
    a30 = Intent(
        Decimal("0.25"), "a30", None, 6144, (Source("mig", "nvidia.com/mig-1g.6gb"),), 24576
    )
    assert gpu_need(a30) == Decimal("0.25")
    seven = [pending(f"s{i}", intent=slice_) for i in range(7)]
    assert [b.size for b in pack(seven)] == [1]
    assert sorted(b.size for b in pack([*seven, pending("s7", intent=slice_)])) == [1, 1]
    # Three 3g.20gb slices (9/7 GPU) are slices, not vGPUs on two cards: they take their
    # compute share once bound and open no per-card bin.
    nine = Intent(Decimal("1.285715"), "a100", None, 20480, three.source, 40960)
    assert gpu_use(nine) == gpu_need(nine) and device_shares(nine) is None
    assert [(b.size, b.cards) for b in pack([pending("n", intent=nine)])] == [(2, [])]


def test_volcano_vgpu_shares_read_like_hamis() -> None:
    """Volcano's vGPU plugin is HAMi's: ten vGPUs to a card at most, and its cores and
    memory percentage are shares of one card."""
    from decimal import Decimal

    from controller.packing import gpu_need
    from intent.contract import Intent, Source

    memory = (
        Source("volcano", "volcano.sh/vgpu-number"),
        Source("volcano", "volcano.sh/vgpu-memory"),
    )
    assert gpu_need(Intent(Decimal("0.021845"), "l4", None, 500, memory, 22888)) == Decimal("0.1")
    cores = (*memory, Source("volcano", "volcano.sh/vgpu-cores"))
    assert gpu_need(Intent(Decimal("0.5"), "l4", None, 2000, cores, 22888)) == Decimal("0.5")
