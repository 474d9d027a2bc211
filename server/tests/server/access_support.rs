//! A server with a hand-made keys file, and a plain HTTP/1.1 client for the
//! access-control tests.

use std::path::PathBuf;
use std::time::Duration;

use access::clock::Clock;
use access::keys::KeysFile;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use l1gate::config::ServeArgs;
use l1gate::serve::Running;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::transport::Channel;

use super::harness::real;

/// A running server whose keys file the test controls.
pub struct Gate {
    pub running: Running,
    pub keys_file: PathBuf,
    pub keys: KeysFile,
    /// The access clock the server judges grace periods and quota periods
    /// by.
    pub clock: Clock,
    args: ServeArgs,
    _dir: tempfile::TempDir,
}

/// One HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<String>,
    pub text: String,
}

impl Reply {
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
}

impl Gate {
    /// Starts a server over a small real capture with `keys` and settings
    /// changed by `tune`.
    pub async fn start(keys: KeysFile, tune: impl FnOnce(&mut ServeArgs)) -> Self {
        Self::start_with_clock(keys, Clock::System, tune).await
    }

    /// [`Gate::start`] with `clock` as the access clock.
    pub async fn start_with_clock(
        keys: KeysFile,
        clock: Clock,
        tune: impl FnOnce(&mut ServeArgs),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keys_file = dir.path().join("keys.toml");
        keys.save(&keys_file).unwrap();
        let mut args = ServeArgs {
            data: Some(real("btc-985148182")),
            keys_file: Some(keys_file.clone()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            allow_list_url: Some("https://keys.example/allow-list".into()),
            state_dir: Some(dir.path().join("state")),
            ..ServeArgs::default()
        };
        tune(&mut args);
        let running = serve(&args, &clock).await;
        Self {
            running,
            keys_file,
            keys,
            clock,
            args,
            _dir: dir,
        }
    }

    /// Stops the server and starts a new one with the same settings, keys
    /// file, state directory and clock.
    pub async fn restart(self) -> Self {
        self.restart_with(|| {}).await
    }

    /// [`Gate::restart`], running `between` while no server runs.
    pub async fn restart_with(self, between: impl FnOnce()) -> Self {
        let Self {
            running,
            keys_file,
            keys,
            clock,
            args,
            _dir,
        } = self;
        drop(running);
        between();
        let running = serve(&args, &clock).await;
        Self {
            running,
            keys_file,
            keys,
            clock,
            args,
            _dir,
        }
    }

    /// The server's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.args.state_dir.clone().unwrap()
    }

    /// Edits the keys file in place; the server reloads it within seconds.
    pub fn edit_keys(&mut self, edit: impl FnOnce(&mut KeysFile)) {
        edit(&mut self.keys);
        self.keys.save(&self.keys_file).unwrap();
    }

    /// `GET path`, with `key` in the `X-Api-Key` header when given.
    pub async fn get(&self, path: &str, key: Option<&str>) -> Reply {
        http_get(self.running.http_addr, path, key).await
    }

    /// A raw feed client.
    pub async fn client(&self) -> VenueL1GatewayClient<Channel> {
        let channel = Channel::from_shared(format!("http://{}", self.running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        VenueL1GatewayClient::new(channel)
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let reply = self.get("/metrics", None).await;
        assert_eq!(reply.status, 200);
        reply.text
    }
}

/// Starts a server with `args` and `clock` as its access clock.
async fn serve(args: &ServeArgs, clock: &Clock) -> Running {
    let mut settings = args.clone().resolve().unwrap();
    settings.access.clock = clock.clone();
    l1gate::serve::start(&settings).await.unwrap()
}

/// `GET path` on the HTTP edge at `addr`, with `key` in the `X-Api-Key`
/// header when given.
pub async fn http_get(addr: std::net::SocketAddr, path: &str, key: Option<&str>) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::get(path).header("host", "l1gate.test");
    if let Some(key) = key {
        request = request.header("X-Api-Key", key);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        retry_after,
        text: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Value of a metric sample line `name{labels} value`, 0 when absent.
pub fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |value| value.parse().unwrap())
}

/// Polls `check` until it holds, failing after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
