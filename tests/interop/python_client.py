#!/usr/bin/env python3
"""Calls the hello-world plugin binary the way the CloudNativePG operator does,
with a gRPC client generated independently (grpcio-tools) from this
repository's proto/ and certificates made by openssl, not by the Rust code.

Usage: python_client.py PATH_TO_cnpg-i-hello-world
Needs: grpcio, grpcio-tools (pip), openssl (CLI).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = "cnpg-i-hello-world.cloudnative-pg.io"
SERVICE_NAME = "cnpg-i-hello-world"
RESULTS = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    if condition:
        RESULTS["passed"] += 1
        print(f"ok   {name}")
    else:
        RESULTS["failed"] += 1
        print(f"FAIL {name}: {detail}")


def generate_stubs(out):
    proto_dir = os.path.join(ROOT, "proto")
    files = ["identity.proto", "operator.proto", "operator_lifecycle.proto"]
    code = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}", *files])
    if code != 0:
        sys.exit(f"protoc failed on {files}")
    sys.path.insert(0, out)


def self_signed(directory, stem, subject, extra):
    """A self-signed leaf, as cert-manager's selfSigned issuer makes them."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", f"{directory}/{stem}.key", "-out", f"{directory}/{stem}.crt", "-days", "30",
         "-subj", f"/CN={subject}", *extra],
        check=True, capture_output=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    binary = sys.argv[1]
    work = tempfile.mkdtemp()
    try:
        generate_stubs(work)
        import identity_pb2 as identity
        import identity_pb2_grpc as identity_grpc
        import operator_pb2 as operator
        import operator_pb2_grpc as operator_grpc
        import operator_lifecycle_pb2 as lifecycle
        import operator_lifecycle_pb2_grpc as lifecycle_grpc

        self_signed(work, "server", SERVICE_NAME,
                    ["-addext", f"subjectAltName=DNS:{SERVICE_NAME}", "-addext", "extendedKeyUsage=serverAuth"])
        self_signed(work, "client", "cnpg-operator", ["-addext", "extendedKeyUsage=clientAuth"])
        self_signed(work, "stranger", "cnpg-operator", ["-addext", "extendedKeyUsage=clientAuth"])

        port = free_port()
        process = subprocess.Popen(
            [binary, "plugin", f"--server-address=127.0.0.1:{port}", f"--server-cert={work}/server.crt",
             f"--server-key={work}/server.key", f"--client-cert={work}/client.crt"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def channel(client="client"):
            read = lambda name: open(f"{work}/{name}", "rb").read()
            creds = grpc.ssl_channel_credentials(
                root_certificates=read("server.crt"), private_key=read(f"{client}.key"),
                certificate_chain=read(f"{client}.crt"))
            return grpc.secure_channel(f"127.0.0.1:{port}", creds,
                                       options=[("grpc.ssl_target_name_override", SERVICE_NAME)])

        ch = channel()
        grpc.channel_ready_future(ch).result(timeout=20)
        ident = identity_grpc.IdentityStub(ch)
        op = operator_grpc.OperatorStub(ch)
        lc = lifecycle_grpc.OperatorLifecycleStub(ch)

        # The probing sequence of the operator.
        metadata = ident.GetPluginMetadata(identity.GetPluginMetadataRequest(), timeout=30)
        check("Identity/GetPluginMetadata name", metadata.name == PLUGIN, metadata.name)
        caps = ident.GetPluginCapabilities(identity.GetPluginCapabilitiesRequest(), timeout=30)
        services = {c.service.type for c in caps.capabilities}
        Svc = identity.PluginCapability.Service
        check("Identity/GetPluginCapabilities", services == {Svc.TYPE_OPERATOR_SERVICE, Svc.TYPE_LIFECYCLE_SERVICE},
              services)
        check("Identity/Probe", ident.Probe(identity.ProbeRequest(), timeout=30).ready)
        rpcs = {c.rpc.type for c in op.GetCapabilities(operator.OperatorCapabilitiesRequest(), timeout=30).capabilities}
        R = operator.OperatorCapability.RPC
        check("Operator/GetCapabilities", rpcs == {R.TYPE_VALIDATE_CLUSTER_CREATE, R.TYPE_VALIDATE_CLUSTER_CHANGE,
                                                   R.TYPE_MUTATE_CLUSTER, R.TYPE_SET_STATUS_IN_CLUSTER}, rpcs)
        lcaps = lc.GetCapabilities(lifecycle.OperatorLifecycleCapabilitiesRequest(), timeout=30).lifecycle_capabilities
        Op = lifecycle.OperatorOperationType
        check("OperatorLifecycle/GetCapabilities",
              len(lcaps) == 1 and lcaps[0].group == "" and lcaps[0].kind == "Pod"
              and [t.type for t in lcaps[0].operation_types] == [Op.TYPE_CREATE, Op.TYPE_EVALUATE], lcaps)

        def cluster(parameters):
            return {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "metadata": {"name": "c"},
                    "spec": {"instances": 1, "plugins": [{"name": PLUGIN, "parameters": parameters}]}}

        mistake = cluster({"annotations": '{"a": "b", this is a mistake}'})
        errors = op.ValidateClusterCreate(operator.OperatorValidateClusterCreateRequest(
            definition=json.dumps(mistake).encode()), timeout=30).validation_errors
        check("Operator/ValidateClusterCreate mistake",
              len(errors) == 1 and list(errors[0].path_components) == ["0", "annotations"], errors)
        errors = op.ValidateClusterChange(operator.OperatorValidateClusterChangeRequest(
            old_cluster=json.dumps(cluster({"labels": '{"a":"b"}'})).encode(),
            new_cluster=json.dumps(cluster({"labels": '{"a":"c"}'})).encode()), timeout=30).validation_errors
        check("Operator/ValidateClusterChange labels",
              len(errors) == 1 and list(errors[0].path_components) == ["0", "labels"], errors)
        patch = json.loads(op.MutateCluster(operator.OperatorMutateClusterRequest(
            definition=json.dumps(cluster({})).encode()), timeout=30).json_patch)
        paths = sorted(p["path"] for p in patch)
        check("Operator/MutateCluster defaults",
              paths == ["/spec/plugins/0/parameters/annotations", "/spec/plugins/0/parameters/labels"], patch)
        status = op.SetStatusInCluster(operator.SetStatusInClusterRequest(
            cluster=json.dumps(cluster({})).encode()), timeout=30).json_status
        check("Operator/SetStatusInCluster", json.loads(status) == {"enabled": True}, status)

        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c-1"},
               "spec": {"containers": [{"name": "postgres", "image": "postgres"}]}}
        patch = json.loads(lc.LifecycleHook(lifecycle.OperatorLifecycleRequest(
            operation_type=Op(type=Op.TYPE_CREATE), cluster_definition=json.dumps(cluster({})).encode(),
            object_definition=json.dumps(pod).encode()), timeout=30).json_patch)
        added = {p["path"]: p.get("value") for p in patch if p["op"] == "add"}
        init = added.get("/spec/initContainers") or []
        check("OperatorLifecycle/LifecycleHook pod patch",
              added.get("/metadata/labels") == {"plugin-metadata": "default"}
              and any(c["name"] == "pauser" and c.get("restartPolicy") == "Always" for c in init), patch)

        try:
            op.ValidateClusterCreate(operator.OperatorValidateClusterCreateRequest(definition=b"\x00garbage"),
                                     timeout=30)
            check("garbage is INVALID_ARGUMENT", False, "answered")
        except grpc.RpcError as e:
            check("garbage is INVALID_ARGUMENT", e.code() == grpc.StatusCode.INVALID_ARGUMENT, e)

        try:
            stranger = identity_grpc.IdentityStub(channel("stranger"))
            stranger.GetPluginMetadata(identity.GetPluginMetadataRequest(), timeout=10)
            check("unpinned client certificate refused", False, "answered")
        except grpc.RpcError as e:
            check("unpinned client certificate refused", e.code() == grpc.StatusCode.UNAVAILABLE, e)

        ch.close()
        process.send_signal(signal.SIGTERM)
        check("exit 0 on SIGTERM", process.wait(timeout=30) == 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"interop: {RESULTS['passed']} passed, {RESULTS['failed']} failed")
    sys.exit(1 if RESULTS["failed"] else 0)


if __name__ == "__main__":
    main()
