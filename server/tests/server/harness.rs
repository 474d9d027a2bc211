//! Starting a real server in-process and talking to it as a client would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use access::keys::KeysFile;
use l1gate::config::{ServeArgs, Settings};
use l1gate::serve::Running;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Request, Status};

/// Path of a real-data folder in `../shared/data/real`.
pub fn real(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/real")
        .join(name)
}

/// The lines of a real node file, without their newlines.
pub fn real_lines(folder: &str, source_dir: &str) -> Vec<Vec<u8>> {
    let root = real(folder).join("hl/data").join(source_dir).join("hourly");
    let date = std::fs::read_dir(&root)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let hour = std::fs::read_dir(&date)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read(hour)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// A running server with one provisioned key.
pub struct TestServer {
    pub running: Running,
    pub key: String,
    pub keys_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts a server on `data` with default limits changed by `tune`.
    pub async fn start(data: &Path, tune: impl FnOnce(&mut ServeArgs)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keys_file = dir.path().join("keys.toml");
        let mut keys = KeysFile::default();
        let (key, _) = keys.add_key("tests", 0).unwrap();
        keys.save(&keys_file).unwrap();
        let mut args = ServeArgs {
            data: Some(data.to_owned()),
            keys_file: Some(keys_file.clone()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            // Test data carries the simulator's fixed dates: staleness is
            // judged only where a test asks for it.
            market_stale_after_ms: Some(0),
            state_dir: Some(dir.path().join("state")),
            ..ServeArgs::default()
        };
        tune(&mut args);
        let settings: Settings = args.resolve().unwrap();
        let running = l1gate::serve::start(&settings).await.unwrap();
        Self {
            running,
            key,
            keys_file,
            _dir: dir,
        }
    }

    /// A connected channel to the gRPC address.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// A raw feed client (large messages allowed: snapshots are tens of MB).
    pub async fn client(&self) -> VenueL1GatewayClient<Channel> {
        VenueL1GatewayClient::new(self.channel().await).max_decoding_message_size(256 << 20)
    }

    /// Wraps a message with this server's key.
    pub fn req<T>(&self, message: T) -> Request<T> {
        with_key(message, &self.key)
    }
}

/// Reads `stream` until it ends with a status, within `wait` in all (a
/// stream still delivering then fails the test); that status.
pub async fn end_status<T>(stream: &mut tonic::Streaming<T>, wait: Duration) -> Status {
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < wait,
            "the stream was not ended within {wait:?}"
        );
        if let Err(status) = next(stream, wait).await {
            return status;
        }
    }
}

/// A raw-feed stream request from block `n`, unfiltered.
pub fn from_block(n: i64) -> proto::StreamRequest {
    proto::StreamRequest {
        position: Some(proto::Position {
            kind: Some(proto::position::Kind::BlockNumber(n)),
        }),
        filter: None,
    }
}

/// Wraps a message with an `x-api-key`.
pub fn with_key<T>(message: T, key: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("x-api-key", MetadataValue::try_from(key).unwrap());
    request
}

/// Next item of a stream, failing the test if nothing comes within `wait`.
pub async fn next<T>(stream: &mut tonic::Streaming<T>, wait: Duration) -> Result<T, Status> {
    match tokio::time::timeout(wait, stream.message()).await {
        Ok(Ok(Some(item))) => Ok(item),
        Ok(Ok(None)) => panic!("stream ended without a status"),
        Ok(Err(status)) => Err(status),
        Err(_) => panic!("nothing arrived within {wait:?}"),
    }
}

/// Asserts that nothing arrives within `wait`.
pub async fn nothing_within<T: std::fmt::Debug>(stream: &mut tonic::Streaming<T>, wait: Duration) {
    if let Ok(item) = tokio::time::timeout(wait, stream.message()).await {
        panic!("expected silence, got {item:?}");
    }
}

/// Unix ms of a line's block time.
pub fn block_time_ms(line: &[u8]) -> i64 {
    feeds::envelope::decode(line).unwrap().block_time_ms
}

/// Block number of a line.
pub fn block_number(line: &[u8]) -> u64 {
    feeds::envelope::decode(line).unwrap().block_number
}

/// A loopback port free when asked.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Installs Debian `packages` that `what` needs (one install at a time in
/// this process; the package lists are refreshed if the first attempt
/// fails). Fails the test saying what to install when this is not root or
/// the install fails.
pub fn install_debian_packages(packages: &[&str], what: &str) {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let wanted = packages.join(" ");
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0"));
    assert!(
        root,
        "{what} needs the Debian packages {wanted}: install them with `apt-get install -y \
         {wanted}` (not root here, so not installed automatically)"
    );
    let install = || {
        std::process::Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let mut outcome = install();
    if !outcome.as_ref().is_ok_and(|out| out.status.success()) {
        let _ = std::process::Command::new("apt-get")
            .args(["update", "-qq"])
            .status();
        outcome = install();
    }
    assert!(
        outcome.as_ref().is_ok_and(|out| out.status.success()),
        "{what} needs the Debian packages {wanted}; `apt-get install -y {wanted}` failed: {:?}",
        outcome.map(|out| String::from_utf8_lossy(&out.stderr).into_owned())
    );
}
