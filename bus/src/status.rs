//! The bus side's state as operators see it: whether the connection is up,
//! the last error, and per feed the last block and stream sequence moved,
//! records and bytes, lag and anomalies — rendered for `/healthz` (the `bus`
//! entry) and `/metrics` (`l1gate_bus_*`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use feeds::Source;
use parking_lot::Mutex;

use crate::subjects::BUS_FEEDS;

/// Which side of the bus this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The node host, appending the node's records.
    Publisher,
    /// An edge, serving what it consumes.
    Edge,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Publisher => "publisher",
            Role::Edge => "edge",
        }
    }
}

/// Shared state of one side of the bus.
#[derive(Debug)]
pub struct BusStatus {
    role: Role,
    url: String,
    client: Mutex<Option<async_nats::Client>>,
    error: Mutex<Option<String>>,
    feeds: BTreeMap<Source, Arc<FeedState>>,
    /// Block of the newest engine checkpoint put on the bus (publisher) or
    /// started from (edge); 0 before any.
    pub checkpoint_block: AtomicU64,
    checkpoint_error: Mutex<Option<String>>,
}

/// One feed's progress on the bus.
#[derive(Debug, Default)]
pub struct FeedState {
    /// Block number of the last record acknowledged (publisher) or written
    /// (edge); 0 before any.
    pub last_block: AtomicU64,
    /// Its block time, Unix ms; 0 when unknown.
    pub last_time_ms: AtomicI64,
    /// Its JetStream stream sequence.
    pub last_sequence: AtomicU64,
    /// Records moved by this process.
    pub records: AtomicU64,
    /// Payload bytes moved by this process.
    pub bytes: AtomicU64,
    /// Publisher: bytes read from the files but not yet acknowledged, plus
    /// bytes not yet read.
    pub lag_bytes: AtomicU64,
    /// Publisher: times the stream's end was looked up again after a
    /// failed or refused publish.
    pub resyncs: AtomicU64,
    /// Edge: stream sequences that were gone when the edge asked for them
    /// (retention removed them first).
    pub gaps: AtomicU64,
    /// Messages skipped: not a record (bad headers, a newline inside).
    pub rejected: AtomicU64,
    error: Mutex<Option<String>>,
}

impl FeedState {
    /// Notes one record moved.
    pub fn moved(&self, block: u64, time_ms: Option<i64>, sequence: u64, bytes: usize) {
        self.last_block.store(block, Ordering::Release);
        if let Some(time) = time_ms {
            self.last_time_ms.store(time, Ordering::Release);
        }
        self.last_sequence.store(sequence, Ordering::Release);
        self.records.fetch_add(1, Ordering::AcqRel);
        self.bytes.fetch_add(bytes as u64, Ordering::AcqRel);
    }

    /// Sets or clears this feed's current problem.
    pub fn set_error(&self, error: Option<String>) {
        *self.error.lock() = error;
    }
}

impl BusStatus {
    /// State for `role` talking to `url` (shown with its credential
    /// hidden).
    pub fn new(role: Role, url: &crate::url::BusUrl) -> Arc<BusStatus> {
        Arc::new(BusStatus {
            role,
            url: url.to_string(),
            client: Mutex::new(None),
            error: Mutex::new(None),
            feeds: BUS_FEEDS
                .iter()
                .map(|&source| (source, Arc::new(FeedState::default())))
                .collect(),
            checkpoint_block: AtomicU64::new(0),
            checkpoint_error: Mutex::new(None),
        })
    }

    /// Sets or clears the problem putting checkpoints on the bus.
    pub fn set_checkpoint_error(&self, error: Option<String>) {
        *self.checkpoint_error.lock() = error;
    }

    /// The connected client (its state says whether it is up).
    pub fn set_client(&self, client: async_nats::Client) {
        *self.client.lock() = Some(client);
    }

    /// Sets or clears the connection-level problem.
    pub fn set_error(&self, error: Option<String>) {
        *self.error.lock() = error;
    }

    /// The state of one feed (every [`BUS_FEEDS`] member has one).
    pub fn feed(&self, source: Source) -> Option<Arc<FeedState>> {
        self.feeds.get(&source).cloned()
    }

    /// Whether the connection is up now.
    pub fn connected(&self) -> bool {
        self.client.lock().as_ref().is_some_and(|client| {
            client.connection_state() == async_nats::connection::State::Connected
        })
    }

    /// The `bus` entry of `/healthz`.
    pub fn json(&self, now_ms: i64) -> serde_json::Value {
        let mut feeds = serde_json::Map::new();
        for (source, state) in &self.feeds {
            let block = state.last_block.load(Ordering::Acquire);
            let time = state.last_time_ms.load(Ordering::Acquire);
            feeds.insert(
                source.feed_id().to_owned(),
                serde_json::json!({
                    "last_block": (block > 0).then_some(block),
                    "last_block_time": (time > 0).then(|| feeds::time::format_iso8601_ms(time)),
                    "age_ms": (time > 0).then_some(now_ms - time),
                    "stream_sequence": state.last_sequence.load(Ordering::Acquire),
                    "records": state.records.load(Ordering::Acquire),
                    "lag_bytes": (self.role == Role::Publisher)
                        .then(|| state.lag_bytes.load(Ordering::Acquire)),
                    "error": state.error.lock().clone(),
                }),
            );
        }
        serde_json::json!({
            "role": self.role.name(),
            "url": self.url,
            "connected": self.connected(),
            "error": self.error.lock().clone(),
            "feeds": feeds,
            "checkpoint": {
                "block": Some(self.checkpoint_block.load(Ordering::Acquire)).filter(|&b| b > 0),
                "error": self.checkpoint_error.lock().clone(),
            },
        })
    }

    /// The `l1gate_bus_*` metric families.
    pub fn families(&self) -> Vec<common::metrics::Family> {
        use common::metrics::Family;
        let per_feed = |read: &dyn Fn(&FeedState) -> u64| -> Vec<common::metrics::Sample> {
            self.feeds
                .iter()
                .map(|(source, state)| {
                    common::metrics::Sample::by(&[("feed", source.feed_id())], read(state))
                })
                .collect()
        };
        let load = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        let (records_help, bytes_help) = match self.role {
            Role::Publisher => (
                "Records appended to the bus and acknowledged by JetStream, by feed.",
                "Payload bytes appended to the bus and acknowledged, by feed.",
            ),
            Role::Edge => (
                "Records consumed from the bus and written for serving, by feed.",
                "Payload bytes consumed from the bus, by feed.",
            ),
        };
        let mut families = vec![
            Family {
                name: "l1gate_bus_connected",
                kind: common::metrics::Kind::Gauge,
                help: "1 while the connection to the NATS bus is up.",
                samples: vec![common::metrics::Sample::of(u64::from(self.connected()))],
            },
            Family {
                name: "l1gate_bus_records_total",
                kind: common::metrics::Kind::Counter,
                help: records_help,
                samples: per_feed(&|s| load(&s.records)),
            },
            Family {
                name: "l1gate_bus_bytes_total",
                kind: common::metrics::Kind::Counter,
                help: bytes_help,
                samples: per_feed(&|s| load(&s.bytes)),
            },
            Family {
                name: "l1gate_bus_last_block",
                kind: common::metrics::Kind::Gauge,
                help: "Block number of the last record moved over the bus, by feed.",
                samples: per_feed(&|s| load(&s.last_block)),
            },
            Family {
                name: "l1gate_bus_stream_sequence",
                kind: common::metrics::Kind::Gauge,
                help: "JetStream stream sequence of the last record moved, by feed.",
                samples: per_feed(&|s| load(&s.last_sequence)),
            },
            Family {
                name: "l1gate_bus_checkpoint_block",
                kind: common::metrics::Kind::Gauge,
                help: "Block of the newest engine checkpoint put on the bus (publisher) or started from (edge).",
                samples: vec![common::metrics::Sample::of(load(&self.checkpoint_block))],
            },
            Family {
                name: "l1gate_bus_rejected_total",
                kind: common::metrics::Kind::Counter,
                help: "Messages or lines that are not records and were not moved, by feed.",
                samples: per_feed(&|s| load(&s.rejected)),
            },
        ];
        match self.role {
            Role::Publisher => {
                families.push(Family {
                    name: "l1gate_bus_lag_bytes",
                    kind: common::metrics::Kind::Gauge,
                    help: "Bytes of the node's records not yet acknowledged by the bus, by feed.",
                    samples: per_feed(&|s| load(&s.lag_bytes)),
                });
                families.push(Family {
                    name: "l1gate_bus_resyncs_total",
                    kind: common::metrics::Kind::Counter,
                    help: "Times the publisher looked up the stream's end again after a failed or refused publish, by feed.",
                    samples: per_feed(&|s| load(&s.resyncs)),
                });
            }
            Role::Edge => families.push(Family {
                name: "l1gate_bus_gaps_total",
                kind: common::metrics::Kind::Counter,
                help: "Stream sequences retention removed before the edge read them, by feed.",
                samples: per_feed(&|s| load(&s.gaps)),
            }),
        }
        families
    }
}
