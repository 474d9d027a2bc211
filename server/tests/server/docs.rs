//! The README and the reference pages under `docs/` read as a user reads
//! them, checked against the code so an example cannot drift from it:
//!
//! - every `l1gate …` command line of a `sh` block parses with the real
//!   command line (placeholders such as `DIR`, `KEY_ID` and `l1g_…` replaced
//!   by valid values), and a `serve` or `endpoints` line also resolves its
//!   settings; environment variables set in front of it are real ones;
//! - every grpcurl request body (`-d '{…}'`) decodes, with the proto field
//!   names, as the request message of the RPC named on its line;
//! - every `l1gate replay` over `../shared/data/real/` runs and prints at
//!   least one frame, and the output lines shown under it are its first
//!   lines, exactly;
//! - every candle lookup shown with its answer is asked of a real server
//!   started as the `l1gate serve` line of its block says, and answers it;
//!   the others are well-formed lookups;
//! - the TOML config examples load, and every relative link (and anchor)
//!   between the pages resolves.
//!
//! Conventions the pages follow: in a `sh` block, lines ending with `\`
//! continue on the next line, and lines starting with `{` are the output of
//! the command above them.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::Duration;

use bytes::Bytes;
use clap::{CommandFactory as _, Parser as _};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use l1gate::cli::{Cli, Command};
use l1gate::config::ServeArgs;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor};
use serde_json::Value;

use super::harness::TestServer;

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

/// Where real captures are, as the pages write it (relative to the
/// workspace root).
const REAL: &str = "../shared/data/real/";

/// Placeholders the pages use inside words, and valid values for them.
const IN_WORDS: [(&str, &str); 3] = [
    (
        "l1g_…",
        "l1g_0000000000000000000000000000000000000000000000000000000000000000",
    ),
    ("k_…", "k_0123456789ab"),
    ("0xabc…", "0x31ca8395cf837de08b24da3f660e77761dfb974b"),
];

/// Placeholders the pages use as whole words.
const WHOLE_WORDS: [(&str, &str); 4] = [
    ("DIR", "/tmp/l1gate-docs/node"),
    ("KEY_ID", "k_0123456789ab"),
    ("NAME", "alice"),
    ("FILE", "/tmp/l1gate-docs/file"),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every page under docs/, as (path relative to the
/// workspace, text).
fn pages() -> Vec<(String, String)> {
    let root = workspace();
    let mut names = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ next to the README")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 8, "reference pages: {docs:?}");
    names.extend(docs);
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root.join(&name)).unwrap();
            (name, text)
        })
        .collect()
}

/// One command of a `sh` block.
#[derive(Debug, Clone)]
struct Example {
    /// `page:line`.
    at: String,
    /// Index of its block over all pages.
    block: usize,
    /// Environment variables set in front of it.
    env: Vec<String>,
    /// The command's words, unquoted.
    words: Vec<String>,
    /// The output lines shown under it.
    output: Vec<String>,
}

impl Example {
    /// The `l1gate` arguments (program name first) of an `l1gate …` or a
    /// `cargo run … --bin l1gate -- …` line.
    fn l1gate(&self) -> Option<Vec<String>> {
        match self.words.first().map(String::as_str) {
            Some("l1gate") => Some(self.words.clone()),
            Some("cargo") => {
                let bin = self
                    .words
                    .windows(2)
                    .any(|w| w[0] == "--bin" && w[1] == "l1gate");
                let rest = self.words.iter().position(|w| w == "--")?;
                bin.then(|| {
                    std::iter::once("l1gate".to_owned())
                        .chain(self.words[rest + 1..].iter().cloned())
                        .collect()
                })
            }
            _ => None,
        }
    }

    fn is(&self, program: &str) -> bool {
        self.words.first().is_some_and(|w| w == program)
    }

    /// The word after `flag`.
    fn value(&self, flag: &str) -> Option<&str> {
        self.words
            .windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1].as_str())
    }
}

/// Every command of every `sh` block of every page.
fn examples() -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut block = 0;
    for (page, text) in pages() {
        let mut in_sh = false;
        let mut logical = String::new();
        let mut first_line = 0;
        for (number, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.starts_with("```") {
                assert!(
                    logical.is_empty(),
                    "{page}:{first_line}: continuation runs off its block"
                );
                if in_sh {
                    in_sh = false;
                    block += 1;
                } else {
                    in_sh = trimmed == "```sh";
                }
                continue;
            }
            if !in_sh {
                continue;
            }
            if logical.is_empty() {
                first_line = number + 1;
            }
            if let Some(head) = trimmed.strip_suffix('\\') {
                logical.push_str(head);
                logical.push(' ');
                continue;
            }
            logical.push_str(trimmed);
            let whole = std::mem::take(&mut logical);
            let at = format!("{page}:{first_line}");
            if whole.is_empty() {
                continue;
            }
            if whole.starts_with('{') {
                let last = out
                    .last_mut()
                    .filter(|e| e.block == block)
                    .unwrap_or_else(|| panic!("{at}: output with no command above it"));
                last.output.push(whole);
                continue;
            }
            let mut words = shell_words(&whole, &at);
            let env: Vec<String> = words
                .iter()
                .take_while(|w| is_assignment(w))
                .map(|w| w.split('=').next().unwrap().to_owned())
                .collect();
            words.drain(..env.len());
            out.push(Example {
                at,
                block,
                env,
                words,
                output: Vec::new(),
            });
        }
    }
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// A command line split as a POSIX shell would (quotes, backslashes,
/// `#` comments); no expansion.
fn shell_words(line: &str, at: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => panic!("{at}: unterminated ' quote"),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(c) => word.push(c),
                        None => panic!("{at}: unterminated \" quote"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The words with every placeholder replaced; none may be left.
fn substituted(words: &[String], at: &str) -> Vec<String> {
    words
        .iter()
        .map(|word| {
            let mut word = word.clone();
            for (placeholder, value) in IN_WORDS {
                word = word.replace(placeholder, value);
            }
            for (placeholder, value) in WHOLE_WORDS {
                if word == placeholder {
                    value.clone_into(&mut word);
                }
            }
            assert!(!word.contains('…'), "{at}: unknown placeholder in {word:?}");
            word
        })
        .collect()
}

/// Every environment variable the command line reads, plus the log filter.
fn known_variables() -> BTreeSet<String> {
    fn walk(command: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in command.get_arguments() {
            if let Some(env) = arg.get_env() {
                out.insert(env.to_string_lossy().into_owned());
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = BTreeSet::from(["L1GATE_LOG".to_owned(), "RUST_LOG".to_owned()]);
    walk(&Cli::command(), &mut out);
    out
}

#[test]
fn every_l1gate_command_line_parses() {
    let known = known_variables();
    let mut parsed = 0;
    let mut seen: BTreeSet<&'static str> = BTreeSet::new();
    for example in examples() {
        let Some(args) = example.l1gate() else {
            continue;
        };
        let at = &example.at;
        for name in &example.env {
            assert!(
                known.contains(name),
                "{at}: {name} is not a variable l1gate reads"
            );
        }
        let args = substituted(&args, at);
        let cli =
            Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{at}: {}\n{e}", args.join(" ")));
        let (name, settings) = match cli.command {
            Command::Serve(serve) => ("serve", serve.config.is_none().then_some(serve.settings)),
            Command::Endpoints(endpoints) => (
                "endpoints",
                endpoints.config.is_none().then_some(endpoints.settings),
            ),
            Command::Routes(routes) => {
                ("routes", routes.config.is_none().then_some(routes.settings))
            }
            Command::Edge(edge) => ("edge", edge.config.is_none().then_some(edge.settings)),
            Command::Keys(_) => ("keys", None),
            Command::Replay(_) => ("replay", None),
            Command::Simulate(_) => ("simulate", None),
            Command::Archive(_) => ("archive", None),
            Command::Candles(_) => ("candles", None),
        };
        if let Some(settings) = settings
            && let Err(error) = settings.resolve()
        {
            panic!("{at}: {}: {error}", args.join(" "));
        }
        seen.insert(name);
        parsed += 1;
    }
    assert!(parsed >= 30, "only {parsed} l1gate command lines found");
    assert_eq!(
        seen,
        BTreeSet::from([
            "archive",
            "candles",
            "edge",
            "endpoints",
            "keys",
            "replay",
            "routes",
            "serve",
            "simulate"
        ]),
        "every subcommand has an example"
    );
}

/// Checks that every key of `value` is the proto name of a field of
/// `message`, recursing into message fields.
fn proto_names(message: &MessageDescriptor, value: &Value, path: &str) -> Result<(), String> {
    let Value::Object(map) = value else {
        return Err(format!("{path}: {value} is not an object"));
    };
    for (key, value) in map {
        let field = message
            .get_field_by_name(key)
            .ok_or_else(|| format!("{path}{key}: not a field of {}", message.full_name()))?;
        if let Kind::Message(inner) = field.kind() {
            if field.is_map() {
                continue;
            }
            let items = match value {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            for item in &items {
                proto_names(&inner, item, &format!("{path}{key}."))?;
            }
        }
    }
    Ok(())
}

#[test]
fn every_grpcurl_body_decodes_as_its_rpcs_request() {
    let pool = DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut bodies = 0;
    let mut calls = 0;
    for example in examples().iter().filter(|e| e.is("grpcurl")) {
        let at = &example.at;
        let Some(method) = example.words.iter().find(|w| {
            (w.starts_with("venue_l1_gateway.") || w.starts_with("aptos.indexer."))
                && w.contains('/')
        }) else {
            assert!(
                example.words.iter().any(|w| w == "list" || w == "describe"),
                "{at}: a grpcurl line with no method"
            );
            continue;
        };
        calls += 1;
        let (service, name) = method.split_once('/').unwrap();
        let service = pool
            .get_service_by_name(service)
            .unwrap_or_else(|| panic!("{at}: no service {service}"));
        let rpc = service
            .methods()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("{at}: {} has no RPC {name}", service.full_name()));
        let Some(body) = example.value("-d") else {
            continue;
        };
        let input = rpc.input();
        let json: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{at}: the body is not JSON: {e}: {body}"));
        if let Err(error) = proto_names(&input, &json, "") {
            panic!("{at}: {method}: {error}");
        }
        let mut deserializer = serde_json::Deserializer::from_str(body);
        if let Err(error) = DynamicMessage::deserialize(input.clone(), &mut deserializer) {
            panic!("{at}: {body} is not a {}: {error}", input.full_name());
        }
        bodies += 1;
    }
    assert!(calls >= 15, "only {calls} grpcurl calls found");
    assert!(bodies >= 15, "only {bodies} grpcurl bodies found");
}

#[test]
fn every_replay_of_the_real_captures_runs_and_prints_what_the_page_shows() {
    let root = workspace();
    let mut ran = 0;
    let mut compared = 0;
    for example in examples() {
        let Some(args) = example.l1gate() else {
            continue;
        };
        if args.get(1).map(String::as_str) != Some("replay") {
            continue;
        }
        if example.value("--out").is_some() {
            // Written to files: the research examples' test runs these.
            continue;
        }
        let at = &example.at;
        let data = example.value("--data").unwrap_or_default();
        if !data.starts_with(REAL) {
            assert!(
                example.output.is_empty(),
                "{at}: output is shown for a replay the tests cannot run"
            );
            continue;
        }
        assert!(root.join(data).is_dir(), "{at}: {data} does not exist");
        let run = Process::new(L1GATE)
            .args(&args[1..])
            .current_dir(&root)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{at}: {}\n{stderr}", args.join(" "));
        let stdout = String::from_utf8(run.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(!lines.is_empty(), "{at}: no frame\n{stderr}");
        for (n, shown) in example.output.iter().enumerate() {
            assert_eq!(
                lines.get(n).copied(),
                Some(shown.as_str()),
                "{at}: output line {} differs",
                n + 1
            );
        }
        compared += usize::from(!example.output.is_empty());
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} replays of the real captures found");
    assert!(compared >= 3, "only {compared} replays show their output");
}

/// A curl line's URL split into path-and-query, and its `-H` headers, with
/// `key` for the key placeholder.
fn curl_request(example: &Example, key: &str) -> (String, Vec<(String, String)>) {
    let words: Vec<String> = example
        .words
        .iter()
        .map(|w| w.replace("l1g_…", key))
        .collect();
    let url = words
        .iter()
        .find(|w| w.starts_with("localhost:") || w.starts_with("http://localhost:"))
        .unwrap_or_else(|| panic!("{}: no localhost URL", example.at));
    let url = url.trim_start_matches("http://");
    let path = &url[url.find('/').unwrap_or(url.len())..];
    let headers = words
        .windows(2)
        .filter(|w| w[0] == "-H")
        .map(|w| {
            let (name, value) = w[1].split_once(':').unwrap();
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    (path.to_owned(), headers)
}

/// The query parameters of a path (no percent-decoding: the pages need
/// none).
fn query(path: &str) -> Vec<(String, String)> {
    let query = path.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (name, value) = p.split_once('=').unwrap_or((p, ""));
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// A candle lookup whose answer is not shown: its parameters are a valid
/// lookup (one of each, an interval the store keeps, a bucket open).
fn assert_well_formed_lookup(example: &Example) {
    let (path, _) = curl_request(example, "l1g_key");
    let params = query(&path);
    let one = |name: &str| {
        let values: Vec<&String> = params
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect();
        assert_eq!(values.len(), 1, "{}: {name} in {path}", example.at);
        values[0].clone()
    };
    assert!(!one("market").is_empty(), "{}: empty market", example.at);
    let length = match one("interval").as_str() {
        "1s" => 1_000,
        "1m" => 60_000,
        "5m" => 300_000,
        other => panic!("{}: interval {other} is not looked up", example.at),
    };
    let time = feeds::time::parse_iso8601_ms(&one("time"))
        .unwrap_or_else(|e| panic!("{}: time: {e}", example.at));
    assert_eq!(
        time % length,
        0,
        "{}: time is not a bucket open",
        example.at
    );
}

async fn http_get(addr: SocketAddr, path: &str, headers: &[(String, String)]) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::get(path).header("host", "localhost");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
    (status, body)
}

#[tokio::test]
async fn candle_lookups_answer_what_the_page_shows() {
    let all = examples();
    let mut answered = 0;
    for example in all.iter().filter(|e| e.is("curl")) {
        if !example.words.iter().any(|w| w.contains("/v1/candles")) {
            continue;
        }
        let at = &example.at;
        if example.output.is_empty() {
            assert_well_formed_lookup(example);
            continue;
        }
        // The server is the `l1gate serve` line of the same block.
        let serve = all
            .iter()
            .filter(|e| e.block == example.block)
            .filter_map(Example::l1gate)
            .find(|args| args.get(1).map(String::as_str) == Some("serve"))
            .unwrap_or_else(|| panic!("{at}: no `l1gate serve` line in the block"));
        let Ok(Cli {
            command: Command::Serve(serve),
        }) = Cli::try_parse_from(substituted(&serve, at))
        else {
            panic!("{at}: the serve line does not parse");
        };
        let mut wanted = serve.settings;
        let data = wanted.data.take().expect("the serve line names its data");
        assert!(
            data.starts_with(REAL),
            "{at}: a shown answer needs a server over {REAL}"
        );
        // The test's own keys, addresses and state; the rest as the page says.
        wanted.keys_file = None;
        wanted.grpc_addr = None;
        wanted.http_addr = None;
        wanted.state_dir = None;
        let server = TestServer::start(&workspace().join(&data), |args: &mut ServeArgs| {
            *args = wanted.clone().or(args.clone());
        })
        .await;
        // Until the store has folded the newest block of the fills on disk.
        let last = server
            .running
            .live
            .feed(feeds::Source::Fills)
            .and_then(|feed| feed.newest())
            .and_then(|newest| newest.block_number)
            .unwrap_or_else(|| panic!("{at}: no fills in {}", data.display()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let (block, _, caught_up, error) = server.running.candles.progress();
            assert_eq!(error, None, "{at}");
            if caught_up && block >= last {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{at}: candles never caught up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (path, headers) = curl_request(example, &server.key);
        let (status, body) = http_get(server.running.http_addr, &path, &headers).await;
        assert_eq!(status, 200, "{at}: {body}");
        let [shown] = example.output.as_slice() else {
            panic!("{at}: one answer line expected");
        };
        let shown: Value = serde_json::from_str(shown).unwrap();
        assert_eq!(body, shown, "{at}: the answer differs from the page");
        answered += 1;
    }
    assert!(answered >= 1, "no candle lookup shows its answer");
}

#[test]
fn config_file_examples_load() {
    let mut loaded = 0;
    for (page, text) in pages() {
        if page != "docs/configuration.md" {
            continue;
        }
        let mut block: Option<String> = None;
        for line in text.lines() {
            match (&mut block, line.trim()) {
                (None, "```toml") => block = Some(String::new()),
                (Some(toml), "```") => {
                    let args: ServeArgs = toml::from_str(toml)
                        .unwrap_or_else(|e| panic!("{page}: config example: {e}"));
                    args.resolve()
                        .unwrap_or_else(|e| panic!("{page}: config example: {e}"));
                    loaded += 1;
                    block = None;
                }
                (Some(toml), _) => {
                    toml.push_str(line);
                    toml.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    assert!(loaded >= 1, "no config file example");
}

/// The anchors GitHub gives a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim().to_lowercase();
        let anchor: String = title
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.insert(anchor);
    }
    out
}

#[test]
fn links_between_the_pages_resolve() {
    let root = workspace();
    let mut checked = 0;
    for (page, text) in pages() {
        let dir = root.join(&page).parent().unwrap().to_owned();
        let mut rest = text.as_str();
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let end = rest.find(')').unwrap();
            let target = &rest[..end];
            rest = &rest[end..];
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                root.join(&page)
            } else {
                dir.join(file)
            };
            assert!(path.exists(), "{page}: link to {target}: no such file");
            if !anchor.is_empty() {
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(
                    anchors(&text).contains(anchor),
                    "{page}: link to {target}: no such heading"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} links found");
}

/// The schema block of `table` as docs/replay-and-simulate.md shows it.
fn schema_markdown(table: &export::Table) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "#### `{}`\n\nOne row is {}.\n\n| column | type | meaning |\n|---|---|---|\n",
        table.name, table.row
    );
    for column in table.columns {
        let empty = if column.nullable {
            ", may be empty"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| `{}` | {}{empty} | {} |",
            column.name,
            column.kind.name(),
            column.doc
        );
    }
    out
}

#[test]
fn every_export_tables_schema_is_on_the_replay_page_as_the_code_has_it() {
    let page = std::fs::read_to_string(workspace().join("docs/replay-and-simulate.md")).unwrap();
    let mut tables = export::views::all();
    tables.push(&export::candles::TABLE);
    let missing: Vec<String> = tables
        .iter()
        .map(|table| schema_markdown(table))
        .filter(|block| !page.contains(block.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/replay-and-simulate.md lacks these schema blocks, as the code has them:\n\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_research_examples_write_their_files_and_read_in_duckdb_and_polars() {
    let root = workspace();
    let dir = tempfile::tempdir().unwrap();
    let mut wrote = 0;
    for example in examples() {
        let Some(mut args) = example.l1gate() else {
            continue;
        };
        if args.get(1).map(String::as_str) != Some("replay") || example.value("--out").is_none() {
            continue;
        }
        let at = &example.at;
        let data = example.value("--data").unwrap_or_default().to_owned();
        if !data.starts_with(REAL) {
            // Over a placeholder: its command line is parsed, not run.
            continue;
        }
        for arg in &mut args {
            if *arg == data {
                *arg = root.join(&data).display().to_string();
            }
        }
        let run = Process::new(L1GATE)
            .args(&args[1..])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{at}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&run.stderr)
        );
        let out = example.value("--out").unwrap();
        assert!(dir.path().join(out).exists(), "{at}: {out} not written");
        wrote += 1;
    }
    assert!(wrote >= 3, "only {wrote} export examples found");

    let page = std::fs::read_to_string(root.join("docs/replay-and-simulate.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match (&mut current, line.trim()) {
            (None, "```python") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(blocks.len() >= 4, "only {} Python examples", blocks.len());
    let python = super::python::venv_named(
        super::research_export::VENV,
        &super::research_export::READERS,
    );
    for block in &blocks {
        let run = Process::new(&python)
            .args(["-c", block])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && !stdout.trim().is_empty(),
            "the example\n{block}\nfailed or printed nothing:\n{stdout}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}
