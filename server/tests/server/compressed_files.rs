//! Compressed captures: the real node captures compressed as the exchange's
//! archive is (the `lz4` tool's defaults), and with `zstd` and `gzip`, give
//! byte-identical replays and raw-feed records; a truncated or bit-flipped
//! hour is a clear error naming the file and the offset, with what came
//! before it kept.

use std::path::Path;
use std::process::Command;

use super::harness::real;

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

/// A compression tool of the machine's (Debian packages `lz4`, `zstd`,
/// `gzip`), with the flags that leave the input and overwrite the output.
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    Lz4,
    Zstd,
    Gzip,
}

impl Tool {
    pub fn extension(self) -> &'static str {
        match self {
            Tool::Lz4 => "lz4",
            Tool::Zstd => "zst",
            Tool::Gzip => "gz",
        }
    }

    /// Compresses `from` into `to` with the tool's defaults.
    pub fn compress(self, from: &Path, to: &Path) {
        let (program, args, output): (&str, &[&str], &[&str]) = match self {
            // The archive's format: the `lz4` tool's defaults (4 MiB
            // independent blocks, content checksum).
            Tool::Lz4 => ("lz4", &["-q", "-f"], &[]),
            Tool::Zstd => ("zstd", &["-q", "-f"], &["-o"]),
            Tool::Gzip => ("gzip", &["-c"], &[]),
        };
        let mut command = Command::new(program);
        command.args(args).arg(from).args(output);
        let result = match self {
            Tool::Gzip => command
                .output()
                .map(|out| std::fs::write(to, &out.stdout).map(|()| out.status)),
            _ => command.arg(to).output().map(|out| Ok(out.status)),
        };
        match result {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => panic!("{program} failed on {}: {status}", from.display()),
            Ok(Err(e)) => panic!("writing {}: {e}", to.display()),
            Err(e) => panic!(
                "the `{program}` tool is needed to compress test captures (Debian package \
                 `{program}`; .ci/run installs it): {e}"
            ),
        }
    }
}

/// A copy of `data` (a data directory of node files) in which every hourly
/// file is compressed with `tool` (`H` becomes `H.<ext>`); other files
/// (snapshots) are copied as they are.
pub fn compressed_copy(data: &Path, tool: Tool) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    copy_tree(data, out.path(), tool);
    out
}

fn copy_tree(from: &Path, to: &Path, tool: Tool) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().into_string().unwrap();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name), tool);
        } else if is_hour_file(&path) {
            // Compressed from a copy, so that no tool ever writes beside the
            // read-only captures.
            let plain = to.join(&name);
            std::fs::copy(&path, &plain).unwrap();
            tool.compress(&plain, &to.join(format!("{name}.{}", tool.extension())));
            std::fs::remove_file(&plain).unwrap();
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

/// `…/hourly/YYYYMMDD/H`.
fn is_hour_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let in_hourly = path
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .is_some_and(|n| n == "hourly");
    in_hourly && !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

fn replay(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(L1GATE)
        .args(["replay", "--data"])
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

fn replay_ok(data: &Path, args: &[&str]) -> Vec<u8> {
    let out = replay(data, args);
    assert!(
        out.status.success(),
        "replay {args:?} over {}: {}",
        data.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn replays_of_compressed_real_captures_are_byte_identical() {
    let cases: [(&str, &[&[&str]]); 3] = [
        (
            "btc-985148182",
            &[
                &["--view", "bbo", "--coins", "BTC"],
                &["--view", "l2book", "--coins", "BTC"],
                &["--view", "l4updates", "--coins", "BTC"],
                &["--view", "trades", "--coins", "BTC"],
                &["--view", "l2diff", "--coins", "BTC"],
                &["--view", "candles", "--coins", "BTC", "--interval", "1m"],
            ],
        ),
        (
            "btc-978995377",
            &[&["--view", "trades", "--coins", "BTC"], &["--view", "tpsl"]],
        ),
        (
            "fills-unfiltered",
            &[
                &["--view", "trades", "--coins", "@230,@142,@166,BTC,UNI"],
                &[
                    "--view",
                    "fills",
                    "--users",
                    "0x31ca8395cf837de08b24da3f660e77761dfb974b",
                ],
                &["--view", "candles", "--coins", "@230", "--interval", "1s"],
            ],
        ),
    ];
    for tool in [Tool::Lz4, Tool::Zstd, Tool::Gzip] {
        for (capture, views) in cases {
            let plain = real(capture);
            let packed = compressed_copy(&plain, tool);
            for args in views {
                let want = replay_ok(&plain, args);
                assert!(!want.is_empty(), "{capture} {args:?} prints frames");
                assert!(
                    replay_ok(packed.path(), args) == want,
                    "{capture} compressed with {tool:?}, {args:?}: the frames differ"
                );
            }
        }
    }
}

/// The unfiltered real fills split into two hours by block time (the file
/// of hour 0 begins with a block of hour 23, as the node's files spill
/// over), each compressed with `lz4`, the second damaged by `damage`.
fn two_hours(damage: impl Fn(&mut Vec<u8>)) -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let lines = super::harness::real_lines("fills-unfiltered", "node_fills_by_block");
    let dir = tempfile::tempdir().unwrap();
    let hourly = dir.path().join("hl/data/node_fills_by_block/hourly");
    let first = hourly.join("20260314/23");
    let second = hourly.join("20260315/0");
    for path in [&first, &second] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    }
    let join = |part: &[Vec<u8>]| -> Vec<u8> {
        part.iter()
            .flat_map(|l| l.iter().copied().chain([b'\n']))
            .collect()
    };
    std::fs::write(&first, join(&lines[..4])).unwrap();
    std::fs::write(&second, join(&lines[4..])).unwrap();
    for path in [&first, &second] {
        let packed = path.with_file_name(format!(
            "{}.lz4",
            path.file_name().unwrap().to_str().unwrap()
        ));
        Tool::Lz4.compress(path, &packed);
        std::fs::remove_file(path).unwrap();
        if path == &second {
            let mut bytes = std::fs::read(&packed).unwrap();
            damage(&mut bytes);
            std::fs::write(&packed, bytes).unwrap();
        }
    }
    (dir, lines)
}

#[test]
fn a_damaged_hour_is_a_clear_error_after_the_frames_before_it() {
    // Hour 23 alone, plain: the frames every damaged run must print first.
    let (whole, lines) = two_hours(|_| {});
    let only_first = tempfile::tempdir().unwrap();
    let path = only_first
        .path()
        .join("hl/data/node_fills_by_block/hourly/20260314/23");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let first: Vec<u8> = lines[..4]
        .iter()
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    std::fs::write(&path, first).unwrap();
    let args = ["--view", "trades", "--coins", "@230,@142,STBL,HBAR,AAVE"];
    let before = replay_ok(only_first.path(), &args);
    let all = replay_ok(whole.path(), &args);
    assert!(all.len() > before.len() && all.starts_with(&before));

    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage, &str); 2] = [
        (
            "truncated",
            |bytes| bytes.truncate(bytes.len() / 2),
            "truncated",
        ),
        (
            "bit-flipped",
            |bytes| {
                let at = bytes.len() / 2;
                bytes[at] ^= 0x08;
            },
            "",
        ),
    ];
    for (what, damage, kind) in damages {
        let (dir, _) = two_hours(damage);
        let out = replay(dir.path(), &args);
        assert!(!out.status.success(), "{what}: the replay must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("hourly/20260315/0.lz4") && stderr.contains("compressed byte"),
            "{what}: the error names the file and the offset: {stderr}"
        );
        assert!(stderr.contains(kind), "{what}: {stderr}");
        assert!(
            out.stdout.starts_with(&before),
            "{what}: the frames of the hour before are printed"
        );
        assert!(
            all.starts_with(&out.stdout),
            "{what}: nothing but sound frames is printed"
        );
    }
}
