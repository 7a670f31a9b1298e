"""The one list of files that hold secrets, by name: the permission checks ask before reading them and
the sandbox hides them below the places it shows (`kimicode.tools.sandbox_toolchains`).

Two kinds of entry. **Names** (anywhere: the workspace, a toolchain directory, a visible place): env
files (`.env*`, `*.env`, `.dev.vars`), private keys and certificate stores, credential and token files
of git, databases, clouds, Terraform, Vault, Kubernetes and Docker. **Home places**
(`HOME_CREDENTIAL_DIRS`, `CREDENTIAL_HOME_PATHS`, relative to the user's home): whole credential stores
(`~/.ssh`, `~/.aws`, git's `~/.config/git/credentials`, other agents' tokens). Each entry's reason is
what the user is told when a read asks.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Final

__all__ = ["CREDENTIAL_HOME_PATHS", "HOME_CREDENTIAL_DIRS", "SECRET_PARENTS", "TOKEN_FILES", "secret_name_reason"]

HOME_CREDENTIAL_DIRS: Final = (
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".kube",
    ".docker",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".terraform.d",
    ".password-store",
    ".local/share/keyrings",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".npmrc",
    ".pypirc",
    ".yarnrc.yml",
    ".vault-token",
    ".git-credentials",
    ".config/git/credentials",
)
"""Below the user's home directory: credential stores, read or written only with approval
(`.config/git/credentials` is git's credential store there: `~/.config/git` itself is shown)."""

CREDENTIAL_HOME_PATHS: Final = (
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".claude.json",
    ".kimi/credentials",
    ".kimi/config.toml",
    ".config/github-copilot",
    ".config/op",
    ".config/rclone",
    ".config/doctl",
    ".config/netlify",
    ".config/sops",
    ".config/age",
    ".config/hcloud",
    ".config/configstore",
    ".local/share/keyrings",
    ".local/share/kwalletd",
    ".local/share/password-store",
    ".local/share/fish/fish_history",
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".s3cfg",
    ".boto",
    ".oci",
    ".fly",
    ".vercel",
    ".wrangler",
    ".terraformrc",
    ".dockercfg",
    ".npmrc",
    ".yarnrc",
    ".bundle/config",
    ".composer/auth.json",
    ".config/composer/auth.json",
    ".gradle/gradle.properties",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".ipython/profile_default/history.sqlite",
    ".config/pypoetry/auth.toml",
    ".local/share/uv/credentials",
    ".databrickscfg",
    ".pulumi/credentials.json",
    ".config/helm/repositories.yaml",
    ".netrc",
    ".pgpass",
    ".my.cnf",
    ".mylogin.cnf",
    ".authinfo",
    ".authinfo.gpg",
    ".passwd-s3fs",
    ".sentryclirc",
    ".config/hcloud/cli.toml",
)
"""Below the user's home directory: other tools' credential stores (other agents' tokens, password
managers, keyrings, browsers' cookies, cloud and package registry logins). Reading them asks, and the
sandbox never shows them (hidden even below a visible place)."""

_TEMPLATE_SUFFIXES: Final = (".example", ".sample", ".template", ".dist", ".defaults", ".tmpl", ".tpl")
"""An env file or credentials file ending so is a template (`.env.example`): not a secret."""

_NAMES: Final[dict[str, str]] = {
    **dict.fromkeys(
        (
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
            "credentials.tfrc.json",
            "accesstokens.json",
            "application_default_credentials.json",
            "service-account.json",
            "service_account.json",
            "serviceaccountkey.json",
            "token.json",
            ".passwd-s3fs",
            "local.settings.json",
            ".databrickscfg",
            ".sentryclirc",
            ".boto",
            ".s3cfg",
            "rclone.conf",
            ".dockercfg",
        ),
        "holds credentials",
    ),
    **dict.fromkeys(
        ("secrets.yml", "secrets.yaml", "secrets.json", "secrets.toml", ".secrets", ".dev.vars"), "holds secrets"
    ),
    **dict.fromkeys(("terraform.tfvars", ".terraformrc", "terraform.rc"), "holds Terraform credentials or variables"),
    **dict.fromkeys(
        (".vault-token", ".vault_pass", ".vault_pass.txt", "vault_pass.txt"), "holds a Vault token or password"
    ),
    **dict.fromkeys(("kubeconfig",), "holds Kubernetes credentials"),
    **dict.fromkeys(("secring.gpg", "master.key"), "holds a private key"),
}
"""Exact file names (compared in lower case) and why each is sensitive."""

_SUFFIXES: Final[dict[str, str]] = {
    **dict.fromkeys(
        (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".ppk", ".p8", ".kdbx", ".keytab", ".ovpn"),
        "looks like a private key or certificate store",
    ),
    **dict.fromkeys((".tfstate", ".tfstate.backup"), "is Terraform state (it holds every resource's secrets)"),
    ".auto.tfvars": "holds Terraform credentials or variables",
    ".kubeconfig": "holds Kubernetes credentials",
    ".env": "usually holds secrets",
}
"""Name endings (lower case): `prod.env`, `server.key`, `prod.tfstate`."""

_KEY_PREFIXES: Final = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
"""ssh private keys, also under other names (`id_ed25519_work`); the `.pub` halves are public."""

_IN_DIRS: Final[dict[tuple[str, str], str]] = {
    (".docker", "config.json"): "holds Docker registry credentials",
    (".kube", "config"): "holds Kubernetes credentials",
    (".aws", "config"): "holds AWS configuration (and often keys)",
    (".streamlit", "secrets.toml"): "holds secrets",
    (".cargo", "credentials"): "holds credentials",
    (".git", "credentials"): "holds credentials",
}
"""(directory, name) pairs: a name that is a secret only in that directory (`.docker/config.json`)."""

SECRET_PARENTS: Final = frozenset(directory for directory, _ in _IN_DIRS)
"""The directory names of `_IN_DIRS`: where a scan of a shown place looks one level deeper."""

TOKEN_FILES: Final = frozenset({".npmrc", ".pypirc", ".yarnrc.yml", ".gem/credentials", ".cargo/credentials.toml"})
"""Package managers' configuration: sensitive when it holds a token or password (checked by content)."""


def secret_name_reason(path: PurePath) -> str | None:
    """Why a file at `path` probably holds secrets judging by its name (and its directory's), or None."""
    name = path.name
    lower = name.lower()
    if lower.endswith(_TEMPLATE_SUFFIXES) or lower.endswith(".pub"):
        return None
    if lower.startswith(".env"):
        return f"{name} usually holds secrets"
    why = _NAMES.get(lower) or _by_pattern(lower)
    if why is None and path.parent.name:
        why = _IN_DIRS.get((path.parent.name.lower(), lower))
    return f"{name} {why}" if why else None


def _by_pattern(lower: str) -> str | None:
    """The reason for a (lower-case) name by its prefix or ending: ssh keys, OAuth and service account
    keys, `_SUFFIXES` (`prod.env`, not a dotted expression such as jq's `.a.env` taken for a path)."""
    if lower.startswith(_KEY_PREFIXES):
        return "looks like a private key"
    if lower.endswith(".json") and (lower.startswith("client_secret") or "firebase-adminsdk" in lower):
        return "holds an OAuth client secret or a service account key"
    for suffix, why in _SUFFIXES.items():
        if lower.endswith(suffix) and not (suffix == ".env" and lower.startswith(".")):
            return why
    return None
