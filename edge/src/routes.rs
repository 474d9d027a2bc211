//! Every HTTP route l1gate serves, registered and listed from one place.
//!
//! A module that serves HTTP declares each route as a [`Route`] constant
//! (method, path, whether it takes the API key, what it serves) and
//! registers it with [`Routed::route`], which records it beside the axum
//! route; a direct `axum::Router::route` is refused by clippy
//! (`clippy.toml`). The server keeps what it registered
//! (`Running::http_routes`), and `l1gate routes` lists
//! the server's `endpoints::planned` for the same settings; a test compares the
//! two on a running server, and requests every listed route.
//!
//! Adding a route: its constant beside its handler, `Routed::route` where
//! the module builds its router, and its line in the server's `endpoints::planned`.

use axum::Router;
use axum::routing::MethodRouter;

/// One route: what a request must match and what it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    /// `GET`, `POST`, `GET, POST` or `ANY`.
    pub method: &'static str,
    /// The path as axum matches it (`/v1/{*rest}`), below the API key's
    /// segment for keyed routes.
    pub path: &'static str,
    /// Whether it takes the API key (as the first path segment or in
    /// `X-Api-Key`).
    pub keyed: bool,
    /// What it serves, one line.
    pub what: &'static str,
}

/// A route as served: on l1gate's own host (`None`) or on a network's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Served {
    /// The `Host` it is served on, when it is a network's.
    pub host: Option<String>,
    /// The route.
    pub route: Route,
}

/// A router with the list of the routes registered on it.
#[must_use]
pub struct Routed<S = ()> {
    router: Router<S>,
    served: Vec<Served>,
}

impl<S: Clone + Send + Sync + 'static> Default for Routed<S> {
    fn default() -> Self {
        Self {
            router: Router::new(),
            served: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Routed<S> {
    /// No route yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `route` with `handler`, and records it.
    #[allow(clippy::disallowed_methods)]
    pub fn route(mut self, route: Route, handler: MethodRouter<S>) -> Self {
        self.router = self.router.route(route.path, handler);
        self.served.push(Served { host: None, route });
        self
    }

    /// Both routers' routes.
    pub fn merge(mut self, other: Self) -> Self {
        self.router = self.router.merge(other.router);
        self.served.extend(other.served);
        self
    }

    /// The same routes, the router changed by `f` (a layer, its state, the
    /// key's nesting): what `f` adds must not be a route.
    pub fn map<T>(self, f: impl FnOnce(Router<S>) -> Router<T>) -> Routed<T> {
        Routed {
            router: f(self.router),
            served: self.served,
        }
    }

    /// The same routes, served on the network host `host`.
    pub fn on_host(mut self, host: &str) -> Self {
        for served in &mut self.served {
            served.host = Some(host.to_owned());
        }
        self
    }

    /// The router and the routes registered on it.
    pub fn into_parts(self) -> (Router<S>, Vec<Served>) {
        (self.router, self.served)
    }
}
