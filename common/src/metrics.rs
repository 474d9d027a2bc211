//! Counters of the HTTP and gRPC edges and their exposition (`GET
//! /metrics`): the counters are this module's own atomics and maps (hot
//! paths bump an atomic; nothing is looked up per record), read into
//! [`Family`] values at each scrape and written by the `prometheus-client`
//! crate's OpenMetrics text encoder (escaping, `_total` suffixes, `# EOF`).
//!
//! Labels carry key ids (`k_` + a prefix of the key's SHA-256) and account
//! names, never a key or a full hash. Hot paths (records sent on a stream)
//! bump atomics held by the stream; maps are only touched once per request
//! or stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Usage of one key.
#[derive(Debug, Default)]
pub struct KeyUsage {
    /// Admitted HTTP requests and unary gRPC calls.
    pub requests: AtomicU64,
    /// Streams opened.
    pub streams_opened: AtomicU64,
    /// Payload bytes of raw-feed records sent on its streams.
    pub stream_bytes: AtomicU64,
}

/// Records and bytes sent by one raw feed.
#[derive(Debug, Default)]
pub struct FeedTraffic {
    /// Records sent to subscribers.
    pub records: AtomicU64,
    /// Payload bytes of those records.
    pub bytes: AtomicU64,
    /// Newest block time (Unix ms) among them; 0 before the first.
    pub newest_block_time_ms: AtomicI64,
}

/// Families kept elsewhere (the engine's, say), read at every scrape.
pub type Gauges = Box<dyn Fn() -> Vec<Family> + Send + Sync>;

/// A family's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows; its name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One metric family as a scrape reads it: its sample name, kind, help
/// and samples.
#[derive(Debug, Clone)]
pub struct Family {
    /// The sample name (`l1gate_…`; a counter's ends in `_total`).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// The HELP text.
    pub help: &'static str,
    /// Its samples.
    pub samples: Vec<Sample>,
}

/// One sample of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Label names and values (values are escaped when written).
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: Number,
}

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// A count.
    Count(u64),
    /// A measure with a fraction (seconds, say).
    Real(f64),
}

impl Sample {
    /// A sample without labels.
    pub fn of(value: u64) -> Self {
        Self {
            labels: Vec::new(),
            value: Number::Count(value),
        }
    }

    /// A sample labelled `labels`.
    pub fn by(labels: &[(&'static str, &str)], value: u64) -> Self {
        Self {
            labels: labels
                .iter()
                .map(|(name, value)| (*name, (*value).to_owned()))
                .collect(),
            value: Number::Count(value),
        }
    }
}

/// Every counter of the server.
#[derive(Default)]
pub struct Metrics {
    http_responses: Mutex<BTreeMap<u16, u64>>,
    grpc_admissions: Mutex<BTreeMap<&'static str, u64>>,
    rejections: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    keys: Mutex<BTreeMap<String, (String, Arc<KeyUsage>)>>,
    feeds: Mutex<BTreeMap<&'static str, Arc<FeedTraffic>>>,
    open_streams: Mutex<BTreeMap<String, u64>>,
    /// The most clients (connections and streams) open at once since
    /// [`Metrics::take_clients_peak`] last looked.
    clients_peak: AtomicU64,
    streams_ended: Mutex<BTreeMap<(&'static str, &'static str, &'static str), u64>>,
    lag_skips: Mutex<BTreeMap<&'static str, u64>>,
    raw_feed_skips: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    open_connections: AtomicU64,
    connections_refused: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    http_timeouts: Mutex<BTreeMap<&'static str, u64>>,
    candle_lookups: CandleLookups,
    grpc_writes: Arc<SocketWrites>,
    extras: Mutex<Vec<Gauges>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Write calls made on the gRPC edge's sockets, and the bytes they carried
/// (lock-free: counted on every write).
#[derive(Debug, Default)]
pub struct SocketWrites {
    /// Write system calls that took data.
    pub calls: AtomicU64,
    /// Bytes taken by them.
    pub bytes: AtomicU64,
}

/// Candle lookups by response status (lock-free: the lookup path is hot).
#[derive(Debug, Default)]
struct CandleLookups {
    ok: AtomicU64,
    bad_request: AtomicU64,
    not_found: AtomicU64,
    other: Mutex<BTreeMap<u16, u64>>,
}

impl Metrics {
    /// Counts one HTTP response by status.
    pub fn http_response(&self, status: u16) {
        *self.http_responses.lock().entry(status).or_default() += 1;
    }

    /// Counts one candle lookup by its HTTP status.
    pub fn candle_lookup(&self, status: u16) {
        let lookups = &self.candle_lookups;
        match status {
            200 => lookups.ok.fetch_add(1, Ordering::Relaxed),
            400 => lookups.bad_request.fetch_add(1, Ordering::Relaxed),
            404 => lookups.not_found.fetch_add(1, Ordering::Relaxed),
            _ => {
                *lookups.other.lock().entry(status).or_default() += 1;
                0
            }
        };
    }

    /// Renders the families `read` returns with every scrape.
    pub fn render_also(&self, read: impl Fn() -> Vec<Family> + Send + Sync + 'static) {
        self.extras.lock().push(Box::new(read));
    }

    /// The counters of the gRPC sockets' writes.
    pub fn grpc_writes(&self) -> Arc<SocketWrites> {
        Arc::clone(&self.grpc_writes)
    }

    /// Counts one gRPC admission decision by its code (`ok` when admitted).
    pub fn grpc_admission(&self, code: &'static str) {
        *self.grpc_admissions.lock().entry(code).or_default() += 1;
    }

    /// Counts one rejection by edge (`http`, `grpc`) and reason.
    pub fn rejection(&self, edge: &'static str, reason: &'static str) {
        *self.rejections.lock().entry((edge, reason)).or_default() += 1;
    }

    /// The usage counters of a key, created on first use.
    pub fn key(&self, account: &str, key_id: &str) -> Arc<KeyUsage> {
        let mut keys = self.keys.lock();
        let entry = keys
            .entry(key_id.to_owned())
            .or_insert_with(|| (account.to_owned(), Arc::default()));
        entry.1.clone()
    }

    /// The traffic counters of a raw feed, created on first use.
    pub fn feed(&self, feed_id: &'static str) -> Arc<FeedTraffic> {
        self.feeds.lock().entry(feed_id).or_default().clone()
    }

    /// Counts a stream ended because its subscriber was too slow, by
    /// service (`market`, `raw_feed`), view or feed, and reason (`lag`,
    /// `stall`).
    pub fn stream_ended(&self, service: &'static str, view: &'static str, reason: &'static str) {
        *self
            .streams_ended
            .lock()
            .entry((service, view, reason))
            .or_default() += 1;
    }

    /// Counts a node line a raw-feed stream did not send, by feed and reason
    /// (`undecodable`, `duplicate`, `backwards`), and a block gap it saw
    /// (`gap`, the record is sent).
    pub fn raw_feed_skip(&self, feed: &'static str, reason: &'static str) {
        *self
            .raw_feed_skips
            .lock()
            .entry((feed, reason))
            .or_default() += 1;
    }

    /// Sets the number of connections open over both edges.
    pub fn set_open_connections(&self, open: u64) {
        self.open_connections.store(open, Ordering::Relaxed);
        self.note_clients();
    }

    /// Clients open now: connections of both edges and streams of every
    /// account.
    pub fn clients(&self) -> u64 {
        let streams: u64 = self.open_streams.lock().values().sum();
        self.open_connections.load(Ordering::Relaxed) + streams
    }

    fn note_clients(&self) {
        self.clients_peak
            .fetch_max(self.clients(), Ordering::Relaxed);
    }

    /// The most clients open at once since the last call (or the start),
    /// and clients open now; the peak starts again from now.
    pub fn take_clients_peak(&self) -> (u64, u64) {
        let now = self.clients();
        (self.clients_peak.swap(now, Ordering::Relaxed).max(now), now)
    }

    /// Counts a connection closed at once over a limit, by edge and limit.
    pub fn connection_refused(&self, edge: &'static str, limit: &'static str) {
        *self
            .connections_refused
            .lock()
            .entry((edge, limit))
            .or_default() += 1;
    }

    /// Counts an HTTP connection closed for a timeout (`header`, `idle`).
    pub fn http_timeout(&self, reason: &'static str) {
        *self.http_timeouts.lock().entry(reason).or_default() += 1;
    }

    /// Counts a lagging snapshot-view stream re-opened on the newest state.
    pub fn lag_skip(&self, view: &'static str) {
        *self.lag_skips.lock().entry(view).or_default() += 1;
    }

    /// Sets the number of open streams of an account.
    pub fn set_open_streams(&self, account: &str, open: u64) {
        self.open_streams.lock().insert(account.to_owned(), open);
        self.note_clients();
    }

    /// Open streams per account (the status page).
    pub fn open_streams(&self) -> Vec<(String, u64)> {
        self.open_streams
            .lock()
            .iter()
            .map(|(account, open)| (account.clone(), *open))
            .collect()
    }

    /// Streams ended by l1gate so far, by (service, view, reason).
    pub fn streams_ended(&self) -> Vec<((&'static str, &'static str, &'static str), u64)> {
        self.streams_ended
            .lock()
            .iter()
            .map(|(key, count)| (*key, *count))
            .collect()
    }

    /// The exposition of every family (OpenMetrics text, which Prometheus
    /// reads), with data ages measured from `now_ms` (Unix ms).
    pub fn render(&self, now_ms: i64) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape(self.families(now_ms))));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// Every family with its samples as they stand, data ages measured from
    /// `now_ms` (Unix ms).
    pub fn families(&self, now_ms: i64) -> Vec<Family> {
        let count = |name, help| Family::new(name, Kind::Counter, help);
        let gauge = |name, help| Family::new(name, Kind::Gauge, help);
        let mut families = Vec::new();

        let mut family = count("l1gate_http_responses_total", "HTTP responses by status.");
        for (status, n) in self.http_responses.lock().iter() {
            family.add(&[("status", &status.to_string())], *n);
        }
        families.push(family);

        let mut family = count(
            "l1gate_grpc_admissions_total",
            "gRPC calls by admission outcome: ok, or the status code of the rejection.",
        );
        for (code, n) in self.grpc_admissions.lock().iter() {
            family.add(&[("code", code)], *n);
        }
        families.push(family);

        let mut family = count(
            "l1gate_access_rejections_total",
            "Requests rejected by access control, by edge and reason.",
        );
        for ((edge, reason), n) in self.rejections.lock().iter() {
            family.add(&[("edge", edge), ("reason", reason)], *n);
        }
        families.push(family);

        let mut family = count(
            "l1gate_streams_ended_total",
            "Streams ended because the subscriber was too slow, by service, view (or feed) and reason: lag (too far behind the newest data) or stall (the connection took nothing for send_timeout_ms).",
        );
        for ((service, view, reason), n) in self.streams_ended.lock().iter() {
            family.add(
                &[("service", service), ("view", view), ("reason", reason)],
                *n,
            );
        }
        families.push(family);

        let mut family = count(
            "l1gate_market_lag_skips_total",
            "Snapshot-view streams (BBO, L2 book, candle, mids) that fell too far behind and were re-opened on the newest state, by view.",
        );
        for (view, n) in self.lag_skips.lock().iter() {
            family.add(&[("view", view)], *n);
        }
        families.push(family);

        let keys: Vec<(String, String, Arc<KeyUsage>)> = self
            .keys
            .lock()
            .iter()
            .map(|(id, (account, usage))| (id.clone(), account.clone(), usage.clone()))
            .collect();
        let per_key: [(&'static str, &'static str, UsageField); 3] = [
            (
                "l1gate_key_requests_total",
                "Admitted HTTP requests and unary gRPC calls per key id.",
                |u| &u.requests,
            ),
            (
                "l1gate_key_streams_opened_total",
                "Streams opened per key id.",
                |u| &u.streams_opened,
            ),
            (
                "l1gate_key_stream_bytes_total",
                "Bytes sent on streams per key id (raw-feed records and market frames).",
                |u| &u.stream_bytes,
            ),
        ];
        for (name, help, field) in per_key {
            let mut family = count(name, help);
            for (id, account, usage) in &keys {
                family.add(
                    &[("key_id", id), ("account", account)],
                    field(usage).load(Ordering::Relaxed),
                );
            }
            families.push(family);
        }

        let mut family = gauge(
            "l1gate_account_open_streams",
            "Streams currently open per account.",
        );
        for (account, n) in self.open_streams.lock().iter() {
            family.add(&[("account", account)], *n);
        }
        families.push(family);

        let mut family = count(
            "l1gate_candle_lookups_total",
            "Candle lookups (admitted requests to /v1/candles) by HTTP status.",
        );
        let lookups = &self.candle_lookups;
        let mut by_status: BTreeMap<u16, u64> = lookups.other.lock().clone();
        for (status, counter) in [
            (200, &lookups.ok),
            (400, &lookups.bad_request),
            (404, &lookups.not_found),
        ] {
            let n = counter.load(Ordering::Relaxed);
            if n > 0 {
                by_status.insert(status, n);
            }
        }
        for (status, n) in by_status {
            family.add(&[("status", &status.to_string())], n);
        }
        families.push(family);

        let mut family = count(
            "l1gate_raw_feed_anomalies_total",
            "Node lines raw-feed streams did not send (reason undecodable, duplicate, backwards) and block gaps they passed over (reason gap), by feed; counted once per stream that met them.",
        );
        for ((feed, reason), n) in self.raw_feed_skips.lock().iter() {
            family.add(&[("feed", feed), ("reason", reason)], *n);
        }
        families.push(family);

        families.push(
            gauge(
                "l1gate_connections_open",
                "Connections open over both edges (gRPC and HTTP).",
            )
            .with(&[], self.open_connections.load(Ordering::Relaxed)),
        );

        let mut family = count(
            "l1gate_connections_refused_total",
            "Connections closed as soon as accepted, over max_connections or max_connections_per_ip, by edge and limit.",
        );
        for ((edge, limit), n) in self.connections_refused.lock().iter() {
            family.add(&[("edge", edge), ("limit", limit)], *n);
        }
        families.push(family);

        let mut family = count(
            "l1gate_http_connections_timed_out_total",
            "HTTP connections closed because a request's headers took longer than http_header_timeout_ms (header) or nothing moved for http_idle_timeout_ms (idle).",
        );
        for (reason, n) in self.http_timeouts.lock().iter() {
            family.add(&[("reason", reason)], *n);
        }
        families.push(family);

        families.push(
            count(
                "l1gate_grpc_socket_writes_total",
                "Write system calls on gRPC connections (the frames of many streams share one).",
            )
            .with(&[], self.grpc_writes.calls.load(Ordering::Relaxed)),
        );
        families.push(
            count(
                "l1gate_grpc_socket_write_bytes_total",
                "Bytes written to gRPC connections.",
            )
            .with(&[], self.grpc_writes.bytes.load(Ordering::Relaxed)),
        );

        let feeds: Vec<(&'static str, Arc<FeedTraffic>)> = self
            .feeds
            .lock()
            .iter()
            .map(|(id, t)| (*id, t.clone()))
            .collect();
        let mut records = count(
            "l1gate_raw_feed_records_sent_total",
            "Raw-feed records sent to subscribers, by feed.",
        );
        let mut bytes = count(
            "l1gate_raw_feed_bytes_sent_total",
            "Raw-feed record bytes sent to subscribers, by feed.",
        );
        let mut ages = gauge(
            "l1gate_raw_feed_data_age_seconds",
            "Wall-clock time minus the newest block time sent to any subscriber of the feed (feeds that sent nothing are absent).",
        );
        for (feed, traffic) in &feeds {
            records.add(&[("feed", feed)], traffic.records.load(Ordering::Relaxed));
            bytes.add(&[("feed", feed)], traffic.bytes.load(Ordering::Relaxed));
            let newest = traffic.newest_block_time_ms.load(Ordering::Relaxed);
            if newest > 0 {
                let age_ms = now_ms.saturating_sub(newest);
                ages.samples.push(Sample {
                    labels: vec![("feed", (*feed).to_owned())],
                    value: Number::Real(age_ms as f64 / 1000.0),
                });
            }
        }
        families.extend([records, bytes, ages]);

        for read in self.extras.lock().iter() {
            families.extend(read());
        }
        families
    }
}

impl Family {
    /// A family without samples yet.
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        debug_assert!(
            (kind == Kind::Counter) == name.ends_with("_total"),
            "{name}: a counter's name, and only a counter's, ends in _total"
        );
        Self {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    /// Adds a sample labelled `labels`.
    pub fn add(&mut self, labels: &[(&'static str, &str)], value: u64) {
        self.samples.push(Sample::by(labels, value));
    }

    /// The family with one more sample labelled `labels`.
    #[must_use]
    pub fn with(mut self, labels: &[(&'static str, &str)], value: u64) -> Self {
        self.add(labels, value);
        self
    }

    /// Writes the family through the exposition's encoder. A counter is
    /// described by its name without `_total`, which the encoder puts back
    /// on its samples.
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let (name, kind) = match self.kind {
            Kind::Counter => (
                self.name.strip_suffix("_total").unwrap_or(self.name),
                MetricType::Counter,
            ),
            Kind::Gauge => (self.name, MetricType::Gauge),
        };
        let mut metric = encoder.encode_descriptor(name, self.help, None, kind)?;
        if let [only] = self.samples.as_slice()
            && only.labels.is_empty()
        {
            // One series without labels: written as `name value`.
            return only.value.encode(self.kind, metric);
        }
        for sample in &self.samples {
            // The encoder writes label values as they are: escaped here.
            let labels: Vec<(&str, String)> = sample
                .labels
                .iter()
                .map(|(name, value)| (*name, escaped(value)))
                .collect();
            sample
                .value
                .encode(self.kind, metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

impl Number {
    /// Writes the value as a sample of a family of `kind`.
    fn encode(self, kind: Kind, encoder: MetricEncoder<'_>) -> std::fmt::Result {
        match (kind, self) {
            (Kind::Counter, Number::Count(n)) => ConstCounter::new(n).encode(encoder),
            (Kind::Counter, Number::Real(x)) => ConstCounter::new(x).encode(encoder),
            (Kind::Gauge, Number::Count(n)) => ConstGauge::new(n).encode(encoder),
            (Kind::Gauge, Number::Real(x)) => ConstGauge::new(x).encode(encoder),
        }
    }
}

/// A label value as the text format wants it: backslash, double quote and
/// line feed escaped.
fn escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One scrape's families, handed to the exposition's encoder.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.0
            .iter()
            .try_for_each(|family| family.encode(&mut encoder))
    }
}

/// Picks one counter of a key's usage.
type UsageField = fn(&KeyUsage) -> &AtomicU64;

/// Whether a warning about `what` may be logged now: at most once per
/// `every` per `what`, so that a burst of bad input logs a line, not a
/// line per item (the counters carry the totals).
pub fn warn_allowed(what: &str, every: std::time::Duration) -> bool {
    static LAST: std::sync::LazyLock<Mutex<std::collections::HashMap<String, std::time::Instant>>> =
        std::sync::LazyLock::new(Mutex::default);
    let now = std::time::Instant::now();
    let mut last = LAST.lock();
    match last.get(what) {
        Some(at) if now.duration_since(*at) < every => false,
        _ => {
            last.insert(what.to_owned(), now);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_peak_counts_connections_and_streams_between_looks() {
        let metrics = Metrics::default();
        metrics.set_open_connections(3);
        metrics.set_open_streams("a", 500);
        metrics.set_open_streams("b", 200);
        metrics.set_open_streams("a", 10);
        metrics.set_open_connections(1);
        // A burst between two looks is seen at its height.
        assert_eq!(metrics.take_clients_peak(), (703, 211));
        // The next look starts from what was open then.
        assert_eq!(metrics.take_clients_peak(), (211, 211));
        metrics.set_open_streams("b", 0);
        assert_eq!(metrics.clients(), 11);
    }

    #[test]
    fn counters_render_as_prometheus_text() {
        let metrics = Metrics::default();
        metrics.http_response(200);
        metrics.http_response(200);
        metrics.http_response(429);
        metrics.grpc_admission("ok");
        metrics.rejection("http", "rate_limited");
        let usage = metrics.key("alice", "k_0123456789ab");
        usage.requests.fetch_add(3, Ordering::Relaxed);
        usage.stream_bytes.fetch_add(1024, Ordering::Relaxed);
        metrics
            .feed("blocks")
            .records
            .fetch_add(7, Ordering::Relaxed);
        metrics
            .feed("blocks")
            .newest_block_time_ms
            .store(1_000_000, Ordering::Relaxed);
        metrics.feed("fills");
        metrics.set_open_streams("alice", 2);
        metrics.candle_lookup(200);
        metrics.candle_lookup(200);
        metrics.candle_lookup(503);
        let text = metrics.render(1_002_500);
        for line in [
            "# TYPE l1gate_http_responses counter",
            "l1gate_http_responses_total{status=\"200\"} 2",
            "l1gate_http_responses_total{status=\"429\"} 1",
            "l1gate_grpc_admissions_total{code=\"ok\"} 1",
            "l1gate_access_rejections_total{edge=\"http\",reason=\"rate_limited\"} 1",
            "l1gate_key_requests_total{key_id=\"k_0123456789ab\",account=\"alice\"} 3",
            "l1gate_key_streams_opened_total{key_id=\"k_0123456789ab\",account=\"alice\"} 0",
            "l1gate_key_stream_bytes_total{key_id=\"k_0123456789ab\",account=\"alice\"} 1024",
            "l1gate_account_open_streams{account=\"alice\"} 2",
            "l1gate_raw_feed_records_sent_total{feed=\"blocks\"} 7",
            "l1gate_raw_feed_bytes_sent_total{feed=\"blocks\"} 0",
            "l1gate_raw_feed_data_age_seconds{feed=\"blocks\"} 2.5",
            "l1gate_candle_lookups_total{status=\"200\"} 2",
            "l1gate_candle_lookups_total{status=\"503\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("l1gate_raw_feed_data_age_seconds{feed=\"fills\"}"));
        assert!(text.ends_with("# EOF\n"), "{text}");
        // A series without labels has no braces.
        assert!(
            text.lines().any(|l| l == "l1gate_connections_open 0"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped_and_counters_keep_their_total_suffix() {
        let metrics = Metrics::default();
        // Account names come from the keys file: whatever they hold, the
        // exposition stays parseable.
        metrics.set_open_streams("a\"b\\c\nd", 1);
        metrics.http_response(200);
        let text = metrics.render(0);
        assert!(
            text.lines()
                .any(|l| l == r#"l1gate_account_open_streams{account="a\"b\\c\nd"} 1"#),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "# TYPE l1gate_account_open_streams gauge")
        );
        assert!(!text.contains("_total_total"), "{text}");
        for family in metrics.families(0) {
            assert_eq!(
                family.kind == Kind::Counter,
                family.name.ends_with("_total"),
                "{}",
                family.name
            );
        }
    }
}
