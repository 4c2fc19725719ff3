"""Serving a CNPG-I plugin on grpcio, and registering it with a cnpgi-rs operator.

The plugin's transport, with the Rust SDK's flags and environment variables:

  --plugin-path DIR         a Unix socket DIR/<plugin name>, without TLS (a
                            sidecar, or a process test);
  --server-address ADDR     mutual TLS on HOST:PORT, with --server-cert,
                            --server-key (what the plugin presents) and
                            --client-cert (the certificate, or CA, clients
                            must present).

and, over TLS, registration (cnpgi.registration.v1, proto/registration/v1):

  --register-with HOST:PORT the operator's registration endpoint; the plugin
                            registers, heart-beats every interval the
                            operator asks for (a deadline on every call,
                            backoff on failures), and registers again when
                            the operator answers NOT_FOUND (it restarted, or
                            forgot the plugin);
  --registration-ca F       the CA of that endpoint's certificate;
  --registration-cert/-key  the client certificate naming the plugin
                            (default: the server's);
  --advertise-address       HOST:PORT the operator dials (default: the
                            address served, when it is not a wildcard);
  --advertise-server-name   the name the operator verifies in the server
                            certificate (default: the advertised host).

serve() runs until SIGTERM or SIGINT, then stops the server (grace 5 s),
removes the socket, and returns.
"""

import contextlib
import os
import signal
import sys
import threading
from concurrent import futures

import grpc
import stubs

# Deadlines and retries of the registration loop (the Rust SDK's values).
REGISTER_DEADLINE = 20.0  # the operator probes the plugin before it answers
HEARTBEAT_DEADLINE = 10.0
FIRST_RETRY = 1.0
MAX_REGISTER_RETRY = 30.0
STOP_GRACE = 5.0


def log(name, message):
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def flag(parser, name, env, **kwargs):
    """A flag that can also come from the environment variable `env`."""
    parser.add_argument(name, default=os.environ.get(env), help=f"{kwargs.pop('help')} (env {env})", **kwargs)


def add_flags(parser):
    """The transport and registration flags."""
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
    flag(
        parser,
        "--advertise-server-name",
        "CNPGI_ADVERTISE_SERVER_NAME",
        help="the name the operator verifies in the server certificate (default: the advertised host)",
    )


def check_flags(parser, args):
    """Refuses (parser.error) flags that do not go together."""
    tls = [args.server_address, args.server_cert, args.server_key, args.client_cert]
    if any(tls) and not all(tls):
        parser.error("--server-address, --server-cert, --server-key and --client-cert go together")
    if not any(tls) and not args.plugin_path:
        parser.error("give --plugin-path DIR (Unix socket) or --server-address and the certificate flags (mutual TLS)")
    if args.register_with and not (args.server_address and args.registration_ca):
        parser.error("--register-with needs --server-address (the operator dials it over TLS) and --registration-ca")
    if bool(args.registration_cert) != bool(args.registration_key):
        parser.error("--registration-cert and --registration-key go together")


class LogCalls(grpc.ServerInterceptor):
    """One line per call on stderr."""

    def __init__(self, name):
        self.name = name

    def intercept_service(self, continuation, handler_call_details):
        log(self.name, f"call {handler_call_details.method}")
        return continuation(handler_call_details)


class Registrar:
    """Registers a plugin with the operator and heart-beats until stopped."""

    def __init__(self, name, version, args, advertise, stop):
        self.name, self.version, self.args, self.advertise, self.stop = name, version, args, advertise, stop
        self.registration = stubs.load().registration
        self.registration_grpc = stubs.load().registration_grpc

    def run(self):
        args, retry = self.args, FIRST_RETRY
        while not self.stop.is_set():
            try:
                # Read at each registration: a rotated certificate is used from the next one on.
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=read(args.registration_ca),
                    private_key=read(args.registration_key or args.server_key),
                    certificate_chain=read(args.registration_cert or args.server_cert),
                )
            except OSError as error:
                log(self.name, f"cannot read the registration certificates: {error}; retry in {retry:.0f} s")
                self.stop.wait(retry)
                retry = min(retry * 2, MAX_REGISTER_RETRY)
                continue
            with grpc.secure_channel(args.register_with, credentials) as channel:
                stub = self.registration_grpc.RegistrationStub(channel)
                request = self.registration.RegisterRequest(
                    name=self.name,
                    version=self.version,
                    address=self.advertise,
                    server_name=args.advertise_server_name or "",
                )
                try:
                    lease = stub.Register(request, timeout=REGISTER_DEADLINE)
                except grpc.RpcError as error:
                    log(
                        self.name,
                        f"cannot register with the operator at {args.register_with}: {error.code().name}: {error.details()}; retry in {retry:.0f} s",
                    )
                    self.stop.wait(retry)
                    retry = min(retry * 2, MAX_REGISTER_RETRY)
                    continue
                retry = FIRST_RETRY
                log(self.name, f"registered with the operator at {args.register_with} as {self.advertise} (ttl {lease.ttl_seconds} s)")
                self.heartbeat_until_lost(stub, lease)

    def heartbeat_until_lost(self, stub, lease):
        """Beats every interval the operator asked for until it says it lost the lease."""
        interval = float(max(lease.heartbeat_interval_seconds, 1))
        deadline = min(HEARTBEAT_DEADLINE, interval)
        wait, retry = interval, min(FIRST_RETRY, interval)
        while not self.stop.wait(wait):
            try:
                stub.Heartbeat(self.registration.HeartbeatRequest(name=self.name, lease_id=lease.lease_id), timeout=deadline)
                wait, retry = interval, min(FIRST_RETRY, interval)
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    log(self.name, f"the operator lost the lease ({error.details()}): registering again")
                    return
                log(self.name, f"heartbeat failed: {error.code().name}: {error.details()}; retrying")
                wait, retry = retry, min(retry * 2, interval)


def serve(name, version, args, add_services, workers=8):
    """Serves the services `add_services(server)` adds until SIGTERM or SIGINT."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), interceptors=[LogCalls(name)])
    add_services(server)
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
        socket_path = os.path.join(args.plugin_path, name)
        with contextlib.suppress(FileNotFoundError):
            os.remove(socket_path)  # left by a previous run that was killed
        server.add_insecure_port(f"unix:{socket_path}")
        where = socket_path

    advertise = None
    if args.register_with:
        advertise = args.advertise_address or where
        if advertise.rsplit(":", 1)[0].strip("[]") in ("", "0.0.0.0", "::"):
            sys.exit(f"{name}: --register-with needs --advertise-address (CNPGI_ADVERTISE_ADDRESS): the operator cannot dial {where}")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    log(name, f"version {version} serving on {where}")
    if advertise:
        threading.Thread(target=Registrar(name, version, args, advertise, stop).run, daemon=True).start()
    stop.wait()
    log(name, "stopping")
    server.stop(grace=STOP_GRACE).wait()
    if socket_path:
        with contextlib.suppress(FileNotFoundError):
            os.remove(socket_path)
    log(name, "stopped")
