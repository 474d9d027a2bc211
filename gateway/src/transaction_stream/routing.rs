//! Which network's upstream a call goes to: the authority it was sent to
//! ([`WithAuthority`]) against the configured networks' hosts (`Routes`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;

use crate::registry::ChainConfig;

use super::upstream::Upstream;

/// The authority a call was sent to (`:authority`, or `Host`), as
/// [`WithAuthority`] records it in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAuthority(pub Option<String>);

/// Wraps a gRPC service so its handlers can see the authority their call
/// was sent to: tonic hands a handler the metadata and extensions of a call
/// but not its URI, so this records it in the extensions first.
#[derive(Debug, Clone)]
pub struct WithAuthority<S>(pub(super) S);

impl<S, B> Service<http::Request<B>> for WithAuthority<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let authority = request
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                request
                    .headers()
                    .get(http::header::HOST)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        request.extensions_mut().insert(RequestAuthority(authority));
        self.0.call(request)
    }
}

impl<S: NamedService> NamedService for WithAuthority<S> {
    const NAME: &'static str = S::NAME;
}

/// Where calls go: every configured host, and the fallback.
#[derive(Debug)]
pub(super) struct Routes {
    /// Each configured host with its network's upstream (`None`: that
    /// network has no Transaction Stream), in configured order.
    hosts: Vec<(String, String, Option<Arc<Upstream>>)>,
    /// The upstream of a host no network claims: the only network with a
    /// Transaction Stream, if exactly one has.
    only: Option<Arc<Upstream>>,
    /// The networks that have one (`chain/network`) and their first host.
    offered: BTreeMap<String, String>,
}

impl Routes {
    pub(super) fn new(
        chains: &[ChainConfig],
        tls: &edge::upstream::UpstreamTls,
        failures: &edge::upstream::FailureBoard,
    ) -> Self {
        let mut channels = HashMap::new();
        let mut hosts = Vec::new();
        let mut first: BTreeMap<String, (String, Arc<Upstream>)> = BTreeMap::new();
        for site in crate::registry::sites(chains) {
            let name = site.name();
            let upstream = site
                .upstream(|node| node.transaction_stream.as_deref())
                .map(|(node, url)| {
                    Arc::new(Upstream::new(
                        &name,
                        node,
                        url,
                        tls,
                        failures,
                        &mut channels,
                    ))
                });
            if let Some(upstream) = &upstream {
                first
                    .entry(name.clone())
                    .or_insert_with(|| (site.host.clone(), Arc::clone(upstream)));
            }
            hosts.push((site.host, name, upstream));
        }
        let only = match first.values().collect::<Vec<_>>().as_slice() {
            [(_, upstream)] => Some(Arc::clone(upstream)),
            _ => None,
        };
        Self {
            hosts,
            only,
            offered: first
                .into_iter()
                .map(|(name, (host, _))| (name, host))
                .collect(),
        }
    }

    /// The upstream for a call sent to `authority`.
    pub(super) fn route(&self, authority: Option<&str>) -> Result<Arc<Upstream>, Status> {
        let host = authority.and_then(crate::registry::request_host);
        let shown = authority.map_or_else(|| "(no authority)".to_owned(), common::quoted);
        let mut claimed_by = None;
        for (site_host, name, upstream) in &self.hosts {
            if host.as_deref() != Some(site_host.as_str()) {
                continue;
            }
            if let Some(upstream) = upstream {
                return Ok(Arc::clone(upstream));
            }
            claimed_by.get_or_insert(name);
        }
        if let Some(name) = claimed_by {
            return Err(Status::failed_precondition(format!(
                "no Transaction Stream is configured for {shown}: it is the host of {name}, \
                 which has none"
            )));
        }
        if let Some(upstream) = &self.only {
            return Ok(Arc::clone(upstream));
        }
        Err(Status::failed_precondition(if self.offered.is_empty() {
            format!(
                "no Transaction Stream is configured for {shown}: this deployment has no \
                 Transaction Stream upstream"
            )
        } else {
            format!(
                "no Transaction Stream is configured for {shown}: call it at the host of the \
                 network wanted ({})",
                self.offered
                    .iter()
                    .map(|(name, host)| format!("{host} for {name}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }))
    }
}
