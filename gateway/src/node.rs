//! The node gateway: l1gate as the access layer in front of chain nodes.
//!
//! # Networks and their hosts
//!
//! Each configured network (`[[chains.networks]]`, see
//! `docs/endpoints.md`) is reached at its own host name: the host of its
//! `base_url`, or of a node's own `public_url` (that node only). A request
//! is routed by its `Host` header (HTTP/2: `:authority`), port ignored; a
//! host no network claims is the exchange's, where l1gate serves its own
//! APIs (market data, Info, candles, the exchange's WebSocket API) and the
//! exchange node's REST API at `node_url`. Every host shares the HTTP
//! address, the keys, the limits and the usage accounting; `/healthz` and
//! `/metrics` answer on every host. Behind a TLS terminator, keep the
//! `Host` header.
//!
//! On a network's host (key as the first path segment or in `X-Api-Key`):
//!
//! | route | upstream |
//! |---|---|
//! | `/{key}/v1/…` | the node's REST API ([`rest`]; l1gate's rules of [`rules`] on Move-family chains) |
//! | `POST /{key}/v1/graphql` | the network's GraphQL indexer |
//! | `POST /{key}` | the node's JSON-RPC over HTTP ([`jsonrpc`]) |
//! | `ws://HOST/{key}` | the node's JSON-RPC over WebSocket |
//!
//! A network's upstreams come from its nodes in configured order: the first
//! node that has the upstream serves it. Only configured upstreams are ever
//! contacted, over plain HTTP (or `ws://`) next to l1gate.
//!
//! The Transaction Stream (gRPC) is served on the gRPC address by
//! [`crate::transaction_stream`].

pub mod jsonrpc;
pub mod ledger;
pub mod rest;
pub mod rules;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::header;
use tower::ServiceExt as _;

use crate::registry::{ChainConfig, Ecosystem};
use access::Access;
use edge::routes::{Routed, Served};
use edge::upstream::{UpstreamSettings, UpstreamUrl};

/// The gateway's networks, each with its routes.
#[derive(Debug, Clone)]
pub struct Networks {
    sites: Arc<Vec<(String, Router)>>,
    /// The routes the sites serve, for the server's list.
    sites_served: Vec<Served>,
    exchange: rest::RestApi,
    /// Every network's REST side, for `/healthz` (one per network: its
    /// base URL's).
    probes: Arc<Vec<rest::RestApi>>,
    /// Each network's upstream sides, for the failures `/healthz` reports.
    upstreams: Arc<Vec<(String, rest::RestApi, jsonrpc::JsonRpc)>>,
    /// The Transaction Stream's connection failures, by network (its relay
    /// is on the gRPC address: it reports here).
    transaction_streams: edge::upstream::FailureBoard,
}

/// Why the node gateway's networks cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworksError {
    /// An upstream address that does not parse.
    #[error(transparent)]
    Url(#[from] edge::upstream::UrlError),
    /// A network claims the host of l1gate's own public address.
    #[error("chains: {network} uses host {}, which is l1gate's own public_http_url", common::quoted(.host))]
    OwnHost {
        /// The network.
        network: String,
        /// Its host.
        host: String,
    },
}

impl Networks {
    /// The networks of `chains`, the exchange host's `node_url`, with the
    /// timing of `upstreams`.
    ///
    /// # Errors
    /// An upstream address that does not parse (the config check refuses
    /// these first), or a network claiming the exchange's own host.
    pub fn new(
        chains: &[ChainConfig],
        upstreams: &UpstreamSettings,
        exchange_host: Option<&str>,
        access: &Access,
    ) -> Result<Self, NetworksError> {
        let exchange = rest::RestApi::new(rest::RestConfig {
            name: "exchange node (node_url)".to_owned(),
            rules: true,
            rest: upstreams
                .node_url
                .as_ref()
                .map(|url| {
                    UpstreamUrl::parse(&format!("{}/v1", url.to_string().trim_end_matches('/')))
                })
                .transpose()?,
            graphql: upstreams
                .node_url
                .as_ref()
                .map(|url| {
                    UpstreamUrl::parse(&format!(
                        "{}/v1/graphql",
                        url.to_string().trim_end_matches('/')
                    ))
                })
                .transpose()?,
            timeout: upstreams.timeout,
            wait_timeout: upstreams.node_wait_timeout,
            ledger_window: upstreams.ledger_cache,
            tls: upstreams.tls.clone(),
        });
        let mut sites = Vec::new();
        let mut sites_served = Vec::new();
        let mut probes = Vec::new();
        let mut sides = Vec::new();
        let mut sided = std::collections::BTreeSet::new();
        let mut named = std::collections::BTreeSet::new();
        for site in crate::registry::sites(chains) {
            if exchange_host.is_some_and(|host| host == site.host) {
                return Err(NetworksError::OwnHost {
                    network: site.name(),
                    host: site.host.clone(),
                });
            }
            let url = |pick: fn(&crate::registry::NodeConfig) -> Option<&String>| {
                site.upstream(pick)
                    .map(|(_, url)| UpstreamUrl::parse(url))
                    .transpose()
            };
            let api = rest::RestApi::new(rest::RestConfig {
                name: site.name(),
                rules: site.ecosystem == Ecosystem::Move,
                rest: url(|n| n.rest.as_ref())?,
                graphql: url(|n| n.graphql.as_ref())?,
                timeout: upstreams.timeout,
                wait_timeout: upstreams.node_wait_timeout,
                ledger_window: upstreams.ledger_cache,
                tls: upstreams.tls.clone(),
            });
            let rpc = jsonrpc::JsonRpc::new(
                site.name(),
                url(|n| n.jsonrpc.as_ref())?,
                site.upstream(|n| n.jsonrpc_ws.as_ref())
                    .map(|(_, u)| u.clone()),
                upstreams.timeout,
                &upstreams.tls,
                access.clone(),
            );
            if api.has_node() && named.insert(site.name()) {
                probes.push(api.clone());
            }
            if sided.insert(site.name()) {
                sides.push((site.name(), api.clone(), rpc.clone()));
            }
            let name = site.name();
            let routed =
                edge::http::authenticated(api.routes().merge(rpc.routes()), access.clone())
                    .on_host(&site.host);
            let (routes, served) = routed.into_parts();
            sites_served.extend(served);
            let routes = routes
                .fallback(move |request: Request| {
                    let name = name.clone();
                    async move {
                        rest::node_error(
                            axum::http::StatusCode::NOT_FOUND,
                            "not_found",
                            format!(
                                "{name}: {} is not a route of this network (REST under /{{key}}/v1, JSON-RPC at /{{key}})",
                                common::quoted(request.uri().path())
                            ),
                        )
                    }
                })
                .layer(axum::middleware::from_fn_with_state(
                    access.metrics().clone(),
                    edge::http::count_responses,
                ));
            sites.push((site.host.clone(), routes));
        }
        if exchange.has_node() {
            probes.insert(0, exchange.clone());
        }
        Ok(Self {
            sites: Arc::new(sites),
            sites_served,
            exchange,
            probes: Arc::new(probes),
            upstreams: Arc::new(sides),
            transaction_streams: edge::upstream::FailureBoard::default(),
        })
    }

    /// The exchange host's node routes (`/v1/…` to `node_url`), merged into
    /// l1gate's own API.
    pub fn exchange_routes(&self) -> Routed {
        self.exchange.clone().routes()
    }

    /// Where the Transaction Stream relay reports its networks' connection
    /// failures.
    pub fn transaction_stream_failures(&self) -> &edge::upstream::FailureBoard {
        &self.transaction_streams
    }

    /// How many ledger info requests the exchange host's node received.
    pub fn exchange_ledger_requests(&self) -> u64 {
        self.exchange.ledger_requests()
    }

    /// `main` (the exchange host's routes) with the networks' hosts routed
    /// to their own routes first, and every route the result serves.
    pub fn serve(self, main: Routed) -> (Router, Vec<Served>) {
        let (main, mut served) = main.into_parts();
        served.extend(self.sites_served);
        if self.sites.is_empty() {
            return (main, served);
        }
        let sites = self.sites;
        let router = Router::new().fallback_service(tower::service_fn(move |request: Request| {
            let router = site_for(&sites, &request).unwrap_or_else(|| main.clone());
            router.oneshot(request)
        }));
        (router, served)
    }

    /// `{"chain/network": verdict}` for `/healthz` (each network's ledger
    /// info through its cache, so at most one node request per window),
    /// with `upstream_errors`: each upstream's last failure (`null` when
    /// its last exchange succeeded, or none was made), by kind — `rest`
    /// (REST and GraphQL), `jsonrpc`, `jsonrpc_ws`, `transaction_stream`. A
    /// certificate that does
    /// not verify shows there.
    pub fn health(&self) -> edge::http::NetworkProbe {
        let probes = self.probes.clone();
        let upstreams = self.upstreams.clone();
        let streams = self.transaction_streams.clone();
        edge::http::NetworkProbe(Arc::new(move || {
            let probes = probes.clone();
            let upstreams = upstreams.clone();
            let streams = streams.clone();
            Box::pin(async move {
                let now = common::unix_now_ms();
                let mut out = serde_json::Map::new();
                for probe in probes.iter() {
                    let verdict = match tokio::time::timeout(PROBE_TIMEOUT, probe.ledger()).await {
                        Ok(Some(answer)) => ledger::verdict(&answer, now),
                        Ok(None) => continue,
                        Err(_) => ledger::verdict(
                            &Err(edge::upstream::UpstreamError::Timeout(
                                PROBE_TIMEOUT.as_millis(),
                            )),
                            now,
                        ),
                    };
                    out.insert(
                        probe.name().to_owned(),
                        serde_json::to_value(verdict).unwrap_or_default(),
                    );
                }
                for (name, rest, rpc) in upstreams.iter() {
                    let mut errors = serde_json::Map::new();
                    if let Some(failure) = rest.last_failure() {
                        errors.insert("rest".into(), failure.into());
                    }
                    for (kind, failure) in rpc.last_failures() {
                        errors.insert(kind.into(), failure.into());
                    }
                    if let Some(failure) = streams.get(name) {
                        errors.insert("transaction_stream".into(), failure.into());
                    }
                    if errors.is_empty() {
                        continue;
                    }
                    let entry = out
                        .entry(name.clone())
                        .or_insert_with(|| serde_json::json!({}));
                    if let Some(entry) = entry.as_object_mut() {
                        entry.insert("upstream_errors".into(), errors.into());
                    }
                }
                serde_json::Value::Object(out)
            })
        }))
    }
}

/// Longest a `/healthz` waits for one network's ledger info.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The router of the network whose host `request` names, unless it asks
/// for `/healthz` or `/metrics`.
fn site_for(sites: &[(String, Router)], request: &Request) -> Option<Router> {
    let path = request.uri().path();
    if path == "/healthz" || path == "/metrics" {
        return None;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::registry::request_host)
        .or_else(|| request.uri().host().map(str::to_ascii_lowercase))?;
    sites
        .iter()
        .find(|(site, _)| *site == host)
        .map(|(_, router)| router.clone())
}
