//! Demo mode: `l1gate serve` with no data directory runs the built-in
//! simulator live into a temporary node directory and serves it, with a fresh
//! demo API key, so a newcomer sees the whole product without a node.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fixtures::{OutputMode, RunOptions, SimConfig};

use access::keys::KeysFile;

/// Blocks between the demo's L4 snapshot files (about 70 s of block time).
const DEMO_SNAPSHOT_EVERY: u64 = 1_000;

/// Why the demo did not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The temporary node directory or the simulator thread could not be
    /// made.
    #[error("demo: {what}")]
    Io {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The demo key could not be made or saved.
    #[error("demo: keys file")]
    Keys(#[from] access::keys::KeysError),
    /// The simulator failed before its first block.
    #[error("demo simulator")]
    Simulator(#[source] fixtures::SimError),
    /// The simulator ended (or panicked) without writing a block.
    #[error("demo simulator stopped before writing a block")]
    Stopped,
    /// The simulator wrote nothing in time.
    #[error("demo simulator wrote nothing within 60 s")]
    Slow,
}

/// A running demo simulator and its temporary node directory. Dropping it
/// stops the simulator and removes the directory.
pub struct Demo {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<fixtures::Summary, fixtures::SimError>>>,
    key: String,
    keys_file: PathBuf,
}

impl std::fmt::Debug for Demo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demo")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Demo {
    /// Starts the simulator live (block times follow the wall clock from now)
    /// and waits until its first block is on disk.
    ///
    /// # Errors
    /// When the temporary directory or the demo keys file cannot be created,
    /// or the simulator fails before writing its first block.
    pub fn start(seed: u64, scale: f64) -> Result<Demo, DemoError> {
        let dir = tempfile::Builder::new()
            .prefix("l1gate-demo-")
            .tempdir()
            .map_err(|source| DemoError::Io {
                what: "temporary directory",
                source,
            })?;
        let keys_file = dir.path().join("demo-keys.toml");
        let mut keys = KeysFile::default();
        let (key, _) = keys.add_key("demo", common::unix_now_ms())?;
        keys.save(&keys_file)?;

        let mut config = SimConfig::mainnet(seed, scale);
        config.mode = OutputMode::ByBlock;
        config.start_time_ms = common::unix_now_ms();
        config.snapshot_every = Some(DEMO_SNAPSHOT_EVERY);
        let stop = Arc::new(AtomicBool::new(false));
        let run = RunOptions {
            live: true,
            stop: Some(stop.clone()),
            ..RunOptions::default()
        };
        let out = dir.path().to_owned();
        let thread = std::thread::Builder::new()
            .name("demo-simulator".into())
            .spawn(move || fixtures::generate(&config, &out, &run, &mut |_| {}))
            .map_err(|source| DemoError::Io {
                what: "simulator thread",
                source,
            })?;
        let mut demo = Demo {
            dir,
            stop,
            thread: Some(thread),
            key,
            keys_file,
        };
        demo.wait_for_first_block()?;
        Ok(demo)
    }

    fn wait_for_first_block(&mut self) -> Result<(), DemoError> {
        let fills = self.dir.path().join("hl/data/node_fills_by_block");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if has_file(&fills) {
                return Ok(());
            }
            if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                return match self.thread.take().map(JoinHandle::join) {
                    Some(Ok(Err(error))) => Err(DemoError::Simulator(error)),
                    _ => Err(DemoError::Stopped),
                };
            }
            if Instant::now() >= deadline {
                return Err(DemoError::Slow);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The node directory being written.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The demo keys file (one account `demo`).
    pub fn keys_file(&self) -> &Path {
        &self.keys_file
    }

    /// The demo API key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn has_file(dir: &Path) -> bool {
    walk_any_file(dir, 4)
}

fn walk_any_file(dir: &Path, depth: u32) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_file() {
            std::fs::metadata(&path).is_ok_and(|m| m.len() > 0)
        } else {
            depth > 0 && walk_any_file(&path, depth - 1)
        }
    })
}

/// The lines printed when demo mode starts: the key and commands to paste
/// (with `tls`, for the TLS addresses: grpcurl without `-plaintext`,
/// `https://` and `wss://`).
pub fn banner(
    key: &str,
    grpc: std::net::SocketAddr,
    http: std::net::SocketAddr,
    data: &Path,
    tls: bool,
) -> String {
    let (plaintext, web, socket) = if tls {
        ("", "https", "wss")
    } else {
        ("-plaintext ", "http", "ws")
    };
    format!(
        "l1gate demo: the built-in simulator is writing mainnet-like node output to {data}\n\
         \n\
         demo API key: {key}\n\
         \n\
         try:\n\
         \x20 grpcurl {plaintext}-H 'x-api-key: {key}' {grpc} list\n\
         \x20 grpcurl {plaintext}-H 'x-api-key: {key}' {grpc} venue_l1_gateway.v3.VenueL1Gateway/ListFeeds\n\
         \x20 grpcurl {plaintext}-H 'x-api-key: {key}' {grpc} venue_l1_gateway.v3.VenueL1Gateway/StreamFills\n\
         \x20 grpcurl {plaintext}-H 'x-api-key: {key}' -d '{{\"filter\":{{\"fields\":[{{\"field\":\"coins\",\"values\":[\"BTC\"]}}]}}}}' {grpc} venue_l1_gateway.v3.VenueL1Gateway/StreamRawBookDiffs\n\
         \n\
         the exchange's WebSocket API (any exchange SDK: base URL {web}://{http}/{key}):\n\
         \x20 websocat {socket}://{http}/{key}/ws   then send: {{\"method\":\"subscribe\",\"subscription\":{{\"type\":\"trades\",\"coin\":\"BTC\"}}}}\n\
         \x20 python3 -c \"from hyperliquid.info import Info; i = Info('{web}://{http}/{key}', skip_ws=False); i.subscribe({{'type': 'trades', 'coin': 'BTC'}}, print)\"\n",
        data = data.display()
    )
}
