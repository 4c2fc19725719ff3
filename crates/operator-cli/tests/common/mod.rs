//! Binaries of other workspace packages, built on demand for these tests.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_cnpgi-operator");

/// Builds `package` (its binary named like it) once and returns its path.
///
/// With `CNPGI_SKIP_CARGO_BUILD` set (`.ci/run` builds every binary of the
/// workspace first, with the workspace's features), the target directory's
/// binary is used as it is: a `cargo build -p` here would resolve the
/// package's features alone, compile part of the dependencies again and
/// replace the binary the later suites run.
pub fn workspace_binary(package: &str) -> PathBuf {
    let path = Path::new(BIN).parent().unwrap().join(package);
    if std::env::var_os("CNPGI_SKIP_CARGO_BUILD").is_some_and(|v| !v.is_empty()) {
        assert!(
            path.is_file(),
            "{} is missing and CNPGI_SKIP_CARGO_BUILD is set: run `cargo build --workspace --bins` first, or unset it",
            path.display()
        );
        return path;
    }
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
    path
}
