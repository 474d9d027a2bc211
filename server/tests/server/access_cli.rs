//! `l1gate keys allow | disallow | list` on a real keys file.

use std::process::Command;

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

fn keys(args: &[&str], file: &std::path::Path) -> std::process::Output {
    Command::new(L1GATE)
        .arg("keys")
        .args(args)
        .arg("--keys-file")
        .arg(file)
        .env_remove("L1GATE_KEYS_FILE")
        .output()
        .unwrap()
}

fn stdout(output: &std::process::Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn allow_lists_are_edited_and_listed_by_key_id() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    let added = stdout(&keys(&["add", "--account", "ops"], &file));
    let id = added
        .split_whitespace()
        .find(|w| w.starts_with("k_"))
        .unwrap()
        .to_owned();
    let key = added.lines().last().unwrap().to_owned();

    let listed = stdout(&keys(&["list"], &file));
    assert!(listed.contains("allow_list=any"), "{listed}");

    let allowed = stdout(&keys(
        &[
            "allow",
            "--key-id",
            &id,
            "--cidr",
            "10.1.2.3/8",
            "--cidr",
            "2001:db8::/32",
        ],
        &file,
    ));
    assert!(allowed.contains("10.0.0.0/8, 2001:db8::/32"), "{allowed}");
    let listed = stdout(&keys(&["list"], &file));
    assert!(
        listed.contains(&format!("{id}\tactive"))
            && listed.contains("allow_list=10.0.0.0/8,2001:db8::/32"),
        "{listed}"
    );
    assert!(!listed.contains(&key));

    let bad = keys(&["allow", "--key-id", &id, "--cidr", "10.0.0/8"], &file);
    assert!(!bad.status.success());
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(
        message.contains("--cidr") && message.contains("10.0.0/8"),
        "{message}"
    );
    let unknown = keys(
        &["allow", "--key-id", "k_nope", "--cidr", "10.0.0.0/8"],
        &file,
    );
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("k_nope"));

    let removed = stdout(&keys(
        &[
            "disallow",
            "--key-id",
            &id,
            "--cidr",
            "10.0.0.0/8",
            "--cidr",
            "2001:db8::/32",
        ],
        &file,
    ));
    assert!(removed.contains("usable from any address"), "{removed}");
    assert!(stdout(&keys(&["list"], &file)).contains("allow_list=any"));
}

#[test]
fn account_limits_are_set_listed_and_validated() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    stdout(&keys(&["add", "--account", "team"], &file));
    assert!(!stdout(&keys(&["list"], &file)).contains("limits"));
    stdout(&keys(
        &[
            "limits",
            "--account",
            "team",
            "--requests-per-second",
            "5",
            "--max-streams",
            "2",
        ],
        &file,
    ));
    let listed = stdout(&keys(&["list"], &file));
    assert!(
        listed
            .contains("team\tlimits\trequests_per_second=5\trequest_burst=default\tmax_streams=2"),
        "{listed}"
    );
    let zero = keys(
        &["limits", "--account", "team", "--request-burst", "0"],
        &file,
    );
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--request-burst"));
    let unknown = keys(
        &["limits", "--account", "nobody", "--max-streams", "1"],
        &file,
    );
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("nobody"));
    stdout(&keys(&["limits", "--account", "team", "--default"], &file));
    assert!(!stdout(&keys(&["list"], &file)).contains("limits"));
}
