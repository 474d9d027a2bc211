//! Client load beside a measurement: what other clients do to a server while a harness times
//! its streams. Each load runs as tasks on the caller's runtime until [`LoadRun::finish`], and
//! tallies what the server answered; a harness that wants the load's clients out of its own
//! process (as other clients are) runs them in a child process instead
//! ([`LoadRun::in_child`], [`LoadTally::to_json`]).
//!
//! - [`open_orders`]: accounts each asking Info `openOrders` for one user over HTTP/1.1
//!   keep-alive connections, at a steady rate per account.
//! - [`l4_subscribes`]: WebSocket connections each subscribing to `l4Book` of one coin,
//!   reading its snapshot, and unsubscribing, over and over: subscribers arriving and leaving,
//!   spread evenly over time. (With every connection's turns in phase, the subscribes arrive
//!   in bursts, one per connection at once; measured on two cores, a burst of 100 `l4Book`
//!   snapshots delayed every stream of the server, the raw feed's too, by up to ~10 ms.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use serde::Deserialize as _;
use tokio::task::JoinHandle;

use crate::live;

/// A [`LoadTally`] as a load's child process prints it for its harness.
#[derive(serde::Serialize, serde::Deserialize)]
struct Printed {
    sent: u64,
    answered: u64,
    refused: u64,
    failed: u64,
    failure: Option<String>,
    seconds: f64,
    /// The answer times: a serialised histogram, in hex.
    answer: String,
}

/// What a load's clients saw.
#[derive(Debug)]
pub struct LoadTally {
    /// Requests (or subscribes) sent.
    pub sent: u64,
    /// Answered as asked (HTTP 200, a subscription's snapshot).
    pub answered: u64,
    /// Refused by the server (HTTP 429/503, a WebSocket error message).
    pub refused: u64,
    /// Anything else: connection errors, other statuses (the first is kept in `failure`).
    pub failed: u64,
    /// The first failure.
    pub failure: Option<String>,
    /// Request → whole answer read, µs.
    pub answer: Histogram<u64>,
}

impl LoadTally {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            sent: 0,
            answered: 0,
            refused: 0,
            failed: 0,
            failure: None,
            answer: live::histogram()?,
        })
    }

    fn fail(&mut self, what: String) {
        self.failed += 1;
        self.failure.get_or_insert(what);
    }

    /// The tally and the seconds the load ran, as a child process prints it for its harness
    /// ([`Printed`]).
    ///
    /// # Errors
    /// When the histogram cannot be serialised.
    pub fn to_json(&self, seconds: f64) -> anyhow::Result<serde_json::Value> {
        use hdrhistogram::serialization::Serializer as _;
        let mut bytes = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&self.answer, &mut bytes)
            .map_err(|error| anyhow::anyhow!("answer histogram: {error:?}"))?;
        Ok(serde_json::to_value(Printed {
            sent: self.sent,
            answered: self.answered,
            refused: self.refused,
            failed: self.failed,
            failure: self.failure.clone(),
            seconds,
            answer: hex::encode(&bytes),
        })?)
    }

    /// [`LoadTally::to_json`] read back: the tally and the seconds.
    ///
    /// # Errors
    /// When a field is missing or the histogram does not decode.
    pub fn from_json(value: &serde_json::Value) -> anyhow::Result<(Self, f64)> {
        let printed = Printed::deserialize(value).context("load tally")?;
        let bytes =
            hex::decode(&printed.answer).context("load tally: the answer histogram is not hex")?;
        let answer = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|error| anyhow::anyhow!("load tally: answer histogram: {error:?}"))?;
        let tally = Self {
            sent: printed.sent,
            answered: printed.answered,
            refused: printed.refused,
            failed: printed.failed,
            failure: printed.failure,
            answer,
        };
        Ok((tally, printed.seconds))
    }

    fn add(&mut self, other: LoadTally) -> anyhow::Result<()> {
        self.sent += other.sent;
        self.answered += other.answered;
        self.refused += other.refused;
        self.failed += other.failed;
        if self.failure.is_none() {
            self.failure = other.failure;
        }
        self.answer.add(&other.answer)?;
        Ok(())
    }
}

/// A running load.
pub struct LoadRun {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<anyhow::Result<LoadTally>>>,
    started: Instant,
    /// The child process running the clients, when they run in one.
    child: Option<std::process::Child>,
}

impl LoadRun {
    /// No load: [`LoadRun::finish`] gives an empty tally.
    pub fn none() -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
            started: Instant::now(),
            child: None,
        }
    }

    /// A load whose clients run in `child`, a process started with its standard input and
    /// output piped: it runs until its input closes, then prints its [`LoadTally::to_json`].
    pub fn in_child(child: std::process::Child) -> Self {
        Self {
            child: Some(child),
            ..Self::none()
        }
    }

    /// The child process running the clients, if they run in one.
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// In the child process that runs a load's clients: waits until its standard input
    /// closes (the harness closes it, or exits), then [`LoadRun::finish`].
    ///
    /// # Errors
    /// As [`LoadRun::finish`].
    pub async fn until_input_closes(self) -> anyhow::Result<(LoadTally, f64)> {
        tokio::task::spawn_blocking(|| {
            use std::io::Read as _;
            // Nothing is sent on it: it ends when the harness closes it (or exits).
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        })
        .await?;
        self.finish().await
    }

    /// Stops the clients and sums what they saw, with the seconds the load ran.
    ///
    /// # Errors
    /// When a client task could not run at all (its histogram, a panic), or the child process
    /// running them failed or printed no tally.
    pub async fn finish(mut self) -> anyhow::Result<(LoadTally, f64)> {
        if let Some(mut child) = self.child.take() {
            // Closing its input tells it to stop; it prints its tally and exits.
            drop(child.stdin.take());
            let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
            anyhow::ensure!(
                output.status.success(),
                "the load's process failed: {}",
                output.status
            );
            let value: serde_json::Value =
                serde_json::from_slice(&output.stdout).context("the load's process output")?;
            return LoadTally::from_json(&value);
        }
        self.stop.store(true, Ordering::Release);
        let seconds = self.started.elapsed().as_secs_f64();
        let mut total = LoadTally::new()?;
        for task in self.tasks {
            total.add(task.await??)?;
        }
        Ok((total, seconds))
    }
}

/// Each of `keys` asks Info `openOrders` for `user` at `per_key_per_s` requests a second, on a
/// keep-alive HTTP/1.1 connection of its own to `http_addr` (reconnecting when the server
/// closes it), accepting gzip and deflate as the exchange's Python SDK does.
pub fn open_orders(
    http_addr: std::net::SocketAddr,
    keys: &[String],
    user: &str,
    per_key_per_s: f64,
) -> LoadRun {
    let stop = Arc::new(AtomicBool::new(false));
    let body = serde_json::json!({"type": "openOrders", "user": user}).to_string();
    let tasks = keys
        .iter()
        .map(|key| {
            let (stop, key, body) = (Arc::clone(&stop), key.clone(), body.clone());
            tokio::spawn(async move {
                ask_open_orders(http_addr, &key, &body, per_key_per_s, &stop).await
            })
        })
        .collect();
    LoadRun {
        stop,
        tasks,
        ..LoadRun::none()
    }
}

async fn ask_open_orders(
    http_addr: std::net::SocketAddr,
    key: &str,
    body: &str,
    per_s: f64,
    stop: &AtomicBool,
) -> anyhow::Result<LoadTally> {
    use http_body_util::{BodyExt as _, Full};
    let mut tally = LoadTally::new()?;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / per_s));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sender = None;
    while !stop.load(Ordering::Acquire) {
        ticks.tick().await;
        if sender.is_none() {
            match connect_http1(http_addr).await {
                Ok(connected) => sender = Some(connected),
                Err(error) => {
                    tally.fail(format!("connect: {error:#}"));
                    continue;
                }
            }
        }
        let Some(client) = sender.as_mut() else {
            continue;
        };
        let request = hyper::Request::post("/info")
            .header("host", http_addr.to_string())
            .header("x-api-key", key)
            .header("content-type", "application/json")
            // What the exchange's Python SDK sends (its HTTP library's default).
            .header("accept-encoding", "gzip, deflate")
            .body(Full::new(bytes::Bytes::from(body.to_owned())))
            .context("openOrders request")?;
        let asked = Instant::now();
        tally.sent += 1;
        let answer = match client.send_request(request).await {
            Ok(answer) => answer,
            Err(error) => {
                tally.fail(format!("send: {error}"));
                sender = None;
                continue;
            }
        };
        let status = answer.status();
        if let Err(error) = answer.into_body().collect().await {
            tally.fail(format!("read: {error}"));
            sender = None;
            continue;
        }
        live::record(&mut tally.answer, asked.elapsed());
        match status.as_u16() {
            200 => tally.answered += 1,
            429 | 503 => tally.refused += 1,
            other => tally.fail(format!("HTTP {other}")),
        }
    }
    Ok(tally)
}

type Http1 = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

async fn connect_http1(addr: std::net::SocketAddr) -> anyhow::Result<Http1> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // Ends when the sender is dropped or the server closes.
        let _ = connection.await;
    });
    Ok(sender)
}

/// `connections` WebSocket connections to `/{key}/ws` share `per_s` `l4Book` subscribes a
/// second to `coin`: each subscribes, reads the snapshot, unsubscribes, reads the answer, and
/// waits for its next turn.
pub fn l4_subscribes(
    http_addr: std::net::SocketAddr,
    key: &str,
    coin: &str,
    per_s: f64,
    connections: usize,
) -> LoadRun {
    let stop = Arc::new(AtomicBool::new(false));
    let url = format!("ws://{http_addr}/{key}/ws");
    let each = per_s / connections.max(1) as f64;
    let tasks = (0..connections)
        .map(|place| {
            let (stop, url, coin) = (Arc::clone(&stop), url.clone(), coin.to_owned());
            // Each connection's turns are offset by its place so that the
            // subscribes arrive evenly spread over the second.
            let phase = Duration::from_secs_f64(place as f64 / per_s);
            tokio::spawn(async move { churn_l4(&url, &coin, each, phase, &stop).await })
        })
        .collect();
    LoadRun {
        stop,
        tasks,
        ..LoadRun::none()
    }
}

async fn churn_l4(
    url: &str,
    coin: &str,
    per_s: f64,
    phase: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<LoadTally> {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let mut tally = LoadTally::new()?;
    let subscription = serde_json::json!({"type": "l4Book", "coin": coin});
    let subscribe =
        serde_json::json!({"method": "subscribe", "subscription": subscription}).to_string();
    let unsubscribe =
        serde_json::json!({"method": "unsubscribe", "subscription": subscription}).to_string();
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + phase,
        Duration::from_secs_f64(1.0 / per_s),
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut socket = None;
    while !stop.load(Ordering::Acquire) {
        ticks.tick().await;
        if socket.is_none() {
            match tokio_tungstenite::connect_async(url).await {
                Ok((connected, _)) => socket = Some(connected),
                Err(error) => {
                    tally.fail(format!("connect: {error}"));
                    continue;
                }
            }
        }
        let Some(ws) = socket.as_mut() else {
            continue;
        };
        let asked = Instant::now();
        tally.sent += 1;
        if ws
            .send(Message::Text(subscribe.clone().into()))
            .await
            .is_err()
        {
            tally.fail("subscribe: the connection closed".into());
            socket = None;
            continue;
        }
        // The subscription's echo, then its snapshot (or an error); then the unsubscribe's
        // echo. Updates that arrive in between are read and passed over.
        let mut outcome = None;
        let mut unsubscribed = false;
        while !unsubscribed {
            let Some(message) = ws.next().await else {
                outcome.get_or_insert(Err("the connection ended".to_owned()));
                break;
            };
            let text = match message {
                Ok(Message::Text(text)) => text,
                Ok(Message::Close(frame)) => {
                    let why =
                        frame.map_or_else(|| "closed".to_owned(), |f| format!("closed {}", f.code));
                    outcome.get_or_insert(Err(why));
                    break;
                }
                Ok(_) => continue,
                Err(error) => {
                    outcome.get_or_insert(Err(error.to_string()));
                    break;
                }
            };
            if outcome.is_none() {
                if text.contains("\"channel\":\"error\"") {
                    outcome = Some(Ok(false));
                } else if text.contains("\"Snapshot\"") {
                    live::record(&mut tally.answer, asked.elapsed());
                    outcome = Some(Ok(true));
                } else {
                    continue;
                }
                if ws
                    .send(Message::Text(unsubscribe.clone().into()))
                    .await
                    .is_err()
                {
                    outcome = Some(Err("unsubscribe: the connection closed".to_owned()));
                    break;
                }
            } else if text.contains("\"unsubscribe\"") || text.contains("\"channel\":\"error\"") {
                unsubscribed = true;
            }
        }
        match outcome {
            Some(Ok(true)) => tally.answered += 1,
            Some(Ok(false)) => tally.refused += 1,
            Some(Err(why)) => {
                tally.fail(why);
                socket = None;
            }
            None => {}
        }
        if !unsubscribed {
            socket = None;
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_reads_back_as_its_child_printed_it() {
        let mut tally = LoadTally::new().unwrap();
        tally.sent = 10;
        tally.answered = 7;
        tally.refused = 2;
        tally.fail("HTTP 500".into());
        for us in [120, 450, 9_000, 31_000] {
            live::record(&mut tally.answer, Duration::from_micros(us));
        }
        let printed = tally.to_json(15.5).unwrap().to_string();
        let (back, seconds) =
            LoadTally::from_json(&serde_json::from_str(&printed).unwrap()).unwrap();
        assert!((seconds - 15.5).abs() < 1e-9);
        assert_eq!(
            (back.sent, back.answered, back.refused, back.failed),
            (10, 7, 2, 1)
        );
        assert_eq!(back.failure.as_deref(), Some("HTTP 500"));
        assert_eq!(back.answer, tally.answer);
        let broken = serde_json::json!({"sent": 1, "answered": 1, "refused": 0, "failed": 0, "seconds": 1.0, "answer": "zz"});
        assert!(LoadTally::from_json(&broken).is_err());
    }
}
