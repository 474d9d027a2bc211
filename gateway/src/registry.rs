//! The endpoint registry: the chains this deployment offers, each with its
//! networks and their nodes, as the operator configures them (`[[chains]]`
//! in the config file), plus l1gate's own exchange chain. `l1gate endpoints
//! list | search | get` reads it; the node gateway's upstreams live on the
//! same nodes.
//!
//! Every URL a client sees is public: a network's `base_url` (or a node's
//! own `public_url`) with a `<key>` placeholder where the API key goes. No
//! output carries a real key or an upstream address.

use serde::{Deserialize, Serialize};

/// A chain's family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    /// EVM chains.
    Evm,
    /// Substrate chains.
    Substrate,
    /// Cosmos SDK chains.
    Cosmos,
    /// Move chains (Aptos, Sui, …).
    Move,
    /// The exchange chain l1gate serves itself.
    Hyperliquid,
    /// Anything else.
    Other,
}

impl Ecosystem {
    /// Every value, as written.
    pub const ALL: [Ecosystem; 6] = [
        Ecosystem::Evm,
        Ecosystem::Substrate,
        Ecosystem::Cosmos,
        Ecosystem::Move,
        Ecosystem::Hyperliquid,
        Ecosystem::Other,
    ];

    /// The value as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Ecosystem::Evm => "evm",
            Ecosystem::Substrate => "substrate",
            Ecosystem::Cosmos => "cosmos",
            Ecosystem::Move => "move",
            Ecosystem::Hyperliquid => "hyperliquid",
            Ecosystem::Other => "other",
        }
    }
}

/// A node's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeType {
    /// Recent state.
    Full,
    /// All history.
    Archive,
}

impl NodeType {
    /// The value as written.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeType::Full => "full",
            NodeType::Archive => "archive",
        }
    }
}

/// `[[chains]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    /// Stable id (`aptos`).
    pub id: String,
    /// Display name (`Aptos`).
    pub name: String,
    /// Family.
    pub ecosystem: Ecosystem,
    /// Its networks.
    #[serde(default)]
    pub networks: Vec<NetworkConfig>,
}

/// `[[chains.networks]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Stable id (`mainnet`, `testnet`).
    pub id: String,
    /// Display name.
    pub name: String,
    /// The public base URL clients reach this network at (`https://…`);
    /// the key goes after it as a path segment.
    pub base_url: String,
    /// Its nodes.
    #[serde(default)]
    pub nodes: Vec<NodeConfig>,
}

/// `[[chains.networks.nodes]]`: a node and the upstreams l1gate relays to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Stable id.
    pub id: String,
    /// `full` or `archive`.
    pub node_type: NodeType,
    /// This node's own public base URL, when it is not the network's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Upstream REST API base (never shown to clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest: Option<String>,
    /// Upstream GraphQL indexer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphql: Option<String>,
    /// Upstream JSON-RPC over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonrpc: Option<String>,
    /// Upstream JSON-RPC over WebSocket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonrpc_ws: Option<String>,
    /// Upstream Transaction Stream gRPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_stream: Option<String>,
    /// The credential l1gate presents to the Transaction Stream upstream
    /// (`authorization: Bearer …`); never shown or logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_stream_token: Option<Secret>,
}

/// A credential from the config: its `Debug` and serialized forms are
/// redacted, so it cannot reach a log line or `l1gate endpoints` output.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

/// A chain as `l1gate endpoints` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chain {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Family.
    pub ecosystem: Ecosystem,
    /// Networks.
    pub networks: Vec<Network>,
}

/// A network as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Network {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Nodes.
    pub nodes: Vec<Node>,
}

/// A node as shown: public URLs with a `<key>` placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// Id.
    pub id: String,
    /// `https://…/<key>` (`None` when `--protocol wss` left it out).
    pub https: Option<String>,
    /// `wss://…/<key>` (`None` when `--protocol https` left it out).
    pub wss: Option<String>,
    /// `{"name": "full"|"archive"}`.
    pub node_type: NodeTypeName,
    /// The gRPC endpoint (l1gate's own node only; the key goes in the
    /// `x-api-key` metadata).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
}

/// `{"name": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeTypeName {
    /// `full` or `archive`.
    pub name: NodeType,
}

/// The key placeholder in every URL shown.
pub const KEY: &str = "<key>";

/// `base` with the WebSocket scheme (`https` → `wss`, `http` → `ws`).
pub fn websocket(base: &str) -> String {
    if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_owned()
    }
}

/// Checks the configured chains: ids unique at each level, base URLs with
/// a scheme.
///
/// # Errors
/// A message naming the field.
pub fn check(chains: &[ChainConfig]) -> Result<(), String> {
    let mut ids = std::collections::BTreeSet::new();
    for chain in chains {
        if chain.id.trim().is_empty() || !ids.insert(chain.id.to_ascii_lowercase()) {
            return Err(format!(
                "chains: id {} is blank or used twice",
                common::quoted(&chain.id)
            ));
        }
        let mut networks = std::collections::BTreeSet::new();
        for network in &chain.networks {
            if network.id.trim().is_empty() || !networks.insert(network.id.to_ascii_lowercase()) {
                return Err(format!(
                    "chains.{}.networks: id {} is blank or used twice",
                    chain.id,
                    common::quoted(&network.id)
                ));
            }
            let urls = std::iter::once(("base_url", &network.base_url)).chain(
                network
                    .nodes
                    .iter()
                    .filter_map(|n| n.public_url.as_ref().map(|u| ("public_url", u))),
            );
            for (field, url) in urls {
                if !(url.starts_with("https://") || url.starts_with("http://"))
                    || host_of(url).is_none()
                {
                    return Err(format!(
                        "chains.{}.networks.{}.{field}: {} is not an http(s) URL with a host",
                        chain.id,
                        network.id,
                        common::quoted(url)
                    ));
                }
            }
            for node in &network.nodes {
                let upstreams = [
                    ("rest", &node.rest),
                    ("graphql", &node.graphql),
                    ("jsonrpc", &node.jsonrpc),
                    ("jsonrpc_ws", &node.jsonrpc_ws),
                    ("transaction_stream", &node.transaction_stream),
                ];
                for (field, url) in upstreams {
                    let Some(url) = url else { continue };
                    let checked = if field == "jsonrpc_ws" {
                        let as_http = url
                            .strip_prefix("ws://")
                            .map(|rest| format!("http://{rest}"))
                            .or_else(|| url.strip_prefix("wss://").map(|r| format!("https://{r}")));
                        as_http
                            .ok_or_else(|| "a ws:// or wss:// URL".to_owned())
                            .and_then(|as_http| {
                                edge::upstream::UpstreamUrl::parse(&as_http)
                                    .map(drop)
                                    .map_err(|e| e.to_string())
                            })
                    } else {
                        edge::upstream::UpstreamUrl::parse(url)
                            .map(drop)
                            .map_err(|e| e.to_string())
                    };
                    if let Err(why) = checked {
                        return Err(format!(
                            "chains.{}.networks.{}.nodes.{}.{field}: {why}",
                            chain.id, network.id, node.id
                        ));
                    }
                }
            }
        }
    }
    let mut hosts = std::collections::BTreeMap::new();
    for site in sites(chains) {
        if let Some(other) = hosts.insert(site.host.clone(), site.name())
            && other != site.name()
        {
            return Err(format!(
                "chains: host {} is the base URL of both {other} and {}; each network needs its own host name",
                common::quoted(&site.host),
                site.name()
            ));
        }
    }
    Ok(())
}

/// The host part of an `http(s)://host[:port]/…` URL, lowercased, without
/// the port: what a request's `Host` (or `:authority`) is matched against.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        format!("[{}]", v6.split(']').next()?)
    } else {
        host.split(':').next()?.to_owned()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// The host of a request's `Host` header value (`name[:port]`), lowercased,
/// without the port.
pub fn request_host(value: &str) -> Option<String> {
    host_of(&format!("http://{}", value.trim()))
}

/// One public host name l1gate answers for a configured network: the
/// network's `base_url` (all its nodes, in order) or a node's own
/// `public_url` (that node only). A request is routed by its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// Lowercase host, no port.
    pub host: String,
    /// The chain's id.
    pub chain: String,
    /// The chain's family (l1gate's REST rules apply to `move`).
    pub ecosystem: Ecosystem,
    /// The network's id.
    pub network: String,
    /// The nodes behind this host, in configured order.
    pub nodes: Vec<NodeConfig>,
}

impl Site {
    /// `chain/network`, as logs and `/healthz` name it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.chain, self.network)
    }

    /// The first node that has the upstream `pick` returns.
    pub fn upstream<'a, T: ?Sized>(
        &'a self,
        pick: impl Fn(&'a NodeConfig) -> Option<&'a T>,
    ) -> Option<(&'a NodeConfig, &'a T)> {
        self.nodes
            .iter()
            .find_map(|node| pick(node).map(|value| (node, value)))
    }
}

/// Every host of the configured chains (see [`Site`]), in configured order.
pub fn sites(chains: &[ChainConfig]) -> Vec<Site> {
    let mut sites = Vec::new();
    for chain in chains {
        for network in &chain.networks {
            let site = |host: String, nodes: Vec<NodeConfig>| Site {
                host,
                chain: chain.id.clone(),
                ecosystem: chain.ecosystem,
                network: network.id.clone(),
                nodes,
            };
            if let Some(host) = host_of(&network.base_url) {
                sites.push(site(host, network.nodes.clone()));
            }
            for node in &network.nodes {
                if let Some(host) = node.public_url.as_deref().and_then(host_of) {
                    sites.push(site(host, vec![node.clone()]));
                }
            }
        }
    }
    sites
}

/// What `l1gate endpoints` shows: l1gate's own chain first (its HTTP API
/// and WebSocket at `public_http_url`, gRPC at `public_grpc_url`, on
/// network `network`), then the configured chains.
pub fn chains(
    configured: &[ChainConfig],
    public_http_url: &str,
    public_grpc_url: &str,
    network: &str,
) -> Vec<Chain> {
    let http = public_http_url.trim_end_matches('/');
    let own = Chain {
        id: "hyperliquid".into(),
        name: "Hyperliquid".into(),
        ecosystem: Ecosystem::Hyperliquid,
        networks: vec![Network {
            id: network.to_owned(),
            name: format!("Hyperliquid {network} (l1gate)"),
            nodes: vec![Node {
                id: "l1gate".into(),
                https: Some(format!("{http}/{KEY}")),
                wss: Some(format!("{}/{KEY}/ws", websocket(http))),
                node_type: NodeTypeName {
                    name: NodeType::Full,
                },
                grpc: Some(public_grpc_url.trim_end_matches('/').to_owned()),
            }],
        }],
    };
    std::iter::once(own)
        .chain(configured.iter().map(|chain| {
            Chain {
                id: chain.id.clone(),
                name: chain.name.clone(),
                ecosystem: chain.ecosystem,
                networks: chain
                    .networks
                    .iter()
                    .map(|network| Network {
                        id: network.id.clone(),
                        name: network.name.clone(),
                        nodes: network
                            .nodes
                            .iter()
                            .map(|node| {
                                let base = node
                                    .public_url
                                    .as_deref()
                                    .unwrap_or(&network.base_url)
                                    .trim_end_matches('/');
                                Node {
                                    id: node.id.clone(),
                                    https: Some(format!("{base}/{KEY}")),
                                    wss: Some(format!("{}/{KEY}", websocket(base))),
                                    node_type: NodeTypeName {
                                        name: node.node_type,
                                    },
                                    grpc: None,
                                }
                            })
                            .collect(),
                    })
                    .collect(),
            }
        }))
        .collect()
}

/// The filters of `l1gate endpoints`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this family.
    pub ecosystem: Option<Ecosystem>,
    /// Networks whose id or name contains this (case-insensitive).
    pub network: Option<String>,
    /// Only nodes of this kind.
    pub node_type: Option<NodeType>,
    /// Only this protocol's URLs (`https` or `wss`).
    pub protocol: Option<Protocol>,
}

/// A URL protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `https://` (or `http://`).
    Https,
    /// `wss://` (or `ws://`).
    Wss,
}

fn contains(haystack: &str, needle: &str) -> bool {
    haystack
        .to_ascii_lowercase()
        .contains(&needle.to_ascii_lowercase())
}

/// `chains` narrowed by `filter`; chains and networks left without a node
/// are dropped.
pub fn filtered(chains: Vec<Chain>, filter: &Filter) -> Vec<Chain> {
    chains
        .into_iter()
        .filter(|chain| filter.ecosystem.is_none_or(|e| chain.ecosystem == e))
        .filter_map(|mut chain| {
            chain.networks.retain(|network| {
                filter
                    .network
                    .as_deref()
                    .is_none_or(|n| contains(&network.id, n) || contains(&network.name, n))
            });
            for network in &mut chain.networks {
                network
                    .nodes
                    .retain(|node| filter.node_type.is_none_or(|t| node.node_type.name == t));
                for node in &mut network.nodes {
                    match filter.protocol {
                        Some(Protocol::Https) => node.wss = None,
                        Some(Protocol::Wss) => node.https = None,
                        None => {}
                    }
                }
            }
            chain.networks.retain(|network| !network.nodes.is_empty());
            (!chain.networks.is_empty()).then_some(chain)
        })
        .collect()
}

/// `search`: chains whose id or name contains `keyword` (every network),
/// and those with networks whose id or name contains it (those networks).
pub fn search(chains: Vec<Chain>, keyword: &str) -> Vec<Chain> {
    chains
        .into_iter()
        .filter_map(|mut chain| {
            if contains(&chain.id, keyword) || contains(&chain.name, keyword) {
                return Some(chain);
            }
            chain
                .networks
                .retain(|n| contains(&n.id, keyword) || contains(&n.name, keyword));
            (!chain.networks.is_empty()).then_some(chain)
        })
        .collect()
}

/// `get`: the chain whose id or name is `wanted` (case-insensitive).
pub fn get(chains: Vec<Chain>, wanted: &str) -> Vec<Chain> {
    chains
        .into_iter()
        .filter(|chain| {
            chain.id.eq_ignore_ascii_case(wanted) || chain.name.eq_ignore_ascii_case(wanted)
        })
        .collect()
}

/// The text table: one line per node.
pub fn to_text(chains: &[Chain]) -> String {
    use std::fmt::Write as _;
    let mut rows = vec![[
        "CHAIN".to_owned(),
        "ECOSYSTEM".to_owned(),
        "NETWORK".to_owned(),
        "NODE".to_owned(),
        "TYPE".to_owned(),
        "HTTPS".to_owned(),
        "WSS".to_owned(),
    ]];
    for chain in chains {
        for network in &chain.networks {
            for node in &network.nodes {
                rows.push([
                    chain.id.clone(),
                    chain.ecosystem.as_str().to_owned(),
                    network.id.clone(),
                    node.id.clone(),
                    node.node_type.name.as_str().to_owned(),
                    node.https.clone().unwrap_or_else(|| "-".into()),
                    node.wss.clone().unwrap_or_else(|| "-".into()),
                ]);
            }
        }
    }
    let mut widths = [0usize; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:width$}  ");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// `NAME=value` lines for an environment file: `L1GATE_API_KEY` and, per
/// node shown, `<CHAIN>_<NETWORK>_<NODE>_HTTPS_URL` (and `_WSS_URL`,
/// `_GRPC_URL`) with `key` in place of the placeholder. Names are upper
/// case, anything but letters and digits written `_`.
pub fn env_lines(chains: &[Chain], key: &str) -> Vec<(String, String)> {
    let name = |parts: &[&str], suffix: &str| {
        let mut out: String = parts
            .join("_")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        out.push('_');
        out.push_str(suffix);
        out
    };
    let mut lines = vec![("L1GATE_API_KEY".to_owned(), key.to_owned())];
    for chain in chains {
        for network in &chain.networks {
            for node in &network.nodes {
                let parts = [chain.id.as_str(), network.id.as_str(), node.id.as_str()];
                for (suffix, url) in [
                    ("HTTPS_URL", &node.https),
                    ("WSS_URL", &node.wss),
                    ("GRPC_URL", &node.grpc),
                ] {
                    if let Some(url) = url {
                        lines.push((name(&parts, suffix), url.replace(KEY, key)));
                    }
                }
            }
        }
    }
    lines
}

/// Writes `lines` into the environment file at `path`: lines of other
/// names are kept in place, a name already there takes its new value, new
/// names are appended. The file is written beside itself with mode 0600
/// and renamed over the old one, so a reader sees the old file or the new.
///
/// # Errors
/// When the file cannot be read, written or renamed.
pub fn write_env_file(path: &std::path::Path, lines: &[(String, String)]) -> std::io::Result<()> {
    use std::fmt::Write as _;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error),
    };
    let mut written = std::collections::BTreeSet::new();
    let mut out = String::new();
    for line in old.lines() {
        let existing = line
            .trim_start()
            .strip_prefix("export ")
            .unwrap_or(line.trim_start())
            .split_once('=')
            .map(|(name, _)| name.trim());
        match existing.and_then(|name| lines.iter().find(|(n, _)| n == name)) {
            Some((name, value)) if written.insert(name.clone()) => {
                let _ = writeln!(out, "{name}={value}");
            }
            // A second line of a name already written: dropped.
            Some(_) => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (name, value) in lines {
        if written.insert(name.clone()) {
            let _ = writeln!(out, "{name}={value}");
        }
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let file_name = path.file_name().map_or_else(
        || std::ffi::OsString::from("env"),
        std::ffi::OsStr::to_os_string,
    );
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(&file_name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = dir.join(temp_name);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(out.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_with_node(node: &str) -> Vec<ChainConfig> {
        let text = format!(
            "id = \"aptos\"\nname = \"Aptos\"\necosystem = \"move\"\n\
             [[networks]]\nid = \"mainnet\"\nname = \"Mainnet\"\nbase_url = \"https://aptos.example\"\n\
             [[networks.nodes]]\nid = \"full\"\nnode_type = \"full\"\n{node}\n"
        );
        vec![toml::from_str(&text).unwrap()]
    }

    #[test]
    fn upstreams_take_the_schemes_their_clients_speak() {
        assert_eq!(
            check(&chain_with_node("rest = \"https://node.example/v1\"")),
            Ok(())
        );
        assert_eq!(
            check(&chain_with_node("jsonrpc = \"https://rpc.example\"")),
            Ok(())
        );
        assert_eq!(
            check(&chain_with_node(
                "transaction_stream = \"https://grpc.example:443\""
            )),
            Ok(())
        );
        let refused = check(&chain_with_node(
            "transaction_stream = \"grpc.example:443\"",
        ))
        .unwrap_err();
        assert!(refused.contains("transaction_stream"), "{refused}");
        assert_eq!(
            check(&chain_with_node(
                "transaction_stream = \"http://127.0.0.1:50052\""
            )),
            Ok(())
        );
        assert_eq!(
            check(&chain_with_node("jsonrpc_ws = \"wss://rpc.example/ws\"")),
            Ok(())
        );
        let refused = check(&chain_with_node("jsonrpc_ws = \"https://rpc.example\"")).unwrap_err();
        assert!(refused.contains("ws:// or wss://"), "{refused}");
    }

    #[test]
    fn websocket_urls_follow_the_scheme() {
        assert_eq!(websocket("https://a.example"), "wss://a.example");
        assert_eq!(websocket("http://127.0.0.1:8080"), "ws://127.0.0.1:8080");
    }
}
