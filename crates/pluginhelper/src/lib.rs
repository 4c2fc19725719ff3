//! Write CNPG-I plugins in Rust.
//!
//! placeholder: crate docs written with the server module.

#![forbid(unsafe_code)]

pub mod cluster;
pub mod parameters;
pub mod patch;
pub mod sidecar;
pub mod status;
pub mod validation;
