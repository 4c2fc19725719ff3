//! Compiles `proto/*.proto` with the pure-Rust `protox` compiler (no system
//! `protoc`) and generates tonic clients and servers from the result.
//!
//! The `.proto` files live in this crate's own `proto/` directory, so that the
//! packaged crate builds on its own; the repository's top-level `proto` is a
//! symbolic link to it, for the tools outside Cargo (tests/interop).

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "identity.proto",
    "postgres.proto",
    "operator.proto",
    "operator_lifecycle.proto",
    "reconciler.proto",
    "wal.proto",
    "restore_job.proto",
    "backup.proto",
    "metrics.proto",
];

/// This project's own packages (not CNPG-I's), compiled apart so that
/// [`PROTOS`]' descriptor set, served by plugins for reflection, stays CNPG-I's.
const OWN_PROTOS: &[&str] = &["registration/v1/registration.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest_dir.join("proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    for proto in PROTOS.iter().chain(OWN_PROTOS) {
        println!("cargo:rerun-if-changed={}", proto_dir.join(proto).display());
    }

    let descriptors = protox::compile(PROTOS, [&proto_dir])?;

    // `compile_fds` does not write the descriptor set, and gRPC reflection
    // needs it, so it is encoded here.
    fs::write(out_dir.join("cnpgi_descriptor.bin"), descriptors.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `XClient::connect(uri)` helpers: they need tonic's transport,
        // and this crate (hence cnpgi-core) stays free of it. Clients are
        // built on a channel (`XClient::new(channel)`).
        .build_transport(false)
        // Unimplemented RPCs answer UNIMPLEMENTED, like embedding Go's
        // Unimplemented*Server: a plugin implements only what it advertises.
        .generate_default_stubs(true)
        .compile_fds(descriptors)?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(protox::compile(OWN_PROTOS, [&proto_dir])?)?;
    Ok(())
}
