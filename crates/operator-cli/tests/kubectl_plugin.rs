//! The binary installed as `kubectl-cnpgi` (so that `kubectl cnpgi doctor`
//! runs it) behaves as `cnpgi-operator`: the same commands, flags and exit
//! codes, whatever the name it was invoked by.

use std::{path::Path, process::Command};

const BIN: &str = env!("CARGO_BIN_EXE_cnpgi-operator");

fn run(program: &Path, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run the binary")
}

#[test]
fn a_symlink_named_kubectl_cnpgi_is_cnpgi_operator() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-cnpgi");
    std::os::unix::fs::symlink(BIN, &link).unwrap();

    // The same help, under the same name.
    let direct = run(Path::new(BIN), &["doctor", "--help"]);
    let plugin = run(&link, &["doctor", "--help"]);
    assert!(plugin.status.success(), "{plugin:?}");
    assert_eq!(
        String::from_utf8_lossy(&plugin.stdout),
        String::from_utf8_lossy(&direct.stdout)
    );
    let help = String::from_utf8_lossy(&plugin.stdout);
    assert!(
        help.contains("Usage: cnpgi-operator doctor") && help.contains("--all-namespaces"),
        "{help}"
    );

    // The doctor itself runs, and says what it could not read (exit 2).
    let missing = dir.path().join("no-such-kubeconfig");
    let missing = missing.to_str().unwrap();
    let out = run(&link, &["doctor", "--kubeconfig", missing]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read the kubeconfig") && stderr.contains(missing),
        "{stderr}"
    );

    // Other commands too, and a usage error is clap's, as for cnpgi-operator.
    let out = run(&link, &["crd"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CustomResourceDefinition"));
    let out = run(&link, &["doctor", "--output", "yaml"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid value 'yaml'"),
        "{out:?}"
    );
}

#[test]
fn a_copy_with_an_extension_or_another_name_is_not_taken_for_something_else() {
    let dir = tempfile::tempdir().unwrap();
    // Windows-style copies keep working (`kubectl-cnpgi.exe`: the stem counts);
    // any other name is cnpgi-operator as before.
    for name in ["kubectl-cnpgi.exe", "cnpgi"] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(BIN, &link).unwrap();
        let out = run(&link, &["--version"]);
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("cnpgi-operator "),
            "{name}: {out:?}"
        );
    }
}
