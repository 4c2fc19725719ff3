"""The Kubernetes API client of the suites, over plain HTTPS (no kubectl, no client library).

Reads a kubeconfig (file paths or embedded data; client certificates or a
bearer token; PyYAML needed only for that) or the e2e control plane's
environment, and speaks JSON to the API server. Every error names the
request that failed and what the server said.
"""

import atexit
import base64
import contextlib
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse

# apiVersion/kind -> (path prefix, plural, namespaced)
RESOURCES = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts", True),
    ("v1", "Secret"): ("/api/v1", "secrets", True),
    ("v1", "Service"): ("/api/v1", "services", True),
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("v1", "ResourceQuota"): ("/api/v1", "resourcequotas", True),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims", True),
    ("v1", "Event"): ("/api/v1", "events", True),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    ("v1", "Node"): ("/api/v1", "nodes", False),
    ("cnpgi.io/v1", "Cluster"): ("/apis/cnpgi.io/v1", "clusters", True),
    ("postgresql.cnpg.io/v1", "Cluster"): ("/apis/postgresql.cnpg.io/v1", "clusters", True),
    ("postgresql.cnpg.io/v1", "Backup"): ("/apis/postgresql.cnpg.io/v1", "backups", True),
    ("example.cnpgi.io/v1", "DatabaseTable"): ("/apis/example.cnpgi.io/v1", "databasetables", True),
    ("events.k8s.io/v1", "Event"): ("/apis/events.k8s.io/v1", "events", True),
    ("coordination.k8s.io/v1", "Lease"): ("/apis/coordination.k8s.io/v1", "leases", True),
}


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, method, path, status, body):
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else None
        super().__init__(f"{method} {path}: HTTP {status}: {message or body}")


def resource_path(api_version, kind, namespace=None, name=None, subresource=None):
    try:
        prefix, plural, namespaced = RESOURCES[(api_version, kind)]
    except KeyError:
        raise ValueError(f"no API path known for {api_version} {kind}") from None
    path = prefix
    if namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def object_path(obj, subresource=None, with_name=True):
    meta = obj.get("metadata", {})
    return resource_path(
        obj["apiVersion"],
        obj["kind"],
        meta.get("namespace"),
        meta.get("name") if with_name else None,
        subresource,
    )


class Kube:
    """A client for one API server and one identity."""

    def __init__(self, server, ca_file, cert_file=None, key_file=None, token=None, user_agent="cnpgi-e2e"):
        url = urllib.parse.urlparse(server)
        if url.scheme != "https":
            raise ValueError(f"the API server must be https://, not {server}")
        self.host = url.hostname
        self.port = url.port or 443
        self.token = token
        self.user_agent = user_agent
        self.context = ssl.create_default_context(cafile=ca_file)
        if cert_file:
            self.context.load_cert_chain(cert_file, key_file)
        self.server = server
        self.ca_file = ca_file

    @classmethod
    def from_env(cls):
        """The API server and admin credentials of the e2e control plane:
        E2E_SERVER (https://127.0.0.1:PORT), E2E_CA, E2E_CERT, E2E_KEY."""
        try:
            return cls(os.environ["E2E_SERVER"].rstrip("/"), os.environ["E2E_CA"], os.environ["E2E_CERT"], os.environ["E2E_KEY"])
        except KeyError as e:
            raise SystemExit(f"kube.py: environment variable {e} is not set") from None

    @classmethod
    def from_kubeconfig(cls, path):
        import yaml  # only kubeconfig files need PyYAML

        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        base = os.path.dirname(os.path.abspath(path))
        current = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == current)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])

        def file_of(entry, key):
            if entry.get(key):
                return os.path.join(base, entry[key])
            data = entry.get(key + "-data")
            if not data:
                return None
            # The client's key among them: removed when this process ends,
            # not left in /tmp.
            with tempfile.NamedTemporaryFile(prefix="kubeconfig-", delete=False) as f:
                f.write(base64.b64decode(data))
            atexit.register(_remove_quietly, f.name)
            return f.name

        return cls(
            cluster["server"],
            file_of(cluster, "certificate-authority"),
            file_of(user, "client-certificate"),
            file_of(user, "client-key"),
            user.get("token"),
        )

    def token_kubeconfig(self, namespace, service_account, path, seconds=3600):
        """Writes a kubeconfig for the ServiceAccount's token (TokenRequest API)
        to `path`, for this API server; a process started with it may do
        exactly what the RBAC grants the ServiceAccount."""
        answer = self.request(
            "POST",
            resource_path("v1", "ServiceAccount", namespace, service_account, "token"),
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        with open(self.ca_file, "rb") as f:
            ca_data = base64.b64encode(f.read()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": self.server, "certificate-authority-data": ca_data}}],
            "users": [{"name": service_account, "user": {"token": answer["status"]["token"]}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": service_account}}],
            "current-context": "e2e",
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        return path

    def can(self, verb, resource, namespace=None, group=""):
        """Whether this identity may `verb` `resource` (SelfSubjectAccessReview)."""
        attributes = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attributes["namespace"] = namespace
        review = self.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attributes}},
        )
        return bool(review["status"].get("allowed"))

    def request(self, method, path, body=None, content_type="application/json", query=None):
        if query:
            path = path + "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            headers["Content-Type"] = content_type
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except OSError as e:
            raise ApiError(method, path, 0, {"message": f"connection failed: {e}"}) from e
        finally:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"message": raw.decode("utf-8", "replace")}
        if response.status >= 400:
            raise ApiError(method, path, response.status, parsed)
        return parsed

    def get(self, path, **query):
        return self.request("GET", path, query=query or None)

    def maybe_get(self, path):
        """The object at `path`, or None when there is none (404)."""
        try:
            return self.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def create(self, obj, dry_run=False):
        return self.request("POST", object_path(obj, with_name=False), obj, query={"dryRun": "All"} if dry_run else None)

    def apply(self, obj, manager="cnpgi-e2e"):
        """Server-side apply (as `kubectl apply --server-side --force-conflicts`)."""
        return self.request(
            "PATCH",
            object_path(obj),
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true"},
        )

    def merge_patch(self, path, patch):
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path, missing_ok=True):
        try:
            return self.request("DELETE", path)
        except ApiError as e:
            if missing_ok and e.status == 404:
                return None
            raise


def load_yaml_documents(path):
    import yaml

    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def _remove_quietly(path):
    with contextlib.suppress(OSError):
        os.remove(path)
