#!/usr/bin/env python3
"""Calls the hello-world plugin binary the way the CloudNativePG operator does,
with a gRPC client generated independently (grpcio-tools) from this
repository's proto/ and certificates made by openssl (tests/lib/pki.py), not
by the Rust code.

Usage: python_client.py PATH_TO_cnpg-i-hello-world
Needs: grpcio, grpcio-tools (pip), openssl (CLI).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
SERVICE_NAME = "cnpg-i-hello-world"
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import pki  # noqa: E402 (tests/lib is found through ROOT)
from checks import Checks  # noqa: E402
from net import free_port  # noqa: E402
from waits import wait_for  # noqa: E402

CHECKS = Checks("interop")


def check(name, condition, detail=""):
    CHECKS.expect(name, condition, str(detail))


def generate_stubs(out):
    proto_dir = os.path.join(ROOT, "proto")
    files = ["identity.proto", "operator.proto", "operator_lifecycle.proto"]
    code = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}", *files])
    if code != 0:
        sys.exit(f"protoc failed on {files}")
    sys.path.insert(0, out)


def exercise(ch, label, identity, identity_grpc, operator, operator_grpc, lifecycle, lifecycle_grpc):
    """Every RPC the operator makes, on one channel; check names start with `label`."""
    ident = identity_grpc.IdentityStub(ch)
    op = operator_grpc.OperatorStub(ch)
    lc = lifecycle_grpc.OperatorLifecycleStub(ch)

    # The probing sequence of the operator.
    metadata = ident.GetPluginMetadata(identity.GetPluginMetadataRequest(), timeout=30)
    check(f"{label}: Identity/GetPluginMetadata name", metadata.name == PLUGIN, metadata.name)
    caps = ident.GetPluginCapabilities(identity.GetPluginCapabilitiesRequest(), timeout=30)
    services = {c.service.type for c in caps.capabilities}
    Svc = identity.PluginCapability.Service
    check(f"{label}: Identity/GetPluginCapabilities", services == {Svc.TYPE_OPERATOR_SERVICE, Svc.TYPE_LIFECYCLE_SERVICE}, services)
    check(f"{label}: Identity/Probe", ident.Probe(identity.ProbeRequest(), timeout=30).ready)
    rpcs = {c.rpc.type for c in op.GetCapabilities(operator.OperatorCapabilitiesRequest(), timeout=30).capabilities}
    R = operator.OperatorCapability.RPC
    check(
        f"{label}: Operator/GetCapabilities",
        rpcs == {R.TYPE_VALIDATE_CLUSTER_CREATE, R.TYPE_VALIDATE_CLUSTER_CHANGE, R.TYPE_MUTATE_CLUSTER, R.TYPE_SET_STATUS_IN_CLUSTER},
        rpcs,
    )
    lcaps = lc.GetCapabilities(lifecycle.OperatorLifecycleCapabilitiesRequest(), timeout=30).lifecycle_capabilities
    Op = lifecycle.OperatorOperationType
    check(
        f"{label}: OperatorLifecycle/GetCapabilities",
        len(lcaps) == 1
        and lcaps[0].group == ""
        and lcaps[0].kind == "Pod"
        and [t.type for t in lcaps[0].operation_types] == [Op.TYPE_CREATE, Op.TYPE_EVALUATE],
        lcaps,
    )

    def cluster(parameters):
        return {
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "c"},
            "spec": {"instances": 1, "plugins": [{"name": PLUGIN, "parameters": parameters}]},
        }

    # cnpg-i-machinery's path convention, with the raw parameter as the value.
    raw = '{"a": "b", this is a mistake}'
    errors = op.ValidateClusterCreate(
        operator.OperatorValidateClusterCreateRequest(definition=json.dumps(cluster({"annotations": raw})).encode()), timeout=30
    ).validation_errors
    check(
        f"{label}: Operator/ValidateClusterCreate mistake",
        len(errors) == 1 and list(errors[0].path_components) == ["spec", "plugins", "0", "annotations"] and errors[0].value == raw,
        errors,
    )
    errors = op.ValidateClusterChange(
        operator.OperatorValidateClusterChangeRequest(
            old_cluster=json.dumps(cluster({"labels": '{"a":"b"}'})).encode(),
            new_cluster=json.dumps(cluster({"labels": '{"a":"c"}', "annotations": raw})).encode(),
        ),
        timeout=30,
    ).validation_errors
    check(
        f"{label}: Operator/ValidateClusterChange reports every error",
        sorted(list(e.path_components) for e in errors) == [["spec", "plugins", "0", "annotations"], ["spec", "plugins", "0", "labels"]],
        errors,
    )
    patch = json.loads(op.MutateCluster(operator.OperatorMutateClusterRequest(definition=json.dumps(cluster({})).encode()), timeout=30).json_patch)
    paths = sorted(p["path"] for p in patch)
    check(f"{label}: Operator/MutateCluster defaults", paths == ["/spec/plugins/0/parameters/annotations", "/spec/plugins/0/parameters/labels"], patch)
    # As CloudNativePG: the plugin's status entry is written before the call.
    with_entry = cluster({})
    with_entry["status"] = {"pluginStatus": [{"name": PLUGIN, "version": metadata.version}]}
    status = op.SetStatusInCluster(operator.SetStatusInClusterRequest(cluster=json.dumps(with_entry).encode()), timeout=30).json_status
    check(f"{label}: Operator/SetStatusInCluster", json.loads(status) == {"enabled": True}, status)
    try:
        op.SetStatusInCluster(operator.SetStatusInClusterRequest(cluster=json.dumps(cluster({})).encode()), timeout=30)
        check(f"{label}: Operator/SetStatusInCluster without the entry is refused", False, "answered")
    except grpc.RpcError as e:
        check(f"{label}: Operator/SetStatusInCluster without the entry is refused", "plugin entry not found" in e.details(), e)

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c-1"}, "spec": {"containers": [{"name": "postgres", "image": "postgres"}]}}
    patch = json.loads(
        lc.LifecycleHook(
            lifecycle.OperatorLifecycleRequest(
                operation_type=Op(type=Op.TYPE_CREATE), cluster_definition=json.dumps(cluster({})).encode(), object_definition=json.dumps(pod).encode()
            ),
            timeout=30,
        ).json_patch
    )
    added = {p["path"]: p.get("value") for p in patch if p["op"] == "add"}
    init = added.get("/spec/initContainers") or []
    check(
        f"{label}: OperatorLifecycle/LifecycleHook pod patch",
        added.get("/metadata/labels") == {"plugin-metadata": "default"} and any(c["name"] == "pauser" and c.get("restartPolicy") == "Always" for c in init),
        patch,
    )

    try:
        op.ValidateClusterCreate(operator.OperatorValidateClusterCreateRequest(definition=b"\x00garbage"), timeout=30)
        check(f"{label}: garbage is INVALID_ARGUMENT", False, "answered")
    except grpc.RpcError as e:
        check(f"{label}: garbage is INVALID_ARGUMENT", e.code() == grpc.StatusCode.INVALID_ARGUMENT, e)


def main():
    binary = sys.argv[1]
    work = tempfile.mkdtemp()
    processes = []
    try:
        generate_stubs(work)
        import identity_pb2 as identity
        import identity_pb2_grpc as identity_grpc
        import operator_lifecycle_pb2 as lifecycle
        import operator_lifecycle_pb2_grpc as lifecycle_grpc
        import operator_pb2 as operator
        import operator_pb2_grpc as operator_grpc

        # Self-signed leaves, as cert-manager's selfSigned issuer makes them.
        pki.leaf(work, "server", f"/CN={SERVICE_NAME}", f"DNS:{SERVICE_NAME}", "serverAuth", days=30)
        pki.leaf(work, "client", "/CN=cnpg-operator", "", "clientAuth", days=30)
        pki.leaf(work, "stranger", "/CN=cnpg-operator", "", "clientAuth", days=30)

        # Over mutual TLS, as a remote plugin behind a Service.
        port = free_port()
        process = subprocess.Popen(
            [
                binary,
                "plugin",
                f"--server-address=127.0.0.1:{port}",
                f"--server-cert={work}/server.crt",
                f"--server-key={work}/server.key",
                f"--client-cert={work}/client.crt",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(process)

        def channel(client="client"):
            def read(name):
                return open(f"{work}/{name}", "rb").read()

            creds = grpc.ssl_channel_credentials(
                root_certificates=read("server.crt"), private_key=read(f"{client}.key"), certificate_chain=read(f"{client}.crt")
            )
            return grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", SERVICE_NAME)])

        ch = channel()
        grpc.channel_ready_future(ch).result(timeout=20)
        try:
            exercise(ch, "mTLS", identity, identity_grpc, operator, operator_grpc, lifecycle, lifecycle_grpc)
        except grpc.RpcError as e:
            check("mTLS: every RPC answers", False, e)
        try:
            stranger = identity_grpc.IdentityStub(channel("stranger"))
            stranger.GetPluginMetadata(identity.GetPluginMetadataRequest(), timeout=10)
            check("mTLS: unpinned client certificate refused", False, "answered")
        except grpc.RpcError as e:
            check("mTLS: unpinned client certificate refused", e.code() == grpc.StatusCode.UNAVAILABLE, e)
        ch.close()
        process.send_signal(signal.SIGTERM)
        check("mTLS: exit 0 on SIGTERM", process.wait(timeout=30) == 0)

        # Over a Unix socket, as a sidecar: grpcio sends the socket path as
        # :authority, and no override is set here on purpose.
        sockets = os.path.join(work, "plugins")
        os.mkdir(sockets)
        process = subprocess.Popen([binary, "plugin", f"--plugin-path={sockets}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(process)
        socket_path = os.path.join(sockets, PLUGIN)
        wait_for("the plugin's socket", lambda: os.path.exists(socket_path), timeout=20, interval=0.05)
        ch = grpc.insecure_channel(f"unix://{socket_path}")
        grpc.channel_ready_future(ch).result(timeout=20)
        try:
            exercise(ch, "Unix socket", identity, identity_grpc, operator, operator_grpc, lifecycle, lifecycle_grpc)
        except grpc.RpcError as e:
            check("Unix socket: every RPC answers", False, e)
        ch.close()
        process.send_signal(signal.SIGTERM)
        check("Unix socket: exit 0 on SIGTERM", process.wait(timeout=30) == 0)
        check("Unix socket: socket removed on exit", not os.path.exists(socket_path))
    finally:
        # Whatever failed above, no plugin outlives this script.
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(CHECKS.summary())


if __name__ == "__main__":
    main()
