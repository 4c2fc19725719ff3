//! The fuzz targets' logic, one function per target of `fuzz/` (cargo fuzz),
//! each fed any bytes and panicking only on a bug it found.
//!
//! `fuzz/fuzz_targets/<target>.rs` is libFuzzer's glue: it hands each input to
//! the function of the same name here. This crate does not depend on
//! libfuzzer-sys, so it is a workspace member: `cargo test --workspace` runs
//! `tests/corpus.rs`, which feeds every committed input of
//! `fuzz/corpus/<target>/` to its function, on stable and without
//! instrumentation, with the workspace's compiled dependencies. The
//! coverage-guided fuzzing itself runs nightly (`tests/fuzz/run.sh`).

mod admission_review;
mod cluster_file;
mod cluster_wire;
mod json_patch;
mod wal_object;

pub use admission_review::admission_review;
pub use cluster_file::cluster_file;
pub use cluster_wire::cluster_wire;
pub use json_patch::json_patch;
pub use wal_object::wal_object;
