#!/usr/bin/env python3
"""naming.tables.example.cnpgi.io: a CNPG-I plugin in Python, on grpcio.

A policy for DatabaseTables (examples/database-table): it refuses a table or
column named after a PostgreSQL reserved key word. It serves two services on
the Unix socket DIR/naming.tables.example.cnpgi.io, where the operator
discovers it (--plugin-dir DIR):

  Identity  who it is, and that it offers the Operator service;
  Operator  ValidateClusterCreate and ValidateClusterChange only (CNPG-I
            calls every resource a "cluster": here, a DatabaseTable).

Every other RPC answers UNIMPLEMENTED. The Python stubs are generated at
start from the repository's proto/ with grpc_tools.protoc.

Usage: naming.py --plugin-path DIR      (pip install -r requirements.txt)
SIGTERM or SIGINT: the server stops, the socket is removed, exit 0.
"""

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures

import grpc
from grpc_tools import protoc

NAME = "naming.tables.example.cnpgi.io"
VERSION = "0.1.0"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

# PostgreSQL's key words that cannot name a table or column unquoted: those
# Appendix C ("SQL Key Words") lists as "reserved" and as "reserved (can be
# function or type)"; pg_get_keywords() gives them as catcode R and T.
RESERVED_WORDS = """
    all analyse analyze and any array as asc asymmetric authorization binary both case cast check collate collation
    column concurrently constraint create cross current_catalog current_date current_role current_schema current_time
    current_timestamp current_user default deferrable desc distinct do else end except false fetch for foreign freeze
    from full grant group having ilike in initially inner intersect into is isnull join lateral leading left like limit
    localtime localtimestamp natural not notnull null offset on only or order outer overlaps placing primary references
    returning right select session_user similar some symmetric table tablesample then to trailing true union unique
    user using variadic verbose when where window with
"""
RESERVED = frozenset(RESERVED_WORDS.split())


def log(message):
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)


def load_stubs():
    """Generates the Python modules of proto/ into a temporary directory and imports them."""
    with tempfile.TemporaryDirectory() as out:
        files = ["identity.proto", "operator.proto"]
        args = ["protoc", f"-I{os.path.join(ROOT, 'proto')}", f"--python_out={out}", f"--grpc_python_out={out}", *files]
        if protoc.main(args) != 0:
            sys.exit(f"protoc failed on {files}")
        sys.path.insert(0, out)
        import identity_pb2
        import identity_pb2_grpc
        import operator_pb2
        import operator_pb2_grpc

        sys.path.remove(out)
    return identity_pb2, identity_pb2_grpc, operator_pb2, operator_pb2_grpc


identity, identity_grpc, operator, operator_grpc = load_stubs()


def naming_errors(definition, context):
    """The ValidationErrors of one DatabaseTable, given as JSON."""
    try:
        spec = json.loads(definition).get("spec") or {}
    except (ValueError, AttributeError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the definition is not a JSON object")
    named = [(["spec", "table"], spec.get("table"))]
    named += [(["spec", "columns", str(i), "name"], column.get("name")) for i, column in enumerate(spec.get("columns") or [])]
    return [
        operator.ValidationError(path_components=path, value=name, message=f'"{name}" is a reserved word in SQL: choose another name')
        for path, name in named
        if isinstance(name, str) and name.lower() in RESERVED
    ]


class Identity(identity_grpc.IdentityServicer):
    def GetPluginMetadata(self, request, context):
        return identity.GetPluginMetadataResponse(
            name=NAME,
            version=VERSION,
            display_name="Table naming policy",
            description="Refuses DatabaseTables whose table or column names are PostgreSQL reserved key words",
            license="Apache-2.0",
            maturity="alpha",
            vendor="cnpgi-rs examples",
        )

    def GetPluginCapabilities(self, request, context):
        service = identity.PluginCapability.Service(type=identity.PluginCapability.Service.TYPE_OPERATOR_SERVICE)
        return identity.GetPluginCapabilitiesResponse(capabilities=[identity.PluginCapability(service=service)])

    def Probe(self, request, context):
        return identity.ProbeResponse(ready=True)


class Operator(operator_grpc.OperatorServicer):
    def GetCapabilities(self, request, context):
        rpc = operator.OperatorCapability.RPC
        types = [rpc.TYPE_VALIDATE_CLUSTER_CREATE, rpc.TYPE_VALIDATE_CLUSTER_CHANGE]
        return operator.OperatorCapabilitiesResult(capabilities=[operator.OperatorCapability(rpc=rpc(type=t)) for t in types])

    def ValidateClusterCreate(self, request, context):
        return operator.OperatorValidateClusterCreateResult(validation_errors=naming_errors(request.definition, context))

    def ValidateClusterChange(self, request, context):
        return operator.OperatorValidateClusterChangeResult(validation_errors=naming_errors(request.new_cluster, context))


class LogCalls(grpc.ServerInterceptor):
    """One line per call on stderr."""

    def intercept_service(self, continuation, handler_call_details):
        log(f"call {handler_call_details.method}")
        return continuation(handler_call_details)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin-path", required=True, help="the directory of the plugin's Unix socket")
    socket_path = os.path.join(parser.parse_args().plugin_path, NAME)
    with contextlib.suppress(FileNotFoundError):
        os.remove(socket_path)  # left by a previous run that was killed

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[LogCalls()])
    identity_grpc.add_IdentityServicer_to_server(Identity(), server)
    operator_grpc.add_OperatorServicer_to_server(Operator(), server)
    server.add_insecure_port(f"unix:{socket_path}")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    log(f"version {VERSION} serving on {socket_path}")
    stop.wait()
    log("stopping")
    server.stop(grace=5).wait()
    with contextlib.suppress(FileNotFoundError):
        os.remove(socket_path)
    log("stopped")


if __name__ == "__main__":
    main()
