//! Real Python clients for the tests: a virtual environment under the
//! workspace's `target/` with pinned packages from PyPI, made once and
//! reused while its package list is unchanged. A machine without
//! `python3 -m venv` or without PyPI fails the test saying which.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The official Python SDK of the exchange, pinned.
pub const HYPERLIQUID_SDK: &str = "hyperliquid-python-sdk==0.24.0";
/// A gRPC client that discovers services by reflection only (it speaks
/// `grpc.reflection.v1alpha`), pinned.
pub const GRPC_REQUESTS: &str = "grpc-requests==0.1.21";
/// Aptos' published indexer message classes (`aptos.transaction.v1`,
/// `aptos.indexer.v1`) with the gRPC runtime, pinned. They need protobuf 4,
/// which the environment above (protobuf 7) cannot hold, so they get their
/// own: [`APTOS_VENV`].
pub const APTOS_CLIENT: [&str; 4] = [
    "aptos-indexer-protos==0.1.1",
    "grpcio==1.85.3",
    "grpclib==0.4.9",
    "protobuf==4.25.9",
];
/// The environment of [`APTOS_CLIENT`], under `target/`.
pub const APTOS_VENV: &str = "python-aptos-clients";

/// The workspace's `target/` (or `CARGO_TARGET_DIR`), where the client
/// environments are kept.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    )
}

/// The `python` of a virtual environment holding `packages` (pip
/// requirement strings, pinned), created or updated on first use.
pub fn venv(packages: &[&str]) -> PathBuf {
    venv_named("python-clients", packages)
}

/// [`venv`] in its own environment `target/<name>`, for packages whose
/// pins conflict with the shared one's.
pub fn venv_named(name: &str, packages: &[&str]) -> PathBuf {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = target_dir().join(name);
    let python = root.join("bin").join("python");
    let marker = root.join("requirements.txt");
    let mut wanted: Vec<&str> = packages.to_vec();
    wanted.sort_unstable();
    let wanted = wanted.join("\n");
    // Everything asked for so far, so tests asking for different sets
    // share one environment.
    let installed = std::fs::read_to_string(&marker).unwrap_or_default();
    if wanted
        .lines()
        .all(|line| installed.lines().any(|have| have == line))
        && python.exists()
    {
        return python;
    }
    if !python.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&root)
            .output()
            .unwrap_or_else(|e| panic!("python3 is needed for the Python client tests: {e}"));
        assert!(
            made.status.success(),
            "python3 -m venv {} failed (Debian: apt-get install python3-venv): {}",
            root.display(),
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .output()
        .unwrap_or_else(|e| panic!("running pip in {}: {e}", root.display()));
    assert!(
        pip.status.success(),
        "pip could not install {packages:?} from PyPI: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let mut all: Vec<&str> = installed.lines().chain(wanted.lines()).collect();
    all.sort_unstable();
    all.dedup();
    std::fs::write(&marker, all.join("\n")).unwrap();
    python
}

/// Runs `script` with `python` and `args`, within `timeout`; its standard
/// output. Fails the test with the script's standard error when it fails.
pub async fn run(
    python: &Path,
    script: &str,
    args: &[String],
    timeout: std::time::Duration,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.py");
    std::fs::write(&path, script).unwrap();
    let child = tokio::process::Command::new(python)
        .arg(&path)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(timeout, child)
        .await
        .expect("the Python client finished in time")
        .unwrap();
    assert!(
        output.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
