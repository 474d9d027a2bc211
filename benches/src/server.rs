//! The `l1gate` server as every harness starts it: the real binary, in a process of its own.
//!
//! [`ServerProcess::start`] writes the settings a harness chose into a config file and runs
//! `l1gate serve --config FILE` (or `l1gate edge --nats URL --config FILE` for an edge of a
//! bus), so that what is measured is what an operator runs, and the server's CPU, RSS and
//! runtime are its own. It reads the addresses the binary prints on its first line, then waits
//! on `/status.json` (the harness's key is an admin key) until the market engine has caught up.
//! The child is asked to stop with SIGTERM when the [`ServerProcess`] is dropped, and gets
//! SIGTERM from the kernel if the harness dies first (`PR_SET_PDEATHSIG`), so it never
//! outlives the harness.
//!
//! The binary is the one `--l1gate PATH` names, else the one `cargo build -p server --bin
//! l1gate` makes with the cargo and profile of the running harness ([`Binary`]).

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use l1gate::config::ServeArgs;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// How long a server may take to print its addresses, and then to catch up with its files.
const START_WAIT: Duration = Duration::from_secs(300);

/// The `--l1gate` option of every harness that starts a server.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Binary {
    /// The `l1gate` binary to run (default: build it with this harness's cargo and profile).
    #[arg(long = "l1gate", value_name = "PATH")]
    pub path: Option<PathBuf>,
}

impl Binary {
    /// The binary: the one given, else built once per process with the harness's cargo
    /// (`cargo build [--release] -p server --bin l1gate`; a no-op when it is up to date).
    ///
    /// # Errors
    /// When the build fails or the given path is not a file.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        static BUILT: OnceLock<PathBuf> = OnceLock::new();
        if let Some(path) = &self.path {
            if !path.is_file() {
                bail!("--l1gate {}: no such file", path.display());
            }
            return Ok(path.clone());
        }
        if let Some(path) = BUILT.get() {
            return Ok(path.clone());
        }
        eprintln!("building the l1gate binary");
        let built = crate::cargo::build(&["-p", "server", "--bin", "l1gate"])?;
        let path = built
            .executables
            .get("l1gate")
            .cloned()
            .context("cargo built no l1gate executable")?;
        Ok(BUILT.get_or_init(|| path).clone())
    }
}

/// Server settings a harness varies.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// `poll_interval_ms` (the backup poll of the file watcher); `None` = the server's
    /// default.
    pub poll_ms: Option<u64>,
    /// `market_ring_capacity`; `None` = the server's default.
    pub ring: Option<usize>,
    /// TLS on both addresses, with a certificate of the harness's own authority (the
    /// channels of [`ServerProcess::channel`] trust it).
    pub tls: bool,
    /// `market_compression`: market frames sent compressed to clients that accept it.
    pub market_compression: bool,
}

/// A keys file holding one admin key for the harness and keys of load accounts, in a
/// temporary directory of its own (removed when the last clone is dropped).
#[derive(Debug, Clone)]
pub struct HarnessKey {
    dir: Arc<tempfile::TempDir>,
    /// The keys file.
    pub file: PathBuf,
    /// The harness's key (`l1g_…`), of an admin account (it reads `/status.json`).
    pub key: String,
    /// One key each of [`LOAD_ACCOUNTS`] further accounts, for load beside the harness's own
    /// streams (an account's limits are its own).
    pub load_keys: Vec<String>,
}

/// Accounts a [`HarnessKey`] file holds besides the harness's own, with the server's default
/// limits.
pub const LOAD_ACCOUNTS: usize = 4;

impl HarnessKey {
    /// Writes a keys file with one fresh admin key for the harness and one key for each of
    /// [`LOAD_ACCOUNTS`] load accounts, all with the server's default limits.
    ///
    /// # Errors
    /// When the directory or the file cannot be written.
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("keys.toml");
        let mut keys = access::keys::KeysFile::default();
        let (key, _) = keys.add_key("bench", 0)?;
        keys.set_role("bench", access::keys::Role::Admin)?;
        let load_keys = (1..=LOAD_ACCOUNTS)
            .map(|n| Ok(keys.add_key(&format!("load{n}"), 0)?.0))
            .collect::<anyhow::Result<Vec<String>>>()?;
        keys.save(&file)?;
        Ok(Self {
            dir: Arc::new(dir),
            file,
            key,
            load_keys,
        })
    }

    /// The directory the keys file is in (the server's config and state go beside it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The settings every harness's server shares: loopback on free ports, no staleness check, a
/// long idle timeout, and limits wide enough for one key to open every stream of the harness
/// (connections: the server's default, what its open-files limit allows).
/// The keys file and the state directory are filled in by [`ServerProcess::start`].
pub fn harness_settings() -> ServeArgs {
    ServeArgs {
        grpc_addr: "127.0.0.1:0".parse().ok(),
        http_addr: "127.0.0.1:0".parse().ok(),
        idle_timeout_ms: Some(600_000),
        // Simulated block times lie in the past: no staleness check.
        market_stale_after_ms: Some(0),
        // One key opens every stream of the harness, over as many connections as it likes.
        max_streams: Some(1_000_000),
        max_connections_per_ip: Some(1_000_000),
        requests_per_second: Some(1_000_000),
        request_burst: Some(1_000_000),
        ..ServeArgs::default()
    }
}

/// Which of the binary's servers to run.
#[derive(Debug, Clone, Copy)]
pub enum Role<'a> {
    /// `l1gate serve`: over node files (the settings' `data`).
    Serve,
    /// `l1gate edge --nats URL`: over a message bus.
    Edge {
        /// The bus.
        nats: &'a str,
    },
}

/// An `l1gate` server in a process of its own (see the module docs).
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// Bound gRPC address.
    pub addr: SocketAddr,
    /// Bound HTTP address (`/metrics`, `/healthz`, Info, candles).
    pub http_addr: SocketAddr,
    /// Its keys file (kept as long as the server runs): the harness's admin key
    /// ([`HarnessKey::key`]) and those of the load accounts.
    pub keys: HarnessKey,
    /// The authority the server's certificate is of, when it serves TLS.
    ca: Option<String>,
    /// The config file and the default state directory.
    _dir: tempfile::TempDir,
}

impl ServerProcess {
    /// `l1gate serve` over `data` with the harness settings and `options`; returns once its
    /// market engine has caught up.
    ///
    /// # Errors
    /// When it cannot be started, exits, or does not catch up within 300 s.
    pub fn spawn(binary: &Path, data: &Path, options: &ServerOptions) -> anyhow::Result<Self> {
        let keys = HarnessKey::new()?;
        let tls = if options.tls {
            Some(crate::tls::test_certificate(keys.dir())?)
        } else {
            None
        };
        let settings = ServeArgs {
            data: Some(data.to_owned()),
            poll_interval_ms: options.poll_ms,
            market_ring_capacity: options.ring,
            tls_cert_file: tls.as_ref().map(|(files, _)| files.cert.clone()),
            tls_key_file: tls.as_ref().map(|(files, _)| files.key.clone()),
            market_compression: Some(options.market_compression),
            ..harness_settings()
        };
        Self::start(binary, Role::Serve, settings, keys, tls.map(|(_, ca)| ca))
    }

    /// Runs `binary` as `role` with `settings` ([`ServerProcess::launch`]); returns once its
    /// market engine has caught up.
    ///
    /// # Errors
    /// When it cannot be started, exits, or does not catch up within 300 s.
    pub fn start(
        binary: &Path,
        role: Role<'_>,
        settings: ServeArgs,
        keys: HarnessKey,
        ca: Option<String>,
    ) -> anyhow::Result<Self> {
        let mut process = Self::launch(binary, role, settings, keys, ca)?;
        process.wait_caught_up()?;
        Ok(process)
    }

    /// Runs `binary` as `role` with `settings` (`keys`' file and a fresh state directory
    /// filled in when unset); returns once it listens, having read its addresses from its first
    /// line of output. `ca` is the authority of the certificate it serves, when `settings` turn
    /// TLS on.
    ///
    /// # Errors
    /// When it cannot be started or prints no address within 300 s.
    pub fn launch(
        binary: &Path,
        role: Role<'_>,
        settings: ServeArgs,
        keys: HarnessKey,
        ca: Option<String>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let settings = ServeArgs {
            keys_file: settings.keys_file.or_else(|| Some(keys.file.clone())),
            state_dir: settings
                .state_dir
                .or_else(|| Some(dir.path().join("state"))),
            ..settings
        };
        let config = dir.path().join("l1gate.toml");
        std::fs::write(&config, toml::to_string(&settings)?)
            .with_context(|| format!("write {}", config.display()))?;
        let mut command = Command::new(binary);
        match role {
            Role::Serve => command.arg("serve"),
            Role::Edge { nats } => command.args(["edge", "--nats", nats]),
        };
        command.arg("--config").arg(&config).current_dir(dir.path());
        // Quiet unless the harness was asked for logs.
        if std::env::var_os("L1GATE_LOG").is_none() && std::env::var_os("RUST_LOG").is_none() {
            command.env("L1GATE_LOG", "warn");
        }
        // The death signal follows the thread that forks: harnesses start servers from their
        // main thread, which lives as long as they do.
        // SAFETY: the closure runs in the forked child before exec and makes one system call,
        // which allocates nothing and takes no lock.
        #[allow(unsafe_code)]
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so that a later line can never block the server.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let mut process = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            keys,
            ca,
            _dir: dir,
        };
        let line = rx.recv_timeout(START_WAIT).map_err(|_| {
            anyhow::anyhow!(
                "{} printed no address within {} s",
                binary.display(),
                START_WAIT.as_secs()
            )
        })?;
        (process.addr, process.http_addr) = addresses(&line)
            .with_context(|| format!("{} did not start: {line:?}", binary.display()))?;
        Ok(process)
    }

    /// The authority of the certificate the server serves, when it serves TLS (PEM).
    pub fn ca(&self) -> Option<&str> {
        self.ca.as_deref()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the market engine has caught up with its files once (`/status.json`).
    ///
    /// # Errors
    /// When the server exits first or the engine has not caught up within 300 s.
    pub fn wait_caught_up(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the server exited ({status}) before its engine caught up");
            }
            if let Ok(status) = self.status()
                && status["engine"]["ready"].as_bool() == Some(true)
            {
                return Ok(());
            }
            if started.elapsed() > START_WAIT {
                bail!(
                    "the market engine did not catch up within {} s",
                    START_WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the server's candle store has caught up with the node files to
    /// `last_block` (its `/healthz`).
    ///
    /// # Errors
    /// When the store reports an error or has not caught up within 300 s.
    pub fn wait_for_candles(&self, last_block: u64) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let health = self.health()?;
            let candles = &health["candles"];
            if let Some(error) = candles["error"].as_str() {
                bail!("candle store: {error}");
            }
            if candles["caught_up"].as_bool() == Some(true)
                && candles["block_number"].as_u64() >= Some(last_block)
            {
                return Ok(());
            }
            if started.elapsed() > START_WAIT {
                bail!("the candle store is stuck at {candles}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's `/healthz` answer, whatever its status (a 503 while simulated data looks
    /// stale is still an answer).
    ///
    /// # Errors
    /// When it cannot be reached or does not answer JSON.
    pub fn health(&self) -> anyhow::Result<serde_json::Value> {
        let (_, body) = http_answer(self.http_addr, "/healthz", &[], self.ca.as_deref())?;
        Ok(serde_json::from_str(&body)?)
    }

    /// The server's `/status.json` snapshot.
    ///
    /// # Errors
    /// When it cannot be reached or does not answer 200 with JSON.
    pub fn status(&self) -> anyhow::Result<serde_json::Value> {
        let body = http_get(
            self.http_addr,
            "/status.json",
            &[("x-api-key", &self.keys.key)],
            self.ca.as_deref(),
        )?;
        Ok(serde_json::from_str(&body)?)
    }

    /// The last block the server's market engine folded.
    ///
    /// # Errors
    /// When the status cannot be read or names no block yet.
    pub fn engine_height(&mut self) -> anyhow::Result<u64> {
        self.status()?["engine"]["block_number"]
            .as_u64()
            .context("the server's status names no folded block")
    }

    /// The server's `/metrics` text (OpenMetrics exposition).
    ///
    /// # Errors
    /// When it cannot be reached or does not answer 200.
    pub fn metrics(&self) -> anyhow::Result<String> {
        http_get(self.http_addr, "/metrics", &[], self.ca.as_deref())
    }

    /// The server's resident set size (`VmRSS`), in KiB.
    ///
    /// # Errors
    /// When the process is gone.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        crate::sys::status_field_kib(&status, "VmRSS")
            .context("no VmRSS in the server's /proc status")
    }

    /// A client channel with an HTTP/2 stream window of `stream_window` bytes and a large
    /// connection window (so one stream's unread data cannot stall the connection's others).
    /// Over TLS when the server serves it.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub async fn channel(&self, stream_window: u32) -> anyhow::Result<Channel> {
        let endpoint = match &self.ca {
            Some(ca) => Endpoint::from_shared(format!("https://localhost:{}", self.addr.port()))?
                .tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                    .domain_name("localhost"),
            )?,
            None => Endpoint::from_shared(format!("http://{}", self.addr))?,
        };
        Ok(endpoint
            .initial_stream_window_size(stream_window)
            .initial_connection_window_size(256 << 20)
            .connect()
            .await?)
    }

    /// `message` with this server's key.
    ///
    /// # Errors
    /// Never for a key the server issued.
    pub fn request<T>(&self, message: T) -> anyhow::Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            "x-api-key",
            MetadataValue::try_from(self.keys.key.as_str())?,
        );
        Ok(request)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A graceful stop, as an operator's: the server waits up to 5 s for its clients to go,
        // then takes its last checkpoint and commit (a restart measured next starts from
        // them); killed if it has not ended within 15 s.
        if let Some(pid) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        for _ in 0..150 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gRPC and HTTP addresses of the line `l1gate serve` (or `edge`) prints once it listens:
/// `… gRPC on ADDR and HTTP on ADDR[ (TLS)]`.
fn addresses(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let after = |word: &str| {
        let (_, rest) = line.split_once(word)?;
        rest.split_whitespace().next()?.parse::<SocketAddr>().ok()
    };
    Some((after("gRPC on ")?, after("HTTP on ")?))
}

/// `GET path` on `addr` over HTTP/1.1 with `headers`, over TLS trusting `ca` when given; the
/// body of a 200 answer.
///
/// # Errors
/// When the server cannot be reached, answers other than 200, or answers chunked.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    ca: Option<&str>,
) -> anyhow::Result<String> {
    let (status, body) = http_answer(addr, path, headers, ca)?;
    if status != 200 {
        bail!("{path} answered {status}");
    }
    Ok(body)
}

/// `GET path` on `addr` as [`http_get`] sends it; the status and the body, whatever the status.
///
/// # Errors
/// When the server cannot be reached or answers chunked.
pub fn http_answer(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    ca: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let socket = std::net::TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        let _ = write!(request, "{name}: {value}\r\n");
    }
    request.push_str("\r\n");
    let mut response = Vec::new();
    match ca {
        None => {
            let mut socket = socket;
            socket.write_all(request.as_bytes())?;
            socket.read_to_end(&mut response)?;
        }
        Some(ca) => {
            let mut tls = tls_stream(socket, ca)?;
            tls.write_all(request.as_bytes())?;
            // A server may close without a TLS close_notify once it has answered.
            if let Err(e) = tls.read_to_end(&mut response)
                && e.kind() != std::io::ErrorKind::UnexpectedEof
            {
                return Err(e.into());
            }
        }
    }
    let response = String::from_utf8(response).context("a response that is not UTF-8")?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("{path}: no end of headers"))?;
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("{path}: no status in {:?}", head.lines().next()))?;
    if head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"))
    {
        bail!("{path}: chunked answers are not read here");
    }
    Ok((status, body.to_owned()))
}

/// A blocking TLS client over `socket`, trusting `ca` for `localhost`.
fn tls_stream(
    socket: std::net::TcpStream,
    ca: &str,
) -> anyhow::Result<
    tokio_rustls::rustls::StreamOwned<tokio_rustls::rustls::ClientConnection, std::net::TcpStream>,
> {
    use tokio_rustls::rustls;
    let config = crate::tls::client_config(ca)?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let connection = rustls::ClientConnection::new(Arc::new(config), name)?;
    Ok(rustls::StreamOwned::new(connection, socket))
}

/// The sum of the samples of metric `name` in a Prometheus text whose labels contain every
/// one of `labels` (each written `key="value"`).
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let matches = (rest.is_empty() || rest.starts_with('{'))
                && labels.iter().all(|label| rest.contains(label));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addresses_are_read_from_the_line_the_binary_prints() {
        let serve = "l1gate serving gRPC on 127.0.0.1:4001 and HTTP on 127.0.0.1:4002 (TLS)\n";
        assert_eq!(
            addresses(serve),
            Some((
                "127.0.0.1:4001".parse().unwrap(),
                "127.0.0.1:4002".parse().unwrap()
            ))
        );
        let edge = "l1gate edge serving from nats://127.0.0.1:4222 (market from the checkpoint \
                    of block 7): gRPC on 127.0.0.1:5001 and HTTP on 127.0.0.1:5002";
        assert_eq!(
            addresses(edge).map(|(g, h)| (g.port(), h.port())),
            Some((5001, 5002))
        );
        assert_eq!(addresses("error: no such file"), None);
    }

    #[test]
    fn metric_samples_are_summed_over_matching_labels() {
        let text = "# TYPE x counter\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\"} 4\nx_totals 9\n";
        assert_eq!(metric_sum(text, "x_total", &[]) as u64, 7);
        assert_eq!(metric_sum(text, "x_total", &["b=\"2\""]) as u64, 3);
    }
}
