

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
    assert untolerated_taint(tolerations, [taint, soft]) is None  # PreferNoSchedule keeps no pod off
    hard = {"key": "dra-only", "effect": "NoExecute"}
    assert untolerated_taint(tolerations, [taint, hard]) == hard
    assert untolerated_taint((), [taint]) == taint
