//! Binaries of other workspace packages, built on demand for these tests.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_cnpgi-operator");

/// Builds `package` (its binary named like it) once and returns its path.
pub fn workspace_binary(package: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if !built.iter().any(|p| p == package) {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", package])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cargo build -p {package} failed");
        built.push(package.to_owned());
    }
    Path::new(BIN).parent().unwrap().join(package)
}
