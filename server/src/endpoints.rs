//! `l1gate routes`: what a server started with the same settings serves
//! and where — every gRPC method (read from the compiled protocol
//! descriptors, so the list cannot drift from the services) and every HTTP
//! route, with how each one takes the API key and which upstream it relies
//! on. Printed as text for people or JSON for tools.

use std::fmt::Write as _;

use prost::Message as _;
use prost_types::FileDescriptorSet;
use serde::Serialize;

use crate::config::Settings;
use edge::routes::{Route, Served};

/// How a route takes the API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyForm {
    /// No key.
    None,
    /// gRPC metadata `x-api-key`.
    GrpcMetadata,
    /// HTTP path segment `/<API_KEY>/…` or header `X-Api-Key`.
    PathOrHeader,
}

/// One gRPC method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrpcMethod {
    /// `package.Service/Method`.
    pub path: String,
    /// `unary`, `server_streaming`, `client_streaming` or `bidi_streaming`.
    pub kind: &'static str,
    /// Request message (full name).
    pub request: String,
    /// Response message (full name).
    pub response: String,
    /// How the key is passed.
    pub key: KeyForm,
}

/// One HTTP route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpRoute {
    /// Method (`ANY` for the gateway).
    pub method: &'static str,
    /// Path with the key form written out (`/<API_KEY>/…`).
    pub path: String,
    /// How the key is passed.
    pub key: KeyForm,
    /// What it serves.
    pub description: String,
}

/// Everything a server with these settings exposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoints {
    /// `http://HOST:PORT` of the gRPC listener.
    pub grpc_url: String,
    /// `http://HOST:PORT` of the HTTP listener.
    pub http_url: String,
    /// gRPC methods, service by service.
    pub grpc: Vec<GrpcMethod>,
    /// HTTP routes.
    pub http: Vec<HttpRoute>,
}

/// Services registered beside l1gate's own (no descriptor in its set).
const STANDARD_SERVICES: [(&str, &str, &str, &str, KeyForm); 4] = [
    (
        "grpc.health.v1.Health/Check",
        "unary",
        "grpc.health.v1.HealthCheckRequest",
        "grpc.health.v1.HealthCheckResponse",
        KeyForm::None,
    ),
    (
        "grpc.health.v1.Health/Watch",
        "server_streaming",
        "grpc.health.v1.HealthCheckRequest",
        "grpc.health.v1.HealthCheckResponse",
        KeyForm::None,
    ),
    (
        "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "bidi_streaming",
        "grpc.reflection.v1.ServerReflectionRequest",
        "grpc.reflection.v1.ServerReflectionResponse",
        KeyForm::GrpcMetadata,
    ),
    (
        "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "bidi_streaming",
        "grpc.reflection.v1alpha.ServerReflectionRequest",
        "grpc.reflection.v1alpha.ServerReflectionResponse",
        KeyForm::GrpcMetadata,
    ),
];

impl Endpoints {
    /// The endpoints of a server started with `settings`.
    ///
    /// # Errors
    /// When the compiled descriptor set does not decode (a build defect).
    pub fn of(settings: &Settings) -> Result<Self, prost::DecodeError> {
        let set = FileDescriptorSet::decode(proto::FILE_DESCRIPTOR_SET)?;
        let mut grpc = Vec::new();
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let kind = match (method.client_streaming(), method.server_streaming()) {
                        (false, false) => "unary",
                        (false, true) => "server_streaming",
                        (true, false) => "client_streaming",
                        (true, true) => "bidi_streaming",
                    };
                    grpc.push(GrpcMethod {
                        path: format!("{}.{}/{}", file.package(), service.name(), method.name()),
                        kind,
                        request: method.input_type().trim_start_matches('.').to_owned(),
                        response: method.output_type().trim_start_matches('.').to_owned(),
                        key: KeyForm::GrpcMetadata,
                    });
                }
            }
        }
        grpc.extend(
            STANDARD_SERVICES
                .iter()
                .map(|&(path, kind, request, response, key)| GrpcMethod {
                    path: path.to_owned(),
                    kind,
                    request: request.to_owned(),
                    response: response.to_owned(),
                    key,
                }),
        );
        let scheme = if settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let upstreams = &settings.upstreams;
        let info = upstreams.info_url.as_ref().map_or_else(
            || {
                "the exchange's Info lookup, body {\"type\": …}: no Info upstream configured \
                 (info_url): l2Book/allMids/openOrders/frontendOpenOrders/candleSnapshot answered \
                 locally, meta/spotMeta derived from the data, other types 503"
                    .to_owned()
            },
            |url| format!("the exchange's Info lookup, body {{\"type\": …}}: upstream {url}"),
        );
        let node = upstreams.node_url.as_ref().map_or_else(
            || {
                "the node's REST/GraphQL API: no node upstream configured (node_url): 503"
                    .to_owned()
            },
            |url| format!("the node's REST/GraphQL API, relayed to {url}"),
        );
        let names: std::collections::BTreeMap<String, String> =
            gateway::registry::sites(&settings.chains)
                .into_iter()
                .map(|site| (site.host.clone(), site.name()))
                .collect();
        let http = planned(settings)
            .into_iter()
            .map(|served| {
                let route = served.route;
                let description = match &served.host {
                    Some(host) => format!(
                        "{}: {}",
                        names.get(host).map_or(host.as_str(), String::as_str),
                        route.what
                    ),
                    None if route == market::info::lookup::INFO => info.clone(),
                    None if gateway::node::rest::ROUTES.contains(&route) => node.clone(),
                    None => route.what.to_owned(),
                };
                HttpRoute {
                    method: route.method,
                    path: listed_path(served.host.as_deref(), &route),
                    key: if route.keyed {
                        KeyForm::PathOrHeader
                    } else {
                        KeyForm::None
                    },
                    description,
                }
            })
            .collect();
        Ok(Self {
            grpc_url: format!("{scheme}://{}", settings.grpc_addr),
            http_url: format!("{scheme}://{}", settings.http_addr),
            grpc,
            http,
        })
    }

    /// Human-readable listing.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "gRPC {}  (API key in metadata: x-api-key: <API_KEY>)",
            self.grpc_url
        );
        let width = self.grpc.iter().map(|m| m.path.len()).max().unwrap_or(0);
        for method in &self.grpc {
            let key = if method.key == KeyForm::None {
                "  (no key)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:width$}  {:16}  {} -> {}{key}",
                method.path, method.kind, method.request, method.response
            );
        }
        let _ = writeln!(
            out,
            "\nHTTP {}  (API key as the first path segment, or header X-Api-Key: <API_KEY> without it)",
            self.http_url
        );
        let width = self.http.iter().map(|r| r.path.len()).max().unwrap_or(0);
        for route in &self.http {
            let key = if route.key == KeyForm::None {
                "(no key) "
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:4} {:width$}  {key}{}",
                route.method, route.path, route.description
            );
        }
        out
    }
}

/// The HTTP routes a server started with `settings` serves, in listing
/// order (see [`edge::routes`]).
pub fn planned(settings: &Settings) -> Vec<Served> {
    use crate::status;
    use gateway::node;
    use market::{http, info, ws};
    let own = |route: Route| Served { host: None, route };
    let mut out: Vec<Served> = [
        http::HEALTHZ,
        http::METRICS,
        http::FEEDS,
        http::candles::CANDLES,
        info::lookup::INFO,
        ws::WS,
        ws::WS_ROOT,
        status::PAGE_ROUTE,
        status::PAGE_SLASH_ROUTE,
        status::EVENTS_ROUTE,
        status::JSON_ROUTE,
    ]
    .into_iter()
    .chain(node::rest::ROUTES)
    .map(own)
    .collect();
    for site in gateway::registry::sites(&settings.chains) {
        for route in node::rest::ROUTES.into_iter().chain([node::jsonrpc::RPC]) {
            out.push(Served {
                host: Some(site.host.clone()),
                route,
            });
        }
    }
    out
}

/// How a route is written in the listing: `//host` for a network's,
/// `/<API_KEY>` before a keyed route's path.
fn listed_path(host: Option<&str>, route: &Route) -> String {
    let mut out = host.map(|host| format!("//{host}")).unwrap_or_default();
    if route.keyed {
        out.push_str("/<API_KEY>");
        if route.path != "/" {
            out.push_str(route.path);
        }
    } else {
        out.push_str(route.path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServeArgs;

    fn settings() -> Settings {
        ServeArgs {
            grpc_addr: Some("127.0.0.1:7001".parse().unwrap()),
            http_addr: Some("127.0.0.1:7002".parse().unwrap()),
            ..ServeArgs::default()
        }
        .resolve()
        .unwrap()
    }

    #[test]
    fn every_rpc_of_both_services_is_listed_from_the_descriptors() {
        let endpoints = Endpoints::of(&settings()).unwrap();
        assert_eq!(endpoints.grpc_url, "http://127.0.0.1:7001");
        let market: Vec<&GrpcMethod> = endpoints
            .grpc
            .iter()
            .filter(|m| m.path.starts_with("venue_l1_gateway.v3.MarketStreaming/"))
            .collect();
        assert_eq!(market.len(), 16);
        assert!(market.iter().all(|m| m.kind == "server_streaming"));
        assert!(
            endpoints
                .grpc
                .iter()
                .any(|m| m.path == "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        );
        assert!(endpoints.http.iter().any(|r| r.path == "/<API_KEY>/ws"));
        assert!(endpoints.grpc.iter().any(|m| {
            m.path == "venue_l1_gateway.v3.VenueL1Gateway/ListFeeds" && m.kind == "unary"
        }));
        let text = endpoints.to_text();
        assert!(text.contains("venue_l1_gateway.v3.MarketStreaming/StreamCandle"));
        assert!(text.contains("http://127.0.0.1:7002"));
    }

    #[test]
    fn upstreams_shape_what_the_http_routes_say() {
        let endpoints = Endpoints::of(&settings()).unwrap();
        let info = endpoints
            .http
            .iter()
            .find(|r| r.path == "/<API_KEY>/info")
            .unwrap();
        assert!(info.description.contains("no Info upstream"), "{info:?}");
        let json = serde_json::to_value(&endpoints).unwrap();
        assert_eq!(json["http"][0]["key"], "none");
        assert_eq!(json["grpc"][0]["key"], "grpc_metadata");
    }
}
