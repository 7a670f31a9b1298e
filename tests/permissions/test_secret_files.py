"""One list of secret files, used both ways (issue 34, findings 5 and 10): reading each common secret file
asks, and the sandbox hides each one below the places it shows (a PATH directory, `~/.config/git`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy, sensitive_reason
from kimicode.tools.base import ToolContext
from kimicode.tools.files import READ_FILE
from kimicode.tools.sandbox import Sandbox, probe

STATUS = probe()
needs_bwrap = pytest.mark.skipif(not STATUS.available, reason=f"bubblewrap cannot run here: {STATUS.reason}")

SECRET_FILES = (
    # env files
    ".env",
    ".env.local",
    ".env.production",
    ".env.development.local",
    "prod.env",
    "production.env",
    "dev.env",
    "staging.env",
    "local.env",
    "secrets.env",
    ".dev.vars",
    ".envrc",
    # private keys and certificate stores
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ed25519_work",
    "server.key",
    "server.pem",
    "tls.key",
    "cert.p12",
    "cert.pfx",
    "keystore.jks",
    "release.keystore",
    "putty.ppk",
    "AuthKey_ABC123.p8",
    "master.key",
    "secring.gpg",
    "passwords.kdbx",
    "krb5.keytab",
    "client.ovpn",
    # credential and token files
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pgpass",
    "pgpass.conf",
    ".my.cnf",
    ".mylogin.cnf",
    ".htpasswd",
    ".authinfo",
    ".authinfo.gpg",
    "credentials",
    "credentials.json",
    "credentials.toml",
    "credentials.csv",
    "credentials.yml.enc",
    "client_secret.json",
    "client_secret_1234-abc.apps.googleusercontent.com.json",
    "service-account.json",
    "service_account.json",
    "serviceAccountKey.json",
    "application_default_credentials.json",
    "myapp-firebase-adminsdk-x1y2.json",
    "token.json",
    "accessTokens.json",
    "local.settings.json",
    "secrets.yml",
    "secrets.yaml",
    "secrets.json",
    "secrets.toml",
    ".secrets",
    # cloud, infrastructure, registries
    "terraform.tfstate",
    "terraform.tfstate.backup",
    "prod.tfstate",
    "terraform.tfvars",
    "secrets.auto.tfvars",
    "credentials.tfrc.json",
    ".terraformrc",
    "terraform.rc",
    ".vault-token",
    ".vault_pass",
    "kubeconfig",
    "prod.kubeconfig",
    ".kube/config",
    ".docker/config.json",
    ".dockercfg",
    ".aws/credentials",
    ".aws/config",
    ".boto",
    ".s3cfg",
    ".passwd-s3fs",
    "rclone.conf",
    ".databrickscfg",
    ".sentryclirc",
    ".streamlit/secrets.toml",
    ".cargo/credentials",
    ".git/credentials",
)
NOT_SECRETS = (
    ".env.example",
    ".env.sample",
    "prod.env.template",
    "id_ed25519.pub",
    "config.json",
    "README.md",
    "settings.py",
    "package.json",
    "environment.yml",
    "keys.py",
    "tokenizer.json",
    "docker-compose.yml",
    ".venv",
    "monkey.txt",
)


def test_the_list_is_the_size_the_issue_counted() -> None:
    assert len(SECRET_FILES) >= 86 and len(set(SECRET_FILES)) == len(SECRET_FILES)


@pytest.mark.parametrize("name", SECRET_FILES)
def test_reading_a_common_secret_file_asks(tmp_path: Path, name: str) -> None:
    ws = tmp_path / "ws"
    path = ws / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("SECRET=1\n")
    why = sensitive_reason(path, user_home=tmp_path / "user", kimicode_home=tmp_path / "kc", workspace=ws)
    assert why is not None, name
    policy = Policy(user_home=tmp_path / "user", kimicode_home=tmp_path / "kc", workspace=ws)
    decision = decide(READ_FILE, {"path": name}, "accept-edits", ToolContext(workspace=ws), policy)
    assert decision.verdict == "ask", (name, decision)


@pytest.mark.parametrize("name", NOT_SECRETS)
def test_ordinary_files_read_without_asking(tmp_path: Path, name: str) -> None:
    ws = tmp_path / "ws"
    assert sensitive_reason(ws / name, user_home=tmp_path / "user", kimicode_home=tmp_path / "kc", workspace=ws) is None


@needs_bwrap
def test_the_sandbox_hides_every_secret_below_the_places_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Findings 5 and 10: git's credential store inside the shown ~/.config/git, and each common secret
    file placed in a directory on PATH, are hidden; the ordinary files beside them are shown."""
    assert STATUS.bwrap is not None
    home = tmp_path / "user"
    git = home / ".config" / "git"
    git.mkdir(parents=True)
    (git / "config").write_text("[user]\n\tname = visible\n")
    (git / "credentials").write_text("https://user:ghp_SECRETTOKEN@github.com\n")
    tools = home / "tools" / "bin"
    for name in (*SECRET_FILES, "ordinary.txt"):
        (tools / name).parent.mkdir(parents=True, exist_ok=True)
        (tools / name).write_text(f"SECRET-{name}\n" if name != "ordinary.txt" else "shown\n")
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    ws = tmp_path / "ws"
    ws.mkdir()
    sandbox = Sandbox(ws, STATUS.bwrap, user_home=home, kimicode_home=tmp_path / "kc")
    script = (
        f"cat {git}/config {git}/credentials; cd {tools} && cat ordinary.txt && cat -- "
        + " ".join(f"'{n}'" for n in SECRET_FILES)
        + " 2>&1; true"
    )
    done = subprocess.run(sandbox.wrap(["/bin/bash", "-c", script]), capture_output=True, text=True, timeout=60)
    assert "name = visible" in done.stdout and "shown" in done.stdout, done.stderr
    assert "ghp_SECRETTOKEN" not in done.stdout
    leaked = [n for n in SECRET_FILES if f"SECRET-{n}\n" in done.stdout]
    assert leaked == []


def test_a_secret_added_later_is_hidden_from_the_next_command(tmp_path: Path) -> None:
    """The scan of shown places is cached by directory mtime: a file added (or a `.docker/config.json`
    written into an existing `.docker`) changes what the next command's sandbox hides."""
    from kimicode.tools.sandbox_toolchains import secret_masks

    home = tmp_path / "user"
    tools = home / "tools"
    (tools / ".docker").mkdir(parents=True)
    (tools / "prog").write_text("x")
    assert secret_masks(str(home), [str(tools)]) == []
    (tools / ".bash_history").write_text("export TOKEN=1")  # the permission check's histories too
    assert str(tools / ".bash_history") in secret_masks(str(home), [str(tools)])
    (tools / ".env").write_text("TOKEN=1")
    assert str(tools / ".env") in secret_masks(str(home), [str(tools)])
    (tools / ".docker" / "config.json").write_text("{}")
    masks = secret_masks(str(home), [str(tools)])
    assert str(tools / ".docker" / "config.json") in masks and str(tools / "prog") not in masks
