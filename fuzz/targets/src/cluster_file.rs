//! The `cluster_file` target: the instance commands' and `render`'s parser of Cluster files.

use std::path::Path;

// The binary crate's module itself (cnpgi-operator-cli has no library to
// depend on), so the fuzzer tests the code the commands run.
#[path = "../../../crates/operator-cli/src/yaml.rs"]
#[allow(dead_code)]
mod yaml;

/// The Cluster files the instance commands and `render` read (YAML or
/// JSON, any text): parsed or refused with the file's name, never a panic
/// or a stack overflow, in time linear enough for libFuzzer's -timeout.
pub fn cluster_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(error) = yaml::parse_yaml(Path::new("cluster.yaml"), text) {
        assert!(
            format!("{error:#}").contains("cluster.yaml"),
            "the error does not name the file: {error:#}"
        );
    }
}
