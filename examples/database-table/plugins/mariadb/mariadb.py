#!/usr/bin/env python3
"""mariadb.tables.example.cnpgi.io: the MariaDB implementation of DatabaseTable, a CNPG-I plugin on grpcio.

One implementation of the kind tables.example.cnpgi.io (its metadata manifest
says `cnpgi.io/implements: tables.example.cnpgi.io`). It serves:

  Identity         who it is; the Operator and ReconcilerHooks services;
  Operator         ValidateClusterCreate/Change: names, agnostic types, the
                   fields fixed once created, the storage engine of the
                   table's MariaDbDatabaseTable reference (tables.py);
                   SetStatusInCluster: what the last sync did (table, engine,
                   columns, statements), and under `cnpgi.io/references` a
                   report {table, engine} for the MariaDbDatabaseTable
                   (written by the operator into its status.cnpgiReports);
  ReconcilerHooks  Pre on the DatabaseTable itself (CNPG-I's CLUSTER kind):
                   the table made to match in MariaDB (created with
                   ENGINE=<storageEngine>, altered, extra columns dropped only
                   with dropExtraColumns); once the table is being deleted
                   (metadata.deletionTimestamp), dropped when deletionPolicy
                   is Delete, kept otherwise.

The server of a table: Service `<serverName>` of the table's namespace, port
3306 (`<serverName>.<namespace>.svc:3306`), unless --server-override
NAME=HOST:PORT (repeatable; env DBT_SERVER_OVERRIDES, comma-separated) says
where server NAME is (outside the cluster: tests, port-forwards). Its
credentials: the keys username, password and dbname of Secret
`<serverName>-app`, read through the Kubernetes API (kube.py: in-cluster
ServiceAccount, or --kube-api-server, --kube-token-file, --kube-ca-file).

Transport and registration: serving.py (--plugin-path DIR, or
--server-address and the certificate flags; --register-with ...). The protocol
stubs: stubs.py (generated at build time into cnpgi_stubs/, or from the
repository's proto/ at start).

Usage: mariadb.py --plugin-path DIR [--server-override NAME=HOST:PORT] [--kube-api-server URL ...]
       mariadb.py --server-address ADDR --server-cert F --server-key F --client-cert F [--register-with ...]
       (pip install -r requirements.txt)
SIGTERM or SIGINT: the server stops, the socket is removed, exit 0.
"""

import argparse
import json
import os
import sys
import threading
import time

import grpc
import kube
import serving
import stubs
import tables

NAME = "mariadb.tables.example.cnpgi.io"
VERSION = "0.1.0"
IMPLEMENTS = "tables.example.cnpgi.io"
# The longest a reconciler hook works when the caller set no deadline (the host's is 30 s).
HOOK_BUDGET = 25.0

try:
    pb = stubs.load()
except stubs.StubsError as error:
    sys.exit(f"{NAME}: {error}")


def log(message):
    serving.log(NAME, message)


def parse_overrides(values):
    """["app-db=127.0.0.1:3307", ...] -> {"app-db": ("127.0.0.1", 3307)}; ValueError on a malformed one."""
    overrides = {}
    for value in values:
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, sep, address = item.partition("=")
            host, colon, port = address.rpartition(":")
            if not (sep and name and colon and host and port.isdigit()):
                raise ValueError(f"--server-override {item!r}: expected NAME=HOST:PORT")
            overrides[name] = (host.strip("[]"), int(port))
    return overrides


def decode(definition, context, what):
    """A resource JSON (bytes) as a dict; INVALID_ARGUMENT when it is not a JSON object."""
    try:
        value = json.loads(definition)
    except ValueError as error:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the {what} is not JSON: {error}")
    if not isinstance(value, dict):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the {what} is not a JSON object")
    return value


def validation_errors(errors):
    return [pb.operator.ValidationError(path_components=path, value=value, message=message) for path, value, message in errors]


def key(table):
    metadata = table.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


class Identity(pb.identity_grpc.IdentityServicer):
    def GetPluginMetadata(self, request, context):
        return pb.identity.GetPluginMetadataResponse(
            name=NAME,
            version=VERSION,
            display_name="DatabaseTable: MariaDB",
            description="Creates and alters MariaDB tables (with their storage engine) so that they match DatabaseTable resources",
            license="Apache-2.0",
            maturity="alpha",
            vendor="cnpgi-rs examples",
            manifest={"cnpgi.io/implements": IMPLEMENTS},
        )

    def GetPluginCapabilities(self, request, context):
        kinds = pb.identity.PluginCapability.Service
        services = [kinds.TYPE_OPERATOR_SERVICE, kinds.TYPE_RECONCILER_HOOKS]
        return pb.identity.GetPluginCapabilitiesResponse(
            capabilities=[pb.identity.PluginCapability(service=kinds(type=t)) for t in services],
        )

    def Probe(self, request, context):
        return pb.identity.ProbeResponse(ready=True)


class Reports:
    """The last report of each table, by namespace/name."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reports = {}

    def put(self, table_key, report):
        with self._lock:
            self._reports[table_key] = report

    def get(self, table_key):
        with self._lock:
            return self._reports.get(table_key)


class Operator(pb.operator_grpc.OperatorServicer):
    def __init__(self, reports):
        self.reports = reports

    def GetCapabilities(self, request, context):
        rpc = pb.operator.OperatorCapability.RPC
        types = [rpc.TYPE_VALIDATE_CLUSTER_CREATE, rpc.TYPE_VALIDATE_CLUSTER_CHANGE, rpc.TYPE_SET_STATUS_IN_CLUSTER]
        return pb.operator.OperatorCapabilitiesResult(capabilities=[pb.operator.OperatorCapability(rpc=rpc(type=t)) for t in types])

    def ValidateClusterCreate(self, request, context):
        table = decode(request.definition, context, "DatabaseTable")
        return pb.operator.OperatorValidateClusterCreateResult(validation_errors=validation_errors(tables.validate(table)))

    def ValidateClusterChange(self, request, context):
        old = decode(request.old_cluster, context, "old DatabaseTable")
        new = decode(request.new_cluster, context, "new DatabaseTable")
        return pb.operator.OperatorValidateClusterChangeResult(validation_errors=validation_errors(tables.validate_change(old, new)))

    def SetStatusInCluster(self, request, context):
        table = decode(request.cluster, context, "DatabaseTable")
        report = self.reports.get(key(table))
        if report is None:
            # Not synced by this process yet: keep the status as it is.
            return pb.operator.SetStatusInClusterResponse()
        status = report.as_status()
        if report.reference and not report.deleted:
            status[tables.REFERENCES_KEY] = [{**report.reference, "status": {"table": report.table, "engine": report.engine}}]
        return pb.operator.SetStatusInClusterResponse(json_status=json.dumps(status).encode())


class ReconcilerHooks(pb.reconciler_grpc.ReconcilerHooksServicer):
    def __init__(self, reports, overrides, kube_config):
        self.reports, self.overrides, self.kube_config = reports, overrides, kube_config

    def GetCapabilities(self, request, context):
        kind = pb.reconciler.ReconcilerHooksCapability(kind=pb.reconciler.ReconcilerHooksCapability.KIND_CLUSTER)
        return pb.reconciler.ReconcilerHooksCapabilitiesResult(reconciler_capabilities=[kind])

    def Post(self, request, context):
        return pb.reconciler.ReconcilerHooksResult(behavior=pb.reconciler.ReconcilerHooksResult.BEHAVIOR_CONTINUE)

    def Pre(self, request, context):
        cluster = decode(request.cluster_definition, context, "DatabaseTable (cluster_definition)")
        table = cluster
        if request.resource_definition and request.resource_definition != request.cluster_definition:
            resource = decode(request.resource_definition, context, "resource_definition")
            if resource.get("kind") != cluster.get("kind"):
                # Another kind of object: not hooked (KIND_CLUSTER only).
                return pb.reconciler.ReconcilerHooksResult(behavior=pb.reconciler.ReconcilerHooksResult.BEHAVIOR_CONTINUE)
        remaining = context.time_remaining()
        deadline = time.monotonic() + min(HOOK_BUDGET, remaining - 1.0 if remaining is not None else HOOK_BUDGET)
        metadata = table.get("metadata") or {}
        spec = tables.spec_of(table)
        try:
            if metadata.get("deletionTimestamp"):
                if spec.get("deletionPolicy") != "Delete":
                    log(f"{key(table)} deleted: table {spec.get('name')} kept (deletionPolicy {spec.get('deletionPolicy') or 'Keep'})")
                    self.reports.put(key(table), tables.Report(table=str(spec.get("name")), server="", deleted=True))
                    return pb.reconciler.ReconcilerHooksResult(behavior=pb.reconciler.ReconcilerHooksResult.BEHAVIOR_CONTINUE)
                host, port, credentials = self.server(table, deadline)
                report = tables.drop(table, credentials, host, port, deadline)
                log(f"{key(table)} deleted: {report.applied[0]} in {report.table} (deletionPolicy Delete)")
                self.reports.put(key(table), report)
            else:
                host, port, credentials = self.server(table, deadline)
                report = tables.sync(table, credentials, host, port, deadline)
                if report.applied:
                    log(f"{key(table)}: {'; '.join(report.applied)}")
                self.reports.put(key(table), report)
        except kube.CredentialsError as error:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{NAME}: {key(table)}: {error}")
        except ValueError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{NAME}: {key(table)}: {error}")
        except tables.SyncError as error:
            code = {
                "invalid": grpc.StatusCode.INVALID_ARGUMENT,
                "unavailable": grpc.StatusCode.UNAVAILABLE,
            }.get(error.kind, grpc.StatusCode.FAILED_PRECONDITION)
            context.abort(code, f"{NAME}: {key(table)}: {error}")
        return pb.reconciler.ReconcilerHooksResult(behavior=pb.reconciler.ReconcilerHooksResult.BEHAVIOR_CONTINUE)

    def server(self, table, deadline):
        """(host, port, credentials) of the table's server."""
        metadata, spec = table.get("metadata") or {}, tables.spec_of(table)
        namespace, server = metadata.get("namespace") or "default", spec.get("serverName")
        if not isinstance(server, str) or not server:
            raise ValueError("spec.serverName is empty: name the MariaDB Service")
        host, port = self.overrides.get(server) or (f"{server}.{namespace}.svc", tables.PORT)
        timeout = max(0.5, min(kube.API_TIMEOUT, deadline - time.monotonic()))
        credentials = kube.read_secret(self.kube_config, namespace, f"{server}-app", timeout=timeout)
        return host, port, credentials


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    serving.add_flags(parser)
    kube.add_flags(parser, serving.flag)
    parser.add_argument(
        "--server-override",
        action="append",
        default=[os.environ["DBT_SERVER_OVERRIDES"]] if os.environ.get("DBT_SERVER_OVERRIDES") else [],
        metavar="NAME=HOST:PORT",
        help="where server NAME is, instead of its Service NAME.<namespace>.svc:3306 (repeatable; env DBT_SERVER_OVERRIDES, comma-separated)",
    )
    args = parser.parse_args()
    serving.check_flags(parser, args)
    try:
        args.overrides = parse_overrides(args.server_override)
    except ValueError as error:
        parser.error(str(error))
    return args


def main():
    args = parse_args()
    reports = Reports()
    kube_config = kube.KubeConfig.from_flags(args.kube_api_server, args.kube_token_file, args.kube_ca_file)

    def add_services(server):
        pb.identity_grpc.add_IdentityServicer_to_server(Identity(), server)
        pb.operator_grpc.add_OperatorServicer_to_server(Operator(reports), server)
        pb.reconciler_grpc.add_ReconcilerHooksServicer_to_server(ReconcilerHooks(reports, args.overrides, kube_config), server)

    if args.overrides:
        log("server overrides: " + ", ".join(f"{name}={host}:{port}" for name, (host, port) in sorted(args.overrides.items())))
    serving.serve(NAME, VERSION, args, add_services)


if __name__ == "__main__":
    main()
