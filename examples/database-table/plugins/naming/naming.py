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

It can also serve over mutual TLS (--server-address and the certificate
flags, as the Rust SDK's plugin command) and then register itself with a
cnpgi-rs operator (--register-with HOST:PORT, cnpgi.registration.v1 in
proto/registration/v1): it registers, heart-beats every interval the operator
asks for (deadline on every call, backoff on failures) and registers again
when the operator answers NOT_FOUND (restarted, or forgot it). Every flag can
come from the environment variable the Rust SDK reads (SERVER_ADDRESS, ...,
CNPGI_REGISTER_WITH, ...).

Usage: naming.py --plugin-path DIR      (pip install -r requirements.txt)
       naming.py --server-address ADDR --server-cert F --server-key F --client-cert F
                 [--register-with HOST:PORT --registration-ca F
                  [--registration-cert F --registration-key F] [--advertise-address HOST:PORT]]
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
        files = ["identity.proto", "operator.proto", "registration/v1/registration.proto"]
        args = ["protoc", f"-I{os.path.join(ROOT, 'proto')}", f"--python_out={out}", f"--grpc_python_out={out}", *files]
        if protoc.main(args) != 0:
            sys.exit(f"protoc failed on {files}")
        sys.path.insert(0, out)
        import identity_pb2
        import identity_pb2_grpc
        import operator_pb2
        import operator_pb2_grpc
        from registration.v1 import registration_pb2, registration_pb2_grpc

        sys.path.remove(out)
    return identity_pb2, identity_pb2_grpc, operator_pb2, operator_pb2_grpc, registration_pb2, registration_pb2_grpc


identity, identity_grpc, operator, operator_grpc, registration, registration_grpc = load_stubs()


def naming_errors(definition, context):
    """The ValidationErrors of one DatabaseTable, given as JSON."""
    try:
        spec = json.loads(definition).get("spec") or {}
    except (ValueError, AttributeError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the definition is not a JSON object")
    named = [(["spec", "name"], spec.get("name"))]
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


# Deadlines and retries of the registration loop (the Rust SDK's values).
REGISTER_DEADLINE = 20.0  # the operator probes the plugin before it answers
HEARTBEAT_DEADLINE = 10.0
FIRST_RETRY = 1.0
MAX_REGISTER_RETRY = 30.0


def read(path):
    with open(path, "rb") as f:
        return f.read()


def keep_registered(args, advertise, stop):
    """Registers with the operator and heart-beats until `stop` is set."""
    retry = FIRST_RETRY
    while not stop.is_set():
        # Files read at each registration: a rotated certificate is used from the next one on.
        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(args.registration_ca),
            private_key=read(args.registration_key or args.server_key),
            certificate_chain=read(args.registration_cert or args.server_cert),
        )
        with grpc.secure_channel(args.register_with, credentials) as channel:
            stub = registration_grpc.RegistrationStub(channel)
            request = registration.RegisterRequest(name=NAME, version=VERSION, address=advertise)
            try:
                lease = stub.Register(request, timeout=REGISTER_DEADLINE)
            except grpc.RpcError as error:
                log(f"cannot register with the operator at {args.register_with}: {error.code().name}: {error.details()}; retry in {retry:.0f} s")
                stop.wait(retry)
                retry = min(retry * 2, MAX_REGISTER_RETRY)
                continue
            retry = FIRST_RETRY
            log(f"registered with the operator at {args.register_with} as {advertise} (ttl {lease.ttl_seconds} s)")
            heartbeat_until_lost(stub, lease, stop)


def heartbeat_until_lost(stub, lease, stop):
    """Beats every interval the operator asked for until it says it lost the lease."""
    interval = float(max(lease.heartbeat_interval_seconds, 1))
    deadline = min(HEARTBEAT_DEADLINE, interval)
    wait, retry = interval, min(FIRST_RETRY, interval)
    while not stop.wait(wait):
        try:
            stub.Heartbeat(registration.HeartbeatRequest(name=NAME, lease_id=lease.lease_id), timeout=deadline)
            wait, retry = interval, min(FIRST_RETRY, interval)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                log(f"the operator lost the lease ({error.details()}): registering again")
                return
            log(f"heartbeat failed: {error.code().name}: {error.details()}; retrying")
            wait, retry = retry, min(retry * 2, interval)


def flag(parser, name, env, **kwargs):
    """A flag that can also come from the environment variable `env`."""
    parser.add_argument(name, default=os.environ.get(env), help=f"{kwargs.pop('help')} (env {env})", **kwargs)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    flag(parser, "--plugin-path", "PLUGIN_PATH", help="the directory of the plugin's Unix socket")
    flag(parser, "--server-address", "SERVER_ADDRESS", help="serve with mutual TLS on HOST:PORT instead")
    flag(parser, "--server-cert", "SERVER_CERT", help="PEM certificate the server presents")
    flag(parser, "--server-key", "SERVER_KEY", help="its PEM key")
    flag(parser, "--client-cert", "CLIENT_CERT", help="PEM certificate (or CA) clients must present")
    flag(parser, "--register-with", "CNPGI_REGISTER_WITH", help="register with a cnpgi-rs operator at HOST:PORT")
    flag(parser, "--registration-ca", "CNPGI_REGISTRATION_CA", help="PEM CA of the operator's registration endpoint")
    flag(parser, "--registration-cert", "CNPGI_REGISTRATION_CERT", help="PEM certificate naming the plugin (default --server-cert)")
    flag(parser, "--registration-key", "CNPGI_REGISTRATION_KEY", help="its PEM key (default --server-key)")
    flag(parser, "--advertise-address", "CNPGI_ADVERTISE_ADDRESS", help="HOST:PORT the operator dials (default: the address served)")
    args = parser.parse_args()
    tls = [args.server_address, args.server_cert, args.server_key, args.client_cert]
    if any(tls) and not all(tls):
        parser.error("--server-address, --server-cert, --server-key and --client-cert go together")
    if not any(tls) and not args.plugin_path:
        parser.error("give --plugin-path DIR (Unix socket) or --server-address and the certificate flags (mutual TLS)")
    if args.register_with and not (args.server_address and args.registration_ca):
        parser.error("--register-with needs --server-address (the operator dials it over TLS) and --registration-ca")
    if bool(args.registration_cert) != bool(args.registration_key):
        parser.error("--registration-cert and --registration-key go together")
    return args


def main():
    args = parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[LogCalls()])
    identity_grpc.add_IdentityServicer_to_server(Identity(), server)
    operator_grpc.add_OperatorServicer_to_server(Operator(), server)
    socket_path = None
    if args.server_address:
        credentials = grpc.ssl_server_credentials(
            [(read(args.server_key), read(args.server_cert))],
            root_certificates=read(args.client_cert),
            require_client_auth=True,
        )
        port = server.add_secure_port(args.server_address, credentials)
        host = args.server_address.rsplit(":", 1)[0]
        where = f"{host}:{port}"
    else:
        socket_path = os.path.join(args.plugin_path, NAME)
        with contextlib.suppress(FileNotFoundError):
            os.remove(socket_path)  # left by a previous run that was killed
        server.add_insecure_port(f"unix:{socket_path}")
        where = socket_path

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    log(f"version {VERSION} serving on {where}")
    if args.register_with:
        advertise = args.advertise_address or where
        if advertise.rsplit(":", 1)[0].strip("[]") in ("", "0.0.0.0", "::"):
            sys.exit(f"{NAME}: --register-with needs --advertise-address (CNPGI_ADVERTISE_ADDRESS): the operator cannot dial {where}")
        threading.Thread(target=keep_registered, args=(args, advertise, stop), daemon=True).start()
    stop.wait()
    log("stopping")
    server.stop(grace=5).wait()
    if socket_path:
        with contextlib.suppress(FileNotFoundError):
            os.remove(socket_path)
    log("stopped")


if __name__ == "__main__":
    main()
