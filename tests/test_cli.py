"""First contact with the ``gpu-intent`` command: bad input ends in one line naming it and
exit code 2, ``--help`` describes everything, ``--log-format json`` is JSON."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import socket
import ssl
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from webhook_support import encrypted, load, request_bytes

from certs import write_tls_files
from gpu_intent import cli
from gpu_intent.demo import default_examples
from sim.kubeconfig import write_kubeconfig

ROOT = Path(__file__).resolve().parents[1]


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m gpu_intent ARGS`` on this checkout, with no cluster in the environment."""
    base = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "gpu_intent", *args],
        capture_output=True, text=True, env={**base, **(env or {})}, timeout=timeout, check=False,
    )  # fmt: skip


def one_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Assert exit code 2 and a single stderr line holding every needle; return it."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig that loads, for a server nobody listens on."""
    tls = write_tls_files(tmp_path / "apiserver", ["localhost"], ["127.0.0.1"])
    return write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:9", tls.ca_cert, "token")


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["controller", "certs"])
def test_a_missing_kubeconfig_names_the_file(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config"
    extra = ["--secret", "s", "--namespace", "n", "--service", "v", "--webhook-configuration", "w"]
    args = [command, "--kubeconfig", str(missing), *(extra if command == "certs" else [])]
    one_line(run(*args), f"gpu-intent {command}:", f"kubeconfig file {missing}", "does not exist")
    one_line(run(*args[:1], *args[3:], env={"KUBECONFIG": str(missing)}), "(from $KUBECONFIG)")


def test_no_cluster_at_all_says_where_it_looked(tmp_path: Path) -> None:
    line = one_line(run("controller", env={"HOME": str(tmp_path)}), "no cluster to talk to")
    assert str(tmp_path / ".kube" / "config") in line


def test_a_kubeconfig_that_does_not_load_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    one_line(run("controller", "--kubeconfig", str(bad)), "cannot load the cluster configuration")


def test_a_missing_certificate_file_in_the_kubeconfig_is_named(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    missing = tmp_path / "ca.crt"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:9', certificate-authority: {missing}}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    one_line(run("controller", "--kubeconfig", str(kubeconfig)), "cannot load", str(missing))


def test_missing_or_mismatched_webhook_certificates_name_the_paths(tmp_path: Path) -> None:
    tls = write_tls_files(tmp_path / "a", ["localhost"])
    other = write_tls_files(tmp_path / "b", ["localhost"])
    missing = tmp_path / "missing.crt"
    one_line(
        run("webhook", "--tls-cert-file", str(missing), "--tls-key-file", str(tls.key)),
        f"--tls-cert-file {missing}: no such file",
    )
    one_line(
        run("webhook", "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tmp_path / "k")),
        f"--tls-key-file {tmp_path / 'k'}: no such file",
    )
    one_line(
        run("webhook", "--tls-cert-file", str(tls.cert), "--tls-key-file", str(other.key)),
        str(tls.cert), str(other.key), "do not load",
    )  # fmt: skip


def test_garbage_webhook_certificate_or_key_files_are_named_with_the_fix(
    tmp_path: Path,
) -> None:
    tls = write_tls_files(tmp_path / "tls", ["localhost"])
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("hello\n")
    one_line(
        run("webhook", "--tls-cert-file", str(garbage), "--tls-key-file", str(tls.key)),
        f"--tls-cert-file {garbage}: not a PEM certificate (",
        "point it at the tls.crt of the webhook's TLS Secret",
    )
    one_line(
        run("webhook", "--tls-cert-file", str(tls.cert), "--tls-key-file", str(garbage)),
        f"--tls-key-file {garbage}: not a PEM private key (",
        "point it at the tls.key of the webhook's TLS Secret",
    )
    other = write_tls_files(tmp_path / "other", ["localhost"])
    one_line(
        run("webhook", "--tls-cert-file", str(tls.cert), "--tls-key-file", str(other.key)),
        f"--tls-cert-file {tls.cert} and --tls-key-file {other.key} do not load:",
        "the private key is not the certificate's",
    )


def _controlling_terminal() -> None:
    """In the child, after setsid: make its stdin (a pty) the controlling terminal, the
    /dev/tty OpenSSL's passphrase prompt opens."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.skipif(sys.platform != "linux", reason="a pty as controlling terminal")
def test_an_encrypted_webhook_key_is_refused_without_a_passphrase_prompt(
    tmp_path: Path,
) -> None:
    """On a terminal, OpenSSL would prompt "Enter PEM pass phrase:" and wait forever
    (CPython docs, ssl.SSLContext.load_cert_chain, password None); the command must
    refuse the key at once, exit 2, and write nothing to the terminal."""
    tls = write_tls_files(tmp_path / "tls", ["localhost"])
    key = tmp_path / "encrypted.key"
    key.write_bytes(encrypted(tls.key.read_bytes()))
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    env["PYTHONPATH"] = str(ROOT)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_intent", "webhook", "--listen=127.0.0.1:0",
             "--tls-cert-file", str(tls.cert), "--tls-key-file", str(key)],
            stdin=slave, stdout=slave, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True, preexec_fn=_controlling_terminal,
        )  # fmt: skip
        os.close(slave)
        slave = -1
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("gpu-intent webhook hung: prompting for a passphrase?")
        terminal = b""
        while select.select([master], [], [], 0)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child's end is closed
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    assert b"pass phrase" not in terminal.lower(), terminal
    result = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
    one_line(
        result,
        f"--tls-key-file {key}: is encrypted with a passphrase;",
        "the webhook needs an unencrypted key",
    )


def test_a_malformed_examples_file_names_it(tmp_path: Path) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "10-nodepools.yaml").write_text(
        (default_examples() / "10-nodepools.yaml").read_text()
    )
    bad = examples / "20-pods.yaml"
    bad.write_text("kind: Pod\nmetadata: [unclosed\n")
    one_line(run("demo", "--examples", str(bad.parent)), "gpu-intent demo:", str(bad), "YAML")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--log-level", "foo", "explain", "-f", "-"], ["--log-level", "'foo'", "DEBUG"]),
        (["--log-format", "xml", "explain", "-f", "-"], ["--log-format", "'xml'"]),
        (["certs", "--days", "-3", "--out-dir", "x"], ["--days", "'-3'", "> 0"]),
        (["certs", "--ca-days", "0", "--out-dir", "x"], ["--ca-days", "'0'"]),
        (["certs", "--renew-before-days", "-1", "--out-dir", "x"], ["--renew-before-days"]),
        (["controller", "--max-triggers", "-5"], ["--max-triggers", "'-5'", ">= 0"]),
        (["controller", "--max-triggers", "many"], ["--max-triggers", "whole number"]),
        (["controller", "--cover-seconds", "0"], ["--cover-seconds", "positive"]),
        (["controller", "--resync-seconds", "inf"], ["--resync-seconds", "positive"]),
        (["controller", "--leader-election-lease-duration", "-1"], ["--leader-election-lease-duration"]),
        (["controller", "--metrics-address", "localhost"], ["--metrics-address", "HOST:PORT"]),
        (["webhook", "--tls-cert-file", "a", "--tls-key-file", "b", "--body-timeout", "nan"],
         ["--body-timeout", "positive"]),
        (["webhook", "--tls-cert-file", "a", "--tls-key-file", "b", "--drain-seconds", "-1"],
         ["--drain-seconds", "'-1'", ">= 0"]),
        (["webhook", "--tls-cert-file", "a", "--tls-key-file", "b", "--review-budget", "0"],
         ["--review-budget", "positive"]),
        (["demo", "--timeout", "-1"], ["--timeout", "positive"]),
    ],
)  # fmt: skip
def test_bad_values_are_rejected_by_argparse_with_one_line(
    args: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_a_bad_log_level_or_format_from_the_environment_is_rejected_too() -> None:
    one_line(run("explain", "-f", "-", env={"LOG_LEVEL": "loud"}), "--log-level", "'loud'")
    one_line(run("explain", "-f", "-", env={"LOG_FORMAT": "xml"}), "--log-format", "'xml'")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--days", "3", "--out-dir", "{tmp}/d"], ["--dns-name or --ip"]),
        (["--out-dir", "{tmp}/d", "--secret", "s", "--dns-name", "a"], ["not both"]),
        (["--secret", "s", "--namespace", "n"], ["--webhook-configuration"]),
        (["--secret", "s", "--namespace", "n", "--service", "v", "--webhook-configuration", "w",
          "--days", "90", "--renew-before-days", "90"], ["renew-before-days (90)", "days (90)"]),
        (["--secret", "s", "--namespace", "n", "--service", "v", "--webhook-configuration", "w",
          "--ca-days", "100"], ["ca-days (100)", "120"]),
        (["--out-dir", "{tmp}/d", "--dns-name", "has space"], ["'has space'"]),
    ],
)  # fmt: skip
def test_certs_usage_errors_are_one_line(
    args: list[str], needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["certs", *(a.replace("{tmp}", str(tmp_path)) for a in args)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-intent certs: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_an_unwritable_out_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    one_line(
        run("certs", "--out-dir", str(blocker / "tls"), "--dns-name", "a"),
        f"cannot write to --out-dir {blocker / 'tls'}",
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        one_line(run("certs", "--out-dir", str(locked), "--dns-name", "a"), str(locked))


def test_out_dir_keys_are_private_and_ignored_by_git(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["certs", "--out-dir", str(tmp_path / "tls"), "--dns-name", "a.b.svc"]) == 0
    assert stat.S_IMODE((tmp_path / "tls" / "tls.key").stat().st_mode) == 0o600
    assert "mode 0600" in capsys.readouterr().out
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "tls/" in ignored and "*.key" in ignored
    paths = ["tls/tls.key", "tls/ca.crt", "deploy/ca.key"]
    probe = subprocess.run(
        ["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if "not a git repository" in probe.stderr:
        pytest.skip("not a git checkout")
    assert probe.stdout.splitlines() == paths  # every one is ignored


def test_a_taken_metrics_port_is_one_line_and_leaks_no_session(kubeconfig: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            "controller", "--kubeconfig", str(kubeconfig), "--no-leader-elect",
            f"--metrics-address=127.0.0.1:{port}",
        )  # fmt: skip
    one_line(result, f"--metrics-address 127.0.0.1:{port}", "in use")
    assert "Unclosed" not in result.stderr


def test_a_taken_webhook_port_is_one_line(tmp_path: Path) -> None:
    tls = write_tls_files(tmp_path / "tls", ["localhost"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            "webhook", f"--listen=127.0.0.1:{port}",
            "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key),
        )  # fmt: skip
    one_line(result, f"--listen 127.0.0.1:{port}", "in use")


# --- the GPU catalog -----------------------------------------------------------------

#: A catalog file with a GPU the built-in catalog does not know, as a DRA driver names it.
EXTRA_GPU = """\
gpus:
  x9000:
    model: x9000
    vendor: nvidia
    memory_mib: 65536
    product_names: ["NVIDIA X9000"]
    architecture: Blackwell
"""


def test_the_controller_infers_dra_pods_with_its_catalog_file(tmp_path: Path) -> None:
    """``controller --catalog FILE`` (the webhook's flag): the controller's configuration
    carries the file's catalog, and a DRA claim selecting the extra GPU's product name
    gets that GPU's model, which the built-in catalog leaves open."""
    from controller.dra import intents_to_record
    from gpu_intent.cli import controller as controller_cli
    from gpu_intent.cli.common import read_catalog
    from intent.catalog import Catalog
    from intent.contract import Intent

    file = tmp_path / "catalog.yaml"
    file.write_text(EXTRA_GPU)
    args = cli.build_parser().parse_args(["controller", "--catalog", str(file)])
    config = controller_cli.controller_config(args, read_catalog(args))
    assert config.catalog is not None and config.catalog.gpus["x9000"].memory_mib == 65536
    assert controller_cli.controller_config(args).catalog is None  # without it: built-in
    selector = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA X9000"'
    pod = {
        "metadata": {"name": "a", "namespace": "ml", "uid": "u", "annotations": {}},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}],
                 "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }  # fmt: skip
    claims = {("ml", "c1"): {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": selector}}]}}]}}}  # fmt: skip

    def model(catalog: Catalog | None) -> str | None:
        [recorded], errors = intents_to_record([pod], claims, {"ml"}, catalog=catalog)
        assert errors == []
        intent = Intent.from_annotations(recorded.annotations)
        assert intent is not None
        return intent.model

    assert model(config.catalog) == "x9000"
    assert model(None) is None


def test_the_controller_refuses_to_start_on_a_catalog_that_does_not_load(tmp_path: Path) -> None:
    """Before it connects: one line naming the file and the entry, exit code 2."""
    file = tmp_path / "catalog.yaml"
    file.write_text("gpus: [1]\n")
    one_line(run("controller", "--catalog", str(file)), str(file), "gpus: must be a mapping")
    one_line(run("controller", "--catalog", str(tmp_path / "absent.yaml")), "absent.yaml")


# --- help ----------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_subcommand_and_option_is_described_with_its_default() -> None:
    parser = cli.build_parser()
    commands = _subcommands(parser)
    assert set(commands) == {"webhook", "controller", "explain", "certs", "demo"}
    for name, sub in [("gpu-intent", parser), *commands.items()]:
        assert sub.description, name
        formatter = sub._get_formatter()
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions)
                continue
            assert action.help, (name, action.option_strings)
            shown = formatter._expand_help(action)
            if action.default not in (None, False, [], argparse.SUPPRESS):
                assert "default" in shown, (name, action.option_strings, shown)
    for name in ["", *commands]:
        text = run(*([name] if name else []), "--help").stdout
        assert "``" not in text and "`" not in text.replace("'", ""), name
        assert "usage: gpu-intent" in text


# --- JSON logs -----------------------------------------------------------------------


def test_json_log_lines_are_json_and_name_the_pod(tmp_path: Path) -> None:
    from test_webhook_server import free_port

    tls = write_tls_files(tmp_path / "tls", ["localhost"], ["127.0.0.1"])
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_intent", "--log-format", "json", "--log-level", "debug",
         "webhook", f"--listen=127.0.0.1:{port}", "--tls-cert-file", str(tls.cert),
         "--tls-key-file", str(tls.key), "--drain-seconds=0"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_cert))
        review = json.dumps(load("02-hami-gpumem-annotated.json")).encode()
        deadline = time.monotonic() + 30
        while True:
            try:
                with (
                    socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                    context.wrap_socket(raw, server_hostname="localhost") as conn,
                ):
                    conn.sendall(request_bytes(review, close=True))
                    answer = b""
                    while chunk := conn.recv(65536):
                        answer += chunk
                break
            except OSError:
                assert time.monotonic() < deadline, "the webhook never listened"
                time.sleep(0.1)
        assert answer.startswith(b"HTTP/1.1 200")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in err.splitlines()]  # every line is one object
    assert len(records) >= 3
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert record["time"].endswith("Z")
    pod = load("02-hami-gpumem-annotated.json")["request"]["object"]["metadata"]
    about = [r for r in records if "object" in r]
    assert about and about[0]["object"] == f"{pod['namespace']}/{pod['name']}"
    assert about[0]["logger"] == "webhook.server" and about[0]["level"] == "INFO"
    assert any(r["message"].startswith("webhook listening on") for r in records)
