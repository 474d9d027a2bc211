//! `l1gate keys allow | disallow | limits | rotate | quota | list` on a real keys
//! file.

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

/// Parallel `keys` commands: every key printed is stored, no account is
/// wiped, every revocation sticks, and each command succeeds.
#[test]
fn parallel_keys_commands_lose_nothing() {
    const ADDERS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    // Keys to revoke while the adders run.
    let doomed: Vec<String> = (0..8)
        .map(|_| {
            let added = stdout(&keys(&["add", "--account", "doomed"], &file));
            added
                .split_whitespace()
                .find(|w| w.starts_with("k_"))
                .unwrap()
                .to_owned()
        })
        .collect();
    let spawn = |args: Vec<String>| {
        Command::new(L1GATE)
            .arg("keys")
            .args(&args)
            .arg("--keys-file")
            .arg(&file)
            .env_remove("L1GATE_KEYS_FILE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut adders = Vec::new();
    let mut revokers = Vec::new();
    for i in 0..ADDERS {
        adders.push(spawn(vec![
            "add".into(),
            "--account".into(),
            format!("team{}", i % 3),
        ]));
        if let Some(id) = doomed.get(i) {
            revokers.push(spawn(vec!["revoke".into(), id.clone()]));
        }
    }
    let mut printed = Vec::new();
    for child in adders {
        let output = child.wait_with_output().unwrap();
        let out = stdout(&output);
        let id = out
            .split_whitespace()
            .find(|w| w.starts_with("k_"))
            .unwrap()
            .to_owned();
        printed.push(id);
    }
    for child in revokers {
        stdout(&child.wait_with_output().unwrap());
    }
    let listed = stdout(&keys(&["list"], &file));
    for id in &printed {
        assert!(
            listed.contains(&format!("{id}\tactive")),
            "{id} printed but not stored:\n{listed}"
        );
    }
    for id in &doomed {
        assert!(
            listed.contains(&format!("{id}\trevoked")),
            "{id} revoked but still active:\n{listed}"
        );
    }
    assert_eq!(listed.lines().count(), ADDERS + doomed.len(), "{listed}");
    // No temporary file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// The id (`k_…`) a `keys add` / `keys rotate` line names after `word`.
fn id_after(output: &str, word: &str) -> String {
    output
        .split_whitespace()
        .skip_while(|w| *w != word)
        .nth(1)
        .unwrap_or_else(|| panic!("no id after {word:?} in {output}"))
        .trim_end_matches([':', ','])
        .to_owned()
}

#[test]
fn keys_rotate_prints_a_new_key_and_list_shows_the_pending_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    let added = stdout(&keys(&["add", "--account", "ops"], &file));
    let old = id_after(&added, "key");
    let old_key = added.lines().last().unwrap().to_owned();
    stdout(&keys(
        &["allow", "--key-id", &old, "--cidr", "10.0.0.0/8"],
        &file,
    ));

    let rotated = stdout(&keys(&["rotate", "--key-id", &old, "--grace", "2h"], &file));
    let new = id_after(&rotated, "key");
    assert!(new.starts_with("k_") && new != old, "{rotated}");
    let new_key = rotated.lines().last().unwrap();
    assert!(
        new_key.starts_with("l1g_") && new_key.len() == 68 && new_key != old_key,
        "the key alone on the last line: {rotated}"
    );
    assert!(rotated.contains("(grace 2h)"), "{rotated}");
    assert!(!std::fs::read_to_string(&file).unwrap().contains(new_key));

    let listed = stdout(&keys(&["list"], &file));
    let old_line = listed.lines().find(|l| l.contains(&old)).unwrap();
    assert!(
        old_line.contains(&format!("{old}\trotated → {new}, grace until 20")),
        "{listed}"
    );
    let new_line = listed
        .lines()
        .find(|l| l.contains(&format!("\t{new}\t")))
        .unwrap();
    assert!(
        new_line.contains(&format!("{new}\tactive"))
            && new_line.contains("allow_list=10.0.0.0/8")
            && new_line.ends_with(&format!("replaces={old}")),
        "the new key inherits the allow-list: {listed}"
    );
    assert!(!listed.contains(new_key) && !listed.contains(&old_key));

    // Once only: the message names the replacement.
    let again = keys(&["rotate", "--key-id", &old], &file);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains(&new),
        "{again:?}"
    );
    // A grace of 0s ends at once; the default is 24h.
    stdout(&keys(&["rotate", "--key-id", &new, "--grace", "0s"], &file));
    let listed = stdout(&keys(&["list"], &file));
    assert!(
        listed.contains(&format!("{new}\trotated → ")) && listed.contains(", grace ended 20"),
        "{listed}"
    );
    let newest = listed
        .lines()
        .find(|l| l.ends_with(&format!("replaces={new}")))
        .map(|l| l.split('\t').nth(1).unwrap().to_owned())
        .unwrap();
    let defaulted = stdout(&keys(&["rotate", "--key-id", &newest], &file));
    assert!(defaulted.contains("(grace 24h)"), "{defaulted}");
    let bad = keys(&["rotate", "--key-id", &newest, "--grace", "soon"], &file);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--grace"),
        "{bad:?}"
    );
}

#[test]
fn keys_quota_is_set_listed_cleared_and_validated() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    let added = stdout(&keys(&["add", "--account", "team"], &file));
    let id = id_after(&added, "key");
    let set = stdout(&keys(
        &[
            "quota",
            "--key-id",
            &id,
            "--requests",
            "1000",
            "--bytes",
            "10GB",
            "--period",
            "day",
        ],
        &file,
    ));
    assert!(set.contains("1000 requests, 10GB per day"), "{set}");
    let listed = stdout(&keys(&["list"], &file));
    assert!(
        listed.contains("\tquota=1000 requests, 10GB per day"),
        "{listed}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("bytes = 10000000000"), "{text}");

    // Replaced as a whole.
    stdout(&keys(
        &[
            "quota", "--key-id", &id, "--bytes", "512MiB", "--period", "month",
        ],
        &file,
    ));
    assert!(stdout(&keys(&["list"], &file)).contains("\tquota=536870912 bytes per month"));
    for (args, complaint) in [
        (vec!["--requests", "10"], "--period"),
        (vec!["--period", "day"], "--requests"),
        (vec!["--requests", "0", "--period", "day"], "at least 1"),
        (vec!["--bytes", "10XB", "--period", "day"], "10XB"),
        (
            vec!["--clear", "--requests", "1", "--period", "day"],
            "--clear",
        ),
    ] {
        let mut full = vec!["quota", "--key-id", id.as_str()];
        full.extend(args.iter().copied());
        let output = keys(&full, &file);
        assert!(!output.status.success(), "{args:?}");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(message.contains(complaint), "{args:?}: {message}");
    }
    let unknown = keys(
        &[
            "quota",
            "--key-id",
            "k_nope",
            "--requests",
            "1",
            "--period",
            "day",
        ],
        &file,
    );
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("k_nope"));

    assert!(stdout(&keys(&["quota", "--key-id", &id, "--clear"], &file)).contains("no quota"));
    assert!(!stdout(&keys(&["list"], &file)).contains("quota="));
}

#[test]
fn keys_role_makes_an_account_admin_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    stdout(&keys(&["add", "--account", "ops"], &file));
    let set = stdout(&keys(&["role", "--account", "ops", "admin"], &file));
    assert!(set.contains("ops is now admin"), "{set}");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("role = \"admin\"")
    );
    assert!(stdout(&keys(&["list"], &file)).contains("ops\trole\tadmin"));
    stdout(&keys(&["role", "--account", "ops", "user"], &file));
    assert!(!std::fs::read_to_string(&file).unwrap().contains("role"));
    let unknown = keys(&["role", "--account", "nobody", "admin"], &file);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("nobody"));
    let bad = keys(&["role", "--account", "ops", "root"], &file);
    assert!(!bad.status.success());
}
