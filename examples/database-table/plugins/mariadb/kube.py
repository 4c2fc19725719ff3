"""A server's credentials: Secret `<serverName>-app` read through the Kubernetes API.

The keys `username`, `password` and `dbname` (CloudNativePG's convention for
its `-app` Secret, the one rule for users of both implementations). The
plugin reads the Secret with its Pod's ServiceAccount token (it needs `get` on
Secrets in the tables' namespaces), as the PostgreSQL plugin does with kube's
in-cluster configuration:

  API server   https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
  token        /var/run/secrets/kubernetes.io/serviceaccount/token (read at
               every request: bound tokens are rotated)
  CA           /var/run/secrets/kubernetes.io/serviceaccount/ca.crt

Out of a cluster (tests, a port-forward), --kube-api-server URL (http or
https), --kube-token-file and --kube-ca-file say otherwise (env
DBT_KUBE_API_SERVER, DBT_KUBE_TOKEN_FILE, DBT_KUBE_CA_FILE). Kubeconfig files
are not read.
"""

import base64
import binascii
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# The deadline of one request to the API server.
API_TIMEOUT = 5.0
KEYS = ("username", "password", "dbname")


class CredentialsError(Exception):
    """The credentials cannot be read; the message says what failed and what to do."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    dbname: str


@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to authenticate to it."""

    server: str | None
    token_file: str
    ca_file: str | None

    @classmethod
    def from_flags(cls, server=None, token_file=None, ca_file=None):
        if not server:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            server = f"https://{'[' + host + ']' if host and ':' in host else host}:{port}" if host else None
        return cls(
            server=server.rstrip("/") if server else None,
            token_file=token_file or os.path.join(SERVICE_ACCOUNT, "token"),
            ca_file=ca_file or (None if server and server.startswith("http:") else os.path.join(SERVICE_ACCOUNT, "ca.crt")),
        )


def add_flags(parser, flag):
    """The --kube-* flags (`flag` adds a flag with its environment variable)."""
    flag(parser, "--kube-api-server", "DBT_KUBE_API_SERVER", help="the Kubernetes API server's URL (default: in-cluster)")
    flag(parser, "--kube-token-file", "DBT_KUBE_TOKEN_FILE", help=f"its bearer token file (default {SERVICE_ACCOUNT}/token)")
    flag(parser, "--kube-ca-file", "DBT_KUBE_CA_FILE", help=f"the CA of its certificate (default {SERVICE_ACCOUNT}/ca.crt)")


def read_secret(config, namespace, name, timeout=API_TIMEOUT):
    """Credentials from Secret namespace/name."""
    where = f"Secret {namespace}/{name}"
    if not config.server:
        raise CredentialsError(f"cannot read {where}: not in a cluster (no KUBERNETES_SERVICE_HOST): give --kube-api-server")
    try:
        with open(config.token_file) as f:
            token = f.read().strip()
    except OSError as error:
        raise CredentialsError(f"cannot read {where}: no ServiceAccount token: {error}: mount one or give --kube-token-file") from error
    path = f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/secrets/{urllib.parse.quote(name, safe='')}"
    request = urllib.request.Request(config.server + path, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    context = None
    if config.server.startswith("https:"):
        try:
            context = ssl.create_default_context(cafile=config.ca_file)
        except (OSError, ssl.SSLError) as error:
            raise CredentialsError(f"cannot read {where}: the API server's CA {config.ca_file}: {error}: give --kube-ca-file") from error
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            secret = json.load(answer)
    except urllib.error.HTTPError as error:
        hint = {
            401: "the ServiceAccount token was refused",
            403: "the plugin's ServiceAccount needs get on secrets in this namespace (RBAC)",
            404: "create it with the keys username, password and dbname",
        }.get(error.code, "the API server refused")
        raise CredentialsError(f"cannot read {where}: HTTP {error.code} {error.reason}: {hint}") from error
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise CredentialsError(f"cannot read {where} from the API server {config.server} within {timeout:.0f} s: {error}") from error
    data = secret.get("data") or {}
    values = {}
    for key in KEYS:
        try:
            values[key] = base64.b64decode(data[key], validate=True).decode()
        except (KeyError, TypeError, binascii.Error, UnicodeDecodeError) as error:
            raise CredentialsError(f"{where} has no UTF-8 {key!r} key: it needs username, password and dbname") from error
    return Credentials(**values)
