//! Building the other binaries with the cargo that built this one.
//!
//! `cargo run` sets `CARGO` for the program it runs; `report` and the harnesses that start the
//! `l1gate` binary (through [`crate::server::Binary`]) call that cargo with the same profile and
//! target directory (inherited through `CARGO_TARGET_DIR`, or the workspace default), so the
//! binaries they start are built from the same sources by the same command.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The cargo to call: `$CARGO` when set (as under `cargo run`), else `cargo` on the `PATH`.
pub fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from)
}

/// Whether this binary was built with the `release` profile (or one inheriting it whose name
/// cargo reports as such), so sibling builds use `--release` too.
pub fn release() -> bool {
    env!("BENCHES_PROFILE").starts_with("release")
}

/// What one `cargo build` produced.
#[derive(Debug, Clone)]
pub struct Built {
    /// Executable of each binary target built, by target name.
    pub executables: BTreeMap<String, PathBuf>,
    /// Wall time of the build.
    pub elapsed: Duration,
    /// The command, for the record.
    pub command: String,
}

/// Runs `cargo build [--release] ARGS --message-format=json-render-diagnostics` from this
/// crate's directory and collects the executables it reports. Compiler messages go to this
/// process's standard error.
///
/// # Errors
/// When cargo cannot be started or the build fails.
pub fn build(args: &[&str]) -> anyhow::Result<Built> {
    let mut full = vec!["build"];
    if release() {
        full.push("--release");
    }
    full.extend_from_slice(args);
    let command = format!("cargo {}", full.join(" "));
    full.push("--message-format=json-render-diagnostics");
    let started = Instant::now();
    let output = Command::new(cargo())
        .args(&full)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("start {command}"))?;
    if !output.status.success() {
        bail!("{command} failed: {}", output.status);
    }
    let executables = executables(&String::from_utf8_lossy(&output.stdout));
    Ok(Built {
        executables,
        elapsed: started.elapsed(),
        command,
    })
}

/// The `executable` of every `compiler-artifact` message for a `bin` target in cargo's JSON
/// output, by target name.
pub fn executables(json_lines: &str) -> BTreeMap<String, PathBuf> {
    json_lines
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"))
        })
        .filter_map(|m| {
            Some((
                m["target"]["name"].as_str()?.to_owned(),
                PathBuf::from(m["executable"].as_str()?),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_of_bin_artifacts_only() {
        let out = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"feeds"},"executable":null}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"l1gate"},"executable":"/t/release/l1gate"}
{"reason":"build-script-executed","package_id":"x"}
not json
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"replay"},"executable":"/t/release/replay"}
{"reason":"build-finished","success":true}"#;
        let found = executables(out);
        assert_eq!(found.len(), 2);
        assert_eq!(found["l1gate"], PathBuf::from("/t/release/l1gate"));
        assert_eq!(found["replay"], PathBuf::from("/t/release/replay"));
    }
}
