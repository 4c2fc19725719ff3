#!/usr/bin/env python3
"""Kubernetes commands for tests/e2e/cloudnative-pg.sh, on tests/lib/kube.py's
client (standard library only: no kubectl, no PyYAML).

The API server and the admin credentials come from the environment:
E2E_SERVER (https://127.0.0.1:PORT), E2E_CA, E2E_CERT, E2E_KEY.

Commands:
  apply FILE...                     create or replace every object of each JSON
                                    file (an object, a List or a JSON array)
  get PATH                          print one object (PATH as for the API, or
                                    KIND NAMESPACE NAME)
  delete KIND NAMESPACE NAME        delete one object (absent is fine)
  wait KIND NAMESPACE NAME EXPR [--timeout S] [--what TEXT] [--show EXPR2]
                                    poll until the Python expression EXPR over
                                    `o` (the object as a dict; modules json and
                                    re at hand) is true, then print EXPR2 if
                                    given; on timeout print what was last seen
                                    and exit 1
  wait-crds NAME...                 wait until each CRD is Established
  patch-status KIND NAMESPACE NAME JSON
                                    merge-patch the status subresource
  events NAMESPACE                  print the namespace's events, one a line
  token NAMESPACE SERVICEACCOUNT    print a token for the ServiceAccount
                                    (TokenRequest API, valid one hour)
"""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from kube import RESOURCES, ApiError, Kube, resource_path

# The kinds these commands know -> their apiVersion (paths: kube.RESOURCES).
KINDS = {
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "Namespace": "v1",
    "Secret": "v1",
    "Service": "v1",
    "Pod": "v1",
    "PersistentVolumeClaim": "v1",
    "Event": "v1",
    "ServiceAccount": "v1",
    "Job": "batch/v1",
    "Cluster": "postgresql.cnpg.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
}
ALIASES = {
    "crd": "CustomResourceDefinition",
    "ns": "Namespace",
    "secret": "Secret",
    "service": "Service",
    "svc": "Service",
    "pod": "Pod",
    "pvc": "PersistentVolumeClaim",
    "event": "Event",
    "job": "Job",
    "cluster": "Cluster",
}


def kind_of(name):
    kind = ALIASES.get(name.lower(), name)
    if kind not in KINDS:
        sys.exit(f"kubecli.py: unknown kind {name!r}")
    return kind


def namespaced(kind):
    return RESOURCES[(KINDS[kind], kind)][2]


def collection_path(kind, namespace=None):
    if namespaced(kind) and not namespace:
        raise SystemExit(f"kubecli.py: a {kind} needs a namespace")
    return resource_path(KINDS[kind], kind, namespace)


def object_path(kind, namespace, name):
    return f"{collection_path(kind, namespace)}/{name}"


def objects_of(doc):
    if isinstance(doc, list):
        for item in doc:
            yield from objects_of(item)
    elif doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
        for item in doc["items"]:
            yield from objects_of(item)
    else:
        yield doc


def apply(client, obj):
    kind = obj["kind"]
    if kind not in KINDS:
        raise SystemExit(f"kubecli.py: cannot apply a {kind}")
    meta = obj["metadata"]
    coll = collection_path(kind, meta.get("namespace"))
    try:
        client.request("POST", coll, obj)
        return "created"
    except ApiError as e:
        if e.status != 409:
            raise
    path = f"{coll}/{meta['name']}"
    current = client.get(path)
    obj = dict(obj)
    obj["metadata"] = dict(meta, resourceVersion=current["metadata"]["resourceVersion"])
    client.request("PUT", path, obj)
    return "replaced"


def summary(o):
    """What to print when a wait times out: the object without its noise."""
    if not isinstance(o, dict):
        return repr(o)
    meta = o.get("metadata", {})
    kind = o.get("kind")
    if kind == "Pod":
        o = {
            "labels": meta.get("labels"),
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k != "cnpg.io/podSpec"},
            "containers": [(c.get("name"), c.get("image")) for c in o.get("spec", {}).get("containers", [])],
            "initContainers": [(c.get("name"), c.get("image"), c.get("restartPolicy")) for c in o.get("spec", {}).get("initContainers", [])],
            "phase": o.get("status", {}).get("phase"),
        }
    elif kind == "Cluster":
        o = {"annotations": meta.get("annotations"), "status": o.get("status")}
    text = json.dumps(o, sort_keys=True)
    return text if len(text) < 3000 else text[:3000] + "…"


# What wait's expressions may use besides `o`.
GLOBALS = {"json": json, "re": re}


def cmd_wait(client, args):
    timeout = 60.0
    what = None
    show = None
    rest = []
    it = iter(args)
    for a in it:
        if a == "--timeout":
            timeout = float(next(it))
        elif a == "--what":
            what = next(it)
        elif a == "--show":
            show = compile(next(it), "<show>", "eval")
        else:
            rest.append(a)
    if len(rest) != 4:
        sys.exit("usage: kubecli.py wait KIND NAMESPACE NAME EXPR [--timeout S] [--what TEXT] [--show EXPR]")
    kind, namespace, name, expr = rest
    kind = kind_of(kind)
    path = object_path(kind, namespace if namespaced(kind) else None, name)
    code = compile(expr, "<expr>", "eval")
    deadline = time.monotonic() + timeout
    last, last_error = None, None
    while True:
        try:
            last = client.maybe_get(path)
            if last is not None and eval(code, GLOBALS, {"o": last}):
                if show is not None:
                    print(eval(show, GLOBALS, {"o": last}))
                return 0
            last_error = None
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            last_error = f"{type(e).__name__}: {e}"
        except (ApiError, OSError) as e:
            last_error = str(e)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    label = what or expr
    print(f"  timed out after {timeout:.0f}s waiting for {kind} {namespace}/{name}: {label}", file=sys.stderr)
    if last_error:
        print(f"  last error evaluating it: {last_error}", file=sys.stderr)
    print(f"  last seen: {summary(last) if last is not None else 'absent (404)'}", file=sys.stderr)
    return 1


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    client = Kube.from_env()
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "apply":
            for f in args:
                with open(f, encoding="utf-8") as fh:
                    doc = json.load(fh)
                for obj in objects_of(doc):
                    how = apply(client, obj)
                    ns = obj["metadata"].get("namespace")
                    print(f"{obj['kind']} {ns + '/' if ns else ''}{obj['metadata']['name']} {how}", file=sys.stderr)
            return 0
        if cmd == "get":
            if len(args) == 1:
                path = args[0]
            else:
                kind = kind_of(args[0])
                path = object_path(kind, args[1] if namespaced(kind) else None, args[-1])
            print(json.dumps(client.get(path)))
            return 0
        if cmd == "delete":
            kind = kind_of(args[0])
            try:
                client.request("DELETE", object_path(kind, args[1] if namespaced(kind) else None, args[2]))
            except ApiError as e:
                if e.status != 404:
                    raise
            return 0
        if cmd == "wait":
            return cmd_wait(client, args)
        if cmd == "wait-crds":
            for name in args:
                rc = cmd_wait(
                    client,
                    [
                        "crd",
                        "-",
                        name,
                        "any(c['type'] == 'Established' and c['status'] == 'True' for c in o.get('status', {}).get('conditions', []))",
                        "--what",
                        "Established",
                    ],
                )
                if rc:
                    return rc
            return 0
        if cmd == "patch-status":
            kind = kind_of(args[0])
            path = object_path(kind, args[1], args[2]) + "/status"
            client.merge_patch(path, json.loads(args[3]))
            return 0
        if cmd == "token":
            request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
            answer = client.request("POST", object_path("ServiceAccount", args[0], args[1]) + "/token", request)
            print(answer["status"]["token"])
            return 0
        if cmd == "events":
            for e in client.get(collection_path("Event", args[0]))["items"]:
                involved = e.get("involvedObject", {})
                print(f"{e.get('type')} {involved.get('kind')}/{involved.get('name')} {e.get('reason')}: {e.get('message')}")
            return 0
    except ApiError as e:
        print(f"kubecli.py {cmd}: {e}", file=sys.stderr)
        return 1
    print(f"kubecli.py: unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
