//! The node gateway's cost: Aptos-family REST requests relayed by l1gate to a node, against the
//! same requests sent to the node directly.
//!
//! `cargo run --release -p benches -- load gateway [--connections C] [--seconds S]
//! [--warmup S] [--no-write]`
//!
//! Three processes share the machine's cores:
//!
//! - **The node**: this binary re-run as its child `gateway-upstream`, a plain hyper HTTP/1.1
//!   server (tokio multi-threaded runtime, one worker per core) that answers like an
//!   Aptos-family node, fast and with fixed bodies: `GET /v1` ledger info with a current
//!   `ledger_timestamp` (µs), `GET /v1/accounts/{address}/resources` a ≈ 3 KB array of eight
//!   resources, `GET /v1/accounts/{address}/events/{creation_number}` `limit` deposit events
//!   (25 without `limit`, at most 100), every answer with the node's `X-Aptos-*` ledger headers.
//!   It counts the requests of each route (`GET /_bench/stats`), so the harness sees what
//!   reached it, and it has a CPU account of its own.
//! - **l1gate**: the `l1gate` binary in a process of its own ([`benches::server`]: the
//!   harnesses' settings, wide limits for its one key) over a small simulator node directory (`SimConfig::mainnet(seed 1, scale 0.05)`, 100
//!   blocks, caught up before the load starts), and `[[chains]]` holding one `move` network whose host is `aptos.bench` and whose node's `rest`
//!   is the child node's `/v1`. Its CPU account is its own (its idle market engine and
//!   candle writer included).
//! - **The load**: this binary re-run as its child `gateway-load`, per scenario: `C`
//!   keep-alive HTTP/1.1 connections (tokio current-thread runtime, hyper client, one request in
//!   flight each) sending the same `GET` back to back for `--warmup` then `--seconds`; each
//!   request sent in the measured window is recorded from send to last body byte in an
//!   hdrhistogram. A status other than the scenario's, or a response without the node's
//!   `X-Aptos-Ledger-Version` header where one is due, counts as unexpected; a failed exchange
//!   is an error (the connection is opened again). At the window's edges it reads the CPU time
//!   (`/proc/PID/stat` and `schedstat`) of the l1gate process, the node process and itself, and
//!   the node's request counters.
//!
//! Scenarios, in order, each with its own load process: the **reference** requests straight to
//! the node (resources, events with `limit=25`, ledger info); through l1gate with
//! `Host: aptos.bench` and the key in the path: the **relay** of the resources (rules +
//! relay), the events **without `limit`** (l1gate adds `limit=25`; the node counts the requests
//! that carry it), **ledger info** from l1gate's per-network cache (the node should see one
//! request per `ledger_cache_ms` window), and a **refusal** by the rules (`notanaddress`: 400
//! from l1gate, nothing reaches the node).
//!
//! Prints the tables and rewrites the `gateway` section of `benches/BENCHMARKS.md` (placed after
//! the `candles_http` section when new). No target: the reference is the node direct.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use benches::server::{HarnessKey, Role, ServerProcess, harness_settings};
use bytes::Bytes;
use gateway::registry::{ChainConfig, Ecosystem, NetworkConfig, NodeConfig, NodeType};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt as _, Empty, Full};
use hyper_util::rt::TokioIo;
use l1gate::config::ServeArgs;
use serde_json::{Value, json};

/// The network's host name, as clients send it in `Host`.
const HOST: &str = "aptos.bench";
/// The account every request reads.
const ACCOUNT: &str = "0x1";
/// Events creation number read.
const CREATION_NUMBER: u64 = 2;
/// What l1gate sends as `limit` when the caller gives none (`rules::DEFAULT_EVENTS_LIMIT`).
const EVENTS_DEFAULT_LIMIT: u64 = 25;
/// Simulator blocks of the server's node directory.
const BLOCKS: u64 = 100;
/// Simulator scale of the server's node directory.
const SCALE: f64 = 0.05;

/// The child that stands in for the node.
pub(crate) const UPSTREAM_CHILD: &str = "gateway-upstream";
/// The child that loads the server (or the node directly).
pub(crate) const LOAD_CHILD: &str = "gateway-load";

#[derive(Debug, clap::Args)]
#[command(
    about = "The node gateway's cost: Aptos-family REST requests relayed by l1gate vs direct",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Keep-alive connections of each scenario's load.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds measured per scenario.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seconds of load before each measured window.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// Where a scenario's requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The node, directly.
    Node,
    /// l1gate, on the network's host.
    L1gate,
}

/// One measured load.
struct Scenario {
    /// Short name, in the tables.
    name: &'static str,
    target: Target,
    /// Path and query sent (the key shown as `{key}`).
    shown: String,
    /// Path and query sent.
    path: String,
    /// The status every answer should have.
    expect: u16,
    /// Whether answers should carry the node's ledger headers.
    aptos_headers: bool,
}

fn scenarios(key: &str) -> Vec<Scenario> {
    let resources = format!("/v1/accounts/{ACCOUNT}/resources");
    let events = format!("/v1/accounts/{ACCOUNT}/events/{CREATION_NUMBER}");
    let node = |name, path: String| Scenario {
        name,
        target: Target::Node,
        shown: path.clone(),
        path,
        expect: 200,
        aptos_headers: true,
    };
    let gateway = |name, path: String, expect, aptos_headers| Scenario {
        name,
        target: Target::L1gate,
        shown: format!("/{{key}}{path}"),
        path: format!("/{key}{path}"),
        expect,
        aptos_headers,
    };
    vec![
        node("reference: resources", resources.clone()),
        node(
            "reference: events",
            format!("{events}?limit={EVENTS_DEFAULT_LIMIT}"),
        ),
        node("reference: ledger info", "/v1".to_owned()),
        gateway("relay: resources", resources, 200, true),
        gateway("relay: events, default limit", events, 200, true),
        gateway("ledger info from the cache", "/v1".to_owned(), 200, true),
        gateway(
            "refused by the rules",
            "/v1/accounts/notanaddress/resources".to_owned(),
            400,
            false,
        ),
    ]
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.connections == 0 || args.seconds <= 0.0 || args.warmup < 0.0 {
        bail!("--connections must be ≥ 1, --seconds > 0, --warmup ≥ 0");
    }
    let command = benches::cargo_command();
    let machine = benches::Machine::detect();
    let load_at_start = benches::sys::loadavg().unwrap_or_else(|| "unknown".to_owned());

    let work = tempfile::Builder::new()
        .prefix("l1gate-gateway-bench-")
        .tempdir()?;
    let data = work.path().join("node");
    let mut cfg = fixtures::SimConfig::mainnet(1, SCALE);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    let run = fixtures::RunOptions {
        blocks: Some(BLOCKS),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    let summary = fixtures::generate(&cfg, &data, &run, &mut |_| {})?;

    // The node, in its own process.
    let mut node = benches::child(UPSTREAM_CHILD)
        .context("own executable")?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("node process")?;
    let node_pid = node.id();
    let mut line = String::new();
    BufReader::new(node.stdout.take().context("node stdout")?).read_line(&mut line)?;
    let node_addr: SocketAddr = line.trim().parse().context("node address")?;

    let settings = ServeArgs {
        data: Some(data.clone()),
        chains: chains(node_addr),
        ..harness_settings()
    };
    let ledger_window = settings.clone().resolve()?.upstreams.ledger_cache;
    let running = ServerProcess::start(
        &args.server.path()?,
        Role::Serve,
        settings,
        HarnessKey::new()?,
        None,
    )?;
    // Measure l1gate at rest: the candle writer and the market engine have caught up.
    running.wait_for_candles(summary.last_height)?;
    let key = running.keys.key.clone();

    let scenarios = scenarios(&key);
    let mut results = Vec::new();
    for scenario in &scenarios {
        let addr = match scenario.target {
            Target::Node => node_addr,
            Target::L1gate => running.http_addr,
        };
        let host = match scenario.target {
            Target::Node => node_addr.to_string(),
            Target::L1gate => HOST.to_owned(),
        };
        eprintln!("{}: GET {} …", scenario.name, scenario.shown);
        let load = benches::sys::loadavg()
            .and_then(|l| l.split(' ').next().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        let output = benches::child(LOAD_CHILD)
            .context("own executable")?
            .args(["--addr", &addr.to_string()])
            .args(["--host", &host])
            .args(["--path", &scenario.path])
            .args(["--expect", &scenario.expect.to_string()])
            .args(["--aptos-headers", &scenario.aptos_headers.to_string()])
            .args(["--node", &node_addr.to_string()])
            .args(["--server-pid", &running.pid().to_string()])
            .args(["--node-pid", &node_pid.to_string()])
            .args(["--connections", &args.connections.to_string()])
            .args(["--seconds", &args.seconds.to_string()])
            .args(["--warmup", &args.warmup.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .context("load generator process")?;
        if !output.status.success() {
            bail!("load generator failed: {}", output.status);
        }
        let mut result: Value =
            serde_json::from_slice(&output.stdout).context("load generator output")?;
        result["load_average"] = json!(load);
        eprintln!(
            "  {:.0} req/s, p50 {} µs, p99 {} µs, unexpected {}, errors {}",
            rps(&result),
            result["p50_us"],
            result["p99_us"],
            result["unexpected"],
            result["errors"]
        );
        results.push(result);
    }
    drop(running);
    // Closing its stdin ends the node process.
    drop(node.stdin.take());
    let _ = node.wait();
    let load_at_end = benches::sys::loadavg().unwrap_or_else(|| "unknown".to_owned());

    let report = render(&Context {
        machine: &machine,
        command: &command,
        args,
        summary: &summary,
        ledger_window,
        load_at_start: &load_at_start,
        load_at_end: &load_at_end,
        scenarios: &scenarios,
        results: &results,
    });
    println!("{report}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        place_section(&path, "gateway", "candles_http")
            .with_context(|| format!("place the gateway section in {}", path.display()))?;
        benches::write_section(&path, "gateway", &report)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the gateway section of {}", path.display());
    }
    Ok(())
}

/// The registry: one Move-family network on [`HOST`] whose node's REST API is `node`.
fn chains(node: SocketAddr) -> Vec<ChainConfig> {
    vec![ChainConfig {
        id: "aptos".into(),
        name: "Aptos".into(),
        ecosystem: Ecosystem::Move,
        networks: vec![NetworkConfig {
            id: "bench".into(),
            name: "Aptos (benchmark node)".into(),
            base_url: format!("http://{HOST}"),
            nodes: vec![NodeConfig {
                id: "bench-full".into(),
                node_type: NodeType::Full,
                public_url: None,
                rest: Some(format!("http://{node}/v1")),
                graphql: None,
                jsonrpc: None,
                jsonrpc_ws: None,
                transaction_stream: None,
                transaction_stream_token: None,
            }],
        }],
    }]
}

/// Adds empty markers for section `name` right after section `after` when the file has no
/// section `name` yet (so that [`benches::write_section`] fills it there rather than at the
/// end).
fn place_section(path: &std::path::Path, name: &str, after: &str) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    if text.contains(&format!("<!-- {name}:begin -->")) {
        return Ok(());
    }
    let end = format!("<!-- {after}:end -->\n");
    let Some(at) = text.find(&end).map(|at| at + end.len()) else {
        return Ok(());
    };
    let new = format!(
        "{}\n<!-- {name}:begin -->\n<!-- {name}:end -->\n{}",
        &text[..at],
        &text[at..]
    );
    std::fs::write(path, new)
}

fn rps(result: &Value) -> f64 {
    result["requests"].as_f64().unwrap_or(0.0)
        / result["seconds"]
            .as_f64()
            .unwrap_or(0.0)
            .max(f64::MIN_POSITIVE)
}

struct Context<'a> {
    machine: &'a benches::Machine,
    command: &'a str,
    args: &'a Args,
    summary: &'a fixtures::Summary,
    ledger_window: Duration,
    load_at_start: &'a str,
    load_at_end: &'a str,
    scenarios: &'a [Scenario],
    results: &'a [Value],
}

fn render(c: &Context<'_>) -> String {
    let by_name = |name: &str| {
        c.scenarios
            .iter()
            .position(|s| s.name == name)
            .map(|i| &c.results[i])
    };
    let int = |r: &Value, name: &str| r[name].as_u64().unwrap_or(0);
    let mut s = String::new();
    let _ = writeln!(s, "## Node gateway cost (`gateway`)\n");
    s.push_str(&c.machine.markdown(c.command));
    let _ = writeln!(
        s,
        "- Load average (1/5/15 min): {} at the start, {} at the end; other builds share the \
         machine, and l1gate, the node and the load compete with them for the 2 cores",
        c.load_at_start, c.load_at_end
    );
    let _ = writeln!(
        s,
        "- Node: a stand-in in its own process (this binary's child `gateway-upstream`: hyper HTTP/1.1, \
         tokio multi-threaded runtime), fixed bodies, every answer with the `X-Aptos-*` ledger \
         headers: ledger info with the current `ledger_timestamp`; `0x1`'s resources, {} B \
         (8 resources); events of creation number {CREATION_NUMBER}, {} B for 25",
        resources_body().len(),
        events_body(EVENTS_DEFAULT_LIMIT).len()
    );
    let _ = writeln!(
        s,
        "- l1gate: the `l1gate` binary in a process of its own, default settings \
         (`ledger_cache_ms` {}), over simulator data `SimConfig::mainnet(seed 1, scale {SCALE})`, \
         {} blocks (caught up before the load); `[[chains]]`: one `move` network on host \
         `{HOST}` whose node `rest` is the stand-in's `/v1`; one key, rate limit out of the way",
        c.ledger_window.as_millis(),
        c.summary.blocks
    );
    let _ = writeln!(
        s,
        "- Load: per scenario a fresh process (this binary's child `gateway-load`), {} keep-alive \
         HTTP/1.1 connections (hyper client, one tokio thread, one request in flight each), the \
         same `GET` back to back, {:.0} s measured after {:.0} s warm-up; through l1gate with \
         `Host: {HOST}` and the key in the path. Latency is send to last body byte. Load, l1gate \
         and node share the machine's cores.",
        c.args.connections, c.args.seconds, c.args.warmup
    );
    let _ = writeln!(
        s,
        "- Unexpected: a status other than the one in the table, or a 200 without the node's \
         `X-Aptos-Ledger-Version` header; errors: failed exchanges (connection reopened)\n"
    );
    let _ = writeln!(
        s,
        "| scenario | request | status | body B | requests | unexpected | errors | req/s | p50 µs \
         | p90 µs | p99 µs | p99.9 µs | max µs | load avg |"
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (scenario, r) in c.scenarios.iter().zip(c.results) {
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
            scenario.name,
            scenario.shown,
            scenario.expect,
            int(r, "body_bytes"),
            int(r, "requests"),
            int(r, "unexpected"),
            int(r, "errors"),
            rps(r),
            int(r, "p50_us"),
            int(r, "p90_us"),
            int(r, "p99_us"),
            int(r, "p999_us"),
            int(r, "max_us"),
            r["load_average"].as_str().unwrap_or("?"),
        );
    }
    let _ = writeln!(
        s,
        "\nWhat the node received in each measured window, and the CPU time spent per 1,000 \
         requests (`schedstat` of every thread, read at the window's edges); connections opened to \
         the node show whether l1gate's pool keeps its connections. The l1gate process \
         is the harness process: l1gate's runtime plus its idle market engine and candle \
         writer, and the harness thread waiting for the load process.\n"
    );
    let _ = writeln!(
        s,
        "| scenario | node: ledger info | node: resources | node: events with `limit=25` | node: \
         other | node: connections opened | CPU s / 1,000 req: l1gate | node | load |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (scenario, r) in c.scenarios.iter().zip(c.results) {
        let per_k = |name: &str| {
            let requests = int(r, "requests").max(1) as f64;
            r["cpu_s"][name].as_f64().unwrap_or(0.0) / requests * 1000.0
        };
        let node = &r["node_requests"];
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.3} |",
            scenario.name,
            node["ledger"],
            node["resources"],
            node["events_limit_25"],
            node["events_other"].as_u64().unwrap_or(0) + node["other"].as_u64().unwrap_or(0),
            node["connections"],
            per_k("l1gate"),
            per_k("node"),
            per_k("load"),
        );
    }
    let _ = writeln!(
        s,
        "\n**No target** (no issue sets one for the gateway); **reference: the upstream direct** (the \
         node stand-in without l1gate), same run, same requests. l1gate's CPU per request below \
         is the l1gate process's CPU in the scenario less its CPU in the reference (≈ 0: idle)."
    );
    let ratio = |relay: &str, reference: &str, what: &str| {
        let (Some(a), Some(b)) = (by_name(relay), by_name(reference)) else {
            return String::new();
        };
        let p50 = |r: &Value| int(r, "p50_us").max(1) as f64;
        let cpu = |r: &Value, side: &str| {
            r["cpu_s"][side].as_f64().unwrap_or(0.0) / int(r, "requests").max(1) as f64 * 1e6
        };
        format!(
            "- {what}: p50 {:.2}× the direct one ({} µs vs {} µs), req/s {:.2}× ({:.0} vs {:.0}); \
             l1gate's CPU {:.0} µs per request\n",
            p50(a) / p50(b),
            int(a, "p50_us"),
            int(b, "p50_us"),
            rps(a) / rps(b).max(f64::MIN_POSITIVE),
            rps(a),
            rps(b),
            cpu(a, "l1gate") - cpu(b, "l1gate"),
        )
    };
    s.push('\n');
    s.push_str(&ratio(
        "relay: resources",
        "reference: resources",
        "Relay of the resources",
    ));
    s.push_str(&ratio(
        "relay: events, default limit",
        "reference: events",
        "Relay of the events (l1gate adds `limit=25`)",
    ));
    s.push_str(&ratio(
        "ledger info from the cache",
        "reference: ledger info",
        "Ledger info from the cache",
    ));
    s.push_str(&ratio(
        "refused by the rules",
        "reference: resources",
        "Refusal by the rules (vs the node's resources)",
    ));
    if let Some(r) = by_name("relay: events, default limit") {
        let node = &r["node_requests"];
        let _ = writeln!(
            s,
            "- Events default limit: of the {} events requests the node received in the window, \
             {} carried `limit=25` (the callers sent none)",
            node["events_limit_25"].as_u64().unwrap_or(0)
                + node["events_other"].as_u64().unwrap_or(0),
            node["events_limit_25"],
        );
    }
    if let Some(r) = by_name("ledger info from the cache") {
        let seconds = r["seconds"].as_f64().unwrap_or(0.0);
        let expected = seconds / c.ledger_window.as_secs_f64();
        let reached = r["node_requests"]["ledger"].as_u64().unwrap_or(0);
        let _ = writeln!(
            s,
            "- Ledger cache: {} requests answered in {seconds:.0} s, {reached} reached the node \
             (window {} ms: {expected:.1} expected): {}",
            int(r, "requests"),
            c.ledger_window.as_millis(),
            if reached as f64 <= expected.ceil() {
                "one per window"
            } else {
                "more than one per window"
            },
        );
    }
    if let Some(r) = by_name("refused by the rules") {
        let node = &r["node_requests"];
        let reached: u64 = [
            "ledger",
            "resources",
            "events_limit_25",
            "events_other",
            "other",
        ]
        .iter()
        .map(|k| node[k].as_u64().unwrap_or(0))
        .sum();
        let _ = writeln!(
            s,
            "- Refusals: {} answered 400 by l1gate, {reached} requests reached the node",
            int(r, "requests")
        );
    }
    s
}

// ---------------------------------------------------------------------------
// The node stand-in (child process).

/// First block height and ledger version of the stand-in's ledger, which moves with the
/// clock (a block every 250 ms, 100 versions a second).
const BASE_HEIGHT: u64 = 310_000_000;
const BASE_VERSION: u64 = 2_900_000_000;
const EPOCH: u64 = 11_250;

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What the stand-in counts.
#[derive(Default)]
struct Counts {
    ledger: AtomicU64,
    resources: AtomicU64,
    events_limit_25: AtomicU64,
    events_other: AtomicU64,
    other: AtomicU64,
    /// Connections accepted.
    connections: AtomicU64,
}

struct Node {
    start_us: u64,
    resources: Bytes,
    events: Bytes,
    counts: Counts,
}

/// The resources of an ordinary account: ≈ 3 KB of JSON, as `GET …/resources` answers it.
fn resources_body() -> Bytes {
    let address = format!("0x{:064x}", 0xa11ce_u64);
    let handle = |creation: u64, counter: u64| {
        json!({
            "counter": counter.to_string(),
            "guid": {"id": {"addr": address, "creation_num": creation.to_string()}},
        })
    };
    let none = json!({"vec": []});
    let coin_store = |coin: &str, value: &str, deposit: u64, withdraw: u64| {
        json!({
            "type": format!("0x1::coin::CoinStore<{coin}>"),
            "data": {
                "coin": {"value": value},
                "deposit_events": handle(deposit, 40),
                "frozen": false,
                "withdraw_events": handle(withdraw, 3),
            },
        })
    };
    let usdc = "0xf22bede237a07e121b56d91a491eb7bcdfd1f5907926a9e58338f964a01b17fa::asset::USDC";
    let resources = json!([
        {
            "type": "0x1::account::Account",
            "data": {
                "authentication_key": address,
                "coin_register_events": handle(0, 3),
                "guid_creation_num": "12",
                "key_rotation_events": handle(1, 0),
                "rotation_capability_offer": {"for": none},
                "sequence_number": "1843",
                "signer_capability_offer": {"for": none},
            },
        },
        coin_store("0x1::aptos_coin::AptosCoin", "1284751200", 2, 3),
        coin_store(usdc, "25000000", 8, 9),
        {
            "type": "0x3::token::TokenStore",
            "data": {
                "burn_events": handle(4, 0),
                "deposit_events": handle(5, 2),
                "direct_transfer": false,
                "mutate_token_property_events": handle(6, 0),
                "tokens": {"handle": format!("0x{:064x}", 0x7ab1e_u64)},
                "withdraw_events": handle(7, 1),
            },
        },
        {
            "type": "0x1::object::ObjectCore",
            "data": {
                "allow_ungated_transfer": true,
                "guid_creation_num": "1125899906842625",
                "owner": address,
                "transfer_events": handle(10, 0),
            },
        },
        {
            "type": "0x1::primary_fungible_store::DeriveRefPod",
            "data": {"metadata_derive_ref": {"self": format!("0x{:064x}", 0xa_u64)}},
        },
        {
            "type": "0x4::collection::FixedSupply",
            "data": {
                "burn_events": handle(11, 0),
                "current_supply": "0",
                "max_supply": "1000",
                "mint_events": handle(12, 0),
                "total_minted": "0",
            },
        },
        {
            "type": "0x1::code::PackageRegistry",
            "data": {"packages": [{
                "name": "bench_market",
                "source_digest": "5B8E2B6B0E4F1CE9C1F3A1F0D0E7C6B5A4938271605F4E3D2C1B0A9988776655",
                "upgrade_number": "2",
                "upgrade_policy": {"policy": 1},
                "deps": [
                    {"account": "0x1", "package_name": "AptosFramework"},
                    {"account": "0x1", "package_name": "AptosStdlib"},
                    {"account": "0x1", "package_name": "MoveStdlib"},
                ],
                "extension": {"vec": []},
                "manifest": "0x1f8b08000000000002ff",
                "modules": [{"name": "market", "extension": {"vec": []}, "source": "0x"}],
            }]},
        },
    ]);
    Bytes::from(resources.to_string())
}

/// `limit` deposit events, as `GET …/events/{creation_number}` answers them.
fn events_body(limit: u64) -> Bytes {
    let events: Vec<Value> = (0..limit)
        .map(|sequence| {
            json!({
                "version": (BASE_VERSION - 50_000 + sequence * 97).to_string(),
                "guid": {
                    "creation_number": CREATION_NUMBER.to_string(),
                    "account_address": ACCOUNT,
                },
                "sequence_number": (1000 + sequence).to_string(),
                "type": "0x1::coin::DepositEvent",
                "data": {"amount": ((sequence + 1) * 1_000_000).to_string()},
            })
        })
        .collect();
    Bytes::from(Value::Array(events).to_string())
}

impl Node {
    fn new() -> Self {
        Self {
            start_us: unix_us(),
            resources: resources_body(),
            events: events_body(EVENTS_DEFAULT_LIMIT),
            counts: Counts::default(),
        }
    }

    /// The ledger now: (version, block height, timestamp µs).
    fn ledger(&self) -> (u64, u64, u64) {
        let now = unix_us();
        let elapsed = now.saturating_sub(self.start_us);
        (
            BASE_VERSION + elapsed / 10_000,
            BASE_HEIGHT + elapsed / 250_000,
            now,
        )
    }

    fn answer(
        &self,
        request: &hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<Full<Bytes>> {
        let path = request.uri().path();
        let query = request.uri().query().unwrap_or("");
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (version, height, timestamp) = self.ledger();
        let (status, body) = match segments.as_slice() {
            ["_bench", "stats"] => {
                let c = &self.counts;
                let body = json!({
                    "ledger": c.ledger.load(Ordering::Relaxed),
                    "resources": c.resources.load(Ordering::Relaxed),
                    "events_limit_25": c.events_limit_25.load(Ordering::Relaxed),
                    "events_other": c.events_other.load(Ordering::Relaxed),
                    "other": c.other.load(Ordering::Relaxed),
                    "connections": c.connections.load(Ordering::Relaxed),
                });
                return hyper::Response::new(Full::new(Bytes::from(body.to_string())));
            }
            ["v1"] => {
                self.counts.ledger.fetch_add(1, Ordering::Relaxed);
                let body = json!({
                    "chain_id": 1,
                    "epoch": EPOCH.to_string(),
                    "ledger_version": version.to_string(),
                    "oldest_ledger_version": "0",
                    "ledger_timestamp": timestamp.to_string(),
                    "node_role": "full_node",
                    "oldest_block_height": "0",
                    "block_height": height.to_string(),
                    "git_hash": "4d4c9a1b0e5a3f1f0c3d2b1a09f8e7d6c5b4a392",
                });
                (200, Bytes::from(body.to_string()))
            }
            ["v1", "accounts", _, "resources"] => {
                self.counts.resources.fetch_add(1, Ordering::Relaxed);
                (200, self.resources.clone())
            }
            ["v1", "accounts", _, "events", _] => {
                let limit = query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("limit="))
                    .and_then(|v| v.parse::<u64>().ok());
                if limit == Some(EVENTS_DEFAULT_LIMIT) {
                    self.counts.events_limit_25.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.counts.events_other.fetch_add(1, Ordering::Relaxed);
                }
                match limit.unwrap_or(EVENTS_DEFAULT_LIMIT) {
                    0 => (
                        400,
                        node_error("invalid_input", "limit must be larger than 0"),
                    ),
                    EVENTS_DEFAULT_LIMIT => (200, self.events.clone()),
                    n => (200, events_body(n.min(100))),
                }
            }
            _ => {
                self.counts.other.fetch_add(1, Ordering::Relaxed);
                (404, node_error("web_framework_error", "Not Found"))
            }
        };
        let mut response = hyper::Response::new(Full::new(body));
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
        let headers = response.headers_mut();
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = hyper::header::HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        set("content-type", "application/json".to_owned());
        set("x-aptos-chain-id", "1".to_owned());
        set("x-aptos-ledger-version", version.to_string());
        set("x-aptos-ledger-oldest-version", "0".to_owned());
        set("x-aptos-ledger-timestampusec", timestamp.to_string());
        set("x-aptos-epoch", EPOCH.to_string());
        set("x-aptos-block-height", height.to_string());
        set("x-aptos-oldest-block-height", "0".to_owned());
        response
    }
}

fn node_error(code: &str, message: &str) -> Bytes {
    Bytes::from(json!({"message": message, "error_code": code, "vm_error_code": null}).to_string())
}

/// Serves the stand-in node on a loopback port (printed on stdout) until stdin closes.
pub(crate) fn upstream_child(_args: &[String]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "{}", listener.local_addr()?)?;
        stdout.flush()?;
        let node = Arc::new(Node::new());
        let closed = tokio::task::spawn_blocking(|| {
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 64];
            while stdin.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let accept = async {
            loop {
                let (stream, _) = listener.accept().await?;
                stream.set_nodelay(true)?;
                node.counts.connections.fetch_add(1, Ordering::Relaxed);
                let node = node.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let response = node.answer(&request);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        };
        tokio::select! {
            _ = closed => anyhow::Ok(()),
            result = accept => result,
        }
    })
}

// ---------------------------------------------------------------------------
// The load generator (child process).

struct LoadArgs {
    addr: SocketAddr,
    host: String,
    path: String,
    expect: u16,
    aptos_headers: bool,
    node: SocketAddr,
    server_pid: u32,
    node_pid: u32,
    connections: usize,
    seconds: f64,
    warmup: f64,
}

fn parse_load_args(args: &[String]) -> anyhow::Result<LoadArgs> {
    let mut it = args.iter();
    let mut get = std::collections::HashMap::new();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        get.insert(flag.trim_start_matches("--").to_owned(), value.clone());
    }
    let value = |name: &str| {
        get.get(name)
            .cloned()
            .with_context(|| format!("--{name} missing"))
    };
    Ok(LoadArgs {
        addr: value("addr")?.parse().context("bad --addr")?,
        host: value("host")?,
        path: value("path")?,
        expect: value("expect")?.parse().context("bad --expect")?,
        aptos_headers: value("aptos-headers")?
            .parse()
            .context("bad --aptos-headers")?,
        node: value("node")?.parse().context("bad --node")?,
        server_pid: value("server-pid")?.parse().context("bad --server-pid")?,
        node_pid: value("node-pid")?.parse().context("bad --node-pid")?,
        connections: value("connections")?.parse().context("bad --connections")?,
        seconds: value("seconds")?.parse().context("bad --seconds")?,
        warmup: value("warmup")?.parse().context("bad --warmup")?,
    })
}

#[derive(Default)]
struct Tally {
    requests: u64,
    unexpected: u64,
    errors: u64,
    body_bytes: u64,
}

/// CPU times (s) of the three processes and the node's counters, at one instant.
struct Reading {
    cpu: [f64; 3],
    node: Value,
}

async fn reading(args: &LoadArgs) -> anyhow::Result<Reading> {
    let cpu = |pid: u32| {
        benches::sys::CpuTime::of_process(pid).map(|t| {
            t.run_ns
                .map_or(t.ticks as f64 / benches::sys::USER_HZ as f64, |ns| {
                    ns as f64 / 1e9
                })
        })
    };
    Ok(Reading {
        cpu: [
            cpu(args.server_pid)?,
            cpu(args.node_pid)?,
            cpu(std::process::id())?,
        ],
        node: node_stats(args.node).await?,
    })
}

async fn node_stats(node: SocketAddr) -> anyhow::Result<Value> {
    let stream = tokio::net::TcpStream::connect(node).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let request = hyper::Request::get("/_bench/stats")
        .header("host", node.to_string())
        .body(Empty::<Bytes>::new())?;
    let body = sender
        .send_request(request)
        .await?
        .into_body()
        .collect()
        .await?;
    Ok(serde_json::from_slice(&body.to_bytes())?)
}

pub(crate) fn load_child(args: &[String]) -> anyhow::Result<()> {
    let args = Arc::new(parse_load_args(args)?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = runtime.block_on(async move {
        let start = tokio::time::Instant::now();
        let measure_from = start + Duration::from_secs_f64(args.warmup);
        let end = measure_from + Duration::from_secs_f64(args.seconds);
        let mut tasks = Vec::new();
        for _ in 0..args.connections {
            tasks.push(tokio::spawn(connection(args.clone(), measure_from, end)));
        }
        let probe = {
            let args = args.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(measure_from).await;
                let before = reading(&args).await?;
                tokio::time::sleep_until(end).await;
                let after = reading(&args).await?;
                anyhow::Ok((before, after))
            })
        };
        let mut histogram = new_histogram()?;
        let mut tally = Tally::default();
        for task in tasks {
            let (h, t) = task.await??;
            histogram.add(&h)?;
            tally.requests += t.requests;
            tally.unexpected += t.unexpected;
            tally.errors += t.errors;
            tally.body_bytes = tally.body_bytes.max(t.body_bytes);
        }
        let (before, after) = probe.await??;
        let counter = |name: &str| {
            after.node[name]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(before.node[name].as_u64().unwrap_or(0))
        };
        let cpu = |i: usize| after.cpu[i] - before.cpu[i];
        anyhow::Ok(json!({
            "requests": tally.requests,
            "unexpected": tally.unexpected,
            "errors": tally.errors,
            "body_bytes": tally.body_bytes,
            "seconds": (end - measure_from).as_secs_f64(),
            "p50_us": histogram.value_at_quantile(0.50),
            "p90_us": histogram.value_at_quantile(0.90),
            "p99_us": histogram.value_at_quantile(0.99),
            "p999_us": histogram.value_at_quantile(0.999),
            "max_us": histogram.max(),
            "mean_us": histogram.mean(),
            "cpu_s": {"l1gate": cpu(0), "node": cpu(1), "load": cpu(2)},
            "node_requests": {
                "ledger": counter("ledger"),
                "resources": counter("resources"),
                "events_limit_25": counter("events_limit_25"),
                "events_other": counter("events_other"),
                "other": counter("other"),
                // Less the connection of the reading at the window's end.
                "connections": counter("connections").saturating_sub(1),
            },
        }))
    })?;
    println!("{out}");
    Ok(())
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000, 3)?)
}

/// One keep-alive connection sending the request back to back until `end` (reopened after a
/// failed exchange); requests sent before `measure_from` are not recorded.
async fn connection(
    args: Arc<LoadArgs>,
    measure_from: tokio::time::Instant,
    end: tokio::time::Instant,
) -> anyhow::Result<(Histogram<u64>, Tally)> {
    let mut histogram = new_histogram()?;
    let mut tally = Tally::default();
    let mut reported = 0;
    'connect: while tokio::time::Instant::now() < end {
        let opened = async {
            let stream = tokio::net::TcpStream::connect(args.addr).await?;
            stream.set_nodelay(true)?;
            let (sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            anyhow::Ok(sender)
        }
        .await;
        let mut sender = match opened {
            Ok(sender) => sender,
            Err(error) => {
                if tokio::time::Instant::now() >= measure_from {
                    tally.errors += 1;
                }
                eprintln!("connect: {error:#}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        loop {
            let sent = tokio::time::Instant::now();
            if sent >= end {
                break 'connect;
            }
            let measured = sent >= measure_from;
            let request = hyper::Request::get(args.path.as_str())
                .header("host", args.host.as_str())
                .body(Empty::<Bytes>::new())?;
            let exchange = async {
                sender.ready().await?;
                let response = sender.send_request(request).await?;
                let status = response.status().as_u16();
                let headers_ok = !args.aptos_headers
                    || response.headers().contains_key("x-aptos-ledger-version");
                let body = response.into_body().collect().await?.to_bytes();
                anyhow::Ok((status, headers_ok, body))
            }
            .await;
            let done = tokio::time::Instant::now();
            match exchange {
                Ok((status, headers_ok, body)) => {
                    let ok = status == args.expect && headers_ok;
                    if !ok && reported < 3 {
                        reported += 1;
                        eprintln!(
                            "unexpected answer {status} (X-Aptos headers: {headers_ok}): {}",
                            String::from_utf8_lossy(&body[..body.len().min(300)])
                        );
                    }
                    if measured {
                        tally.requests += 1;
                        tally.unexpected += u64::from(!ok);
                        tally.body_bytes = body.len() as u64;
                        histogram.record((done - sent).as_micros().max(1) as u64)?;
                    }
                }
                Err(error) => {
                    if measured {
                        tally.errors += 1;
                    }
                    if reported < 3 {
                        reported += 1;
                        eprintln!("exchange failed: {error:#}");
                    }
                    continue 'connect;
                }
            }
        }
    }
    Ok((histogram, tally))
}
