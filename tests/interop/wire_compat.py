#!/usr/bin/env python3
"""Holds this project's proto/ to upstream CNPG-I on the wire, definition by
definition.

Upstream's side is the descriptor set compiled into its Go stubs
(github.com/cloudnative-pg/cnpg-i, dumped by godescriptors/); ours is proto/
compiled by protoc from grpcio-tools. Comments, file names and option values
do not travel on the wire and are ignored. What must match:

* every message (by full name): each field's name, number, type, label,
  message/enum type, proto3 `optional`, and oneof membership;
* every enum: each value's name and number;
* every service: each RPC's name, request and response types, streaming.

Each upstream definition is one line, `ok` or `FAIL` with the difference;
definitions we have that upstream lacks are listed too. Exits 1 on any
difference.

Usage: wire_compat.py UPSTREAM.bin PROTO_DIR
"""

import os
import sys
import tempfile

from google.protobuf import descriptor_pb2
from grpc_tools import protoc


def our_descriptors(proto_dir):
    files = sorted(f for f in os.listdir(proto_dir) if f.endswith(".proto"))
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "ours.bin")
        code = protoc.main(["protoc", f"-I{proto_dir}", f"--descriptor_set_out={out}", *files])
        if code != 0:
            sys.exit(f"protoc failed on {proto_dir}")
        return load(out)


def load(path):
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        descriptor_set.ParseFromString(f.read())
    return descriptor_set


def definitions(descriptor_set):
    """Full name -> (kind, comparable shape), for every message, enum and service."""
    found = {}

    def message(prefix, m):
        name = f"{prefix}.{m.name}"
        oneofs = [o.name for o in m.oneof_decl]
        fields = []
        for f in sorted(m.field, key=lambda f: f.number):
            oneof = None
            if f.HasField("oneof_index") and not f.proto3_optional:
                oneof = oneofs[f.oneof_index]
            fields.append(
                (
                    f.number,
                    f.name,
                    descriptor_pb2.FieldDescriptorProto.Type.Name(f.type),
                    descriptor_pb2.FieldDescriptorProto.Label.Name(f.label),
                    f.type_name,
                    f.proto3_optional,
                    oneof,
                )
            )
        found[name] = ("message", tuple(fields))
        for nested in m.nested_type:
            if not nested.options.map_entry:
                message(name, nested)
            else:
                found[f"{name}.{nested.name}"] = (
                    "map entry",
                    tuple((f.number, f.name, descriptor_pb2.FieldDescriptorProto.Type.Name(f.type)) for f in nested.field),
                )
        for e in m.enum_type:
            enum(name, e)

    def enum(prefix, e):
        found[f"{prefix}.{e.name}"] = ("enum", tuple(sorted((v.number, v.name) for v in e.value)))

    for file in descriptor_set.file:
        prefix = f".{file.package}"
        for m in file.message_type:
            message(prefix, m)
        for e in file.enum_type:
            enum(prefix, e)
        for s in file.service:
            found[f"{prefix}.{s.name}"] = (
                "service",
                tuple(sorted((rpc.name, rpc.input_type, rpc.output_type, rpc.client_streaming, rpc.server_streaming) for rpc in s.method)),
            )
    return found


def main():
    upstream = definitions(load(sys.argv[1]))
    ours = definitions(our_descriptors(sys.argv[2]))
    failed = 0
    for name in sorted(upstream):
        kind, shape = upstream[name]
        if name not in ours:
            failed += 1
            print(f"FAIL {kind} {name}: missing from proto/")
        elif ours[name] != upstream[name]:
            failed += 1
            print(f"FAIL {kind} {name}:\n     upstream {shape}\n     ours     {ours[name][1]}")
        else:
            print(f"ok   {kind} {name}")
    extra = sorted(set(ours) - set(upstream))
    for name in extra:
        failed += 1
        print(f"FAIL {ours[name][0]} {name}: not in upstream CNPG-I")
    print(
        f"wire-compat: {len(upstream) - failed + len(extra)} of {len(upstream)} upstream definitions match"
        f"{f', {len(extra)} extra' if extra else ''}, {failed} failed"
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
