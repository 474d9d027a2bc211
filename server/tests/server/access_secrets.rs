//! No key material in any log line: every `tracing` event of the test
//! process (debug level and above, every crate) is captured while
//! authenticated, rejected, rate-limited and forbidden traffic goes over both
//! edges, and neither the keys nor their hashes may appear.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use access::keys::{KeysFile, hash_key};
use proto::{ListFeedsRequest, StreamRequest};
use tracing_subscriber::fmt::MakeWriter;

use super::access_support::Gate;
use super::harness::with_key;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The process-wide capture, installed once.
fn captured() -> &'static Captured {
    static CAPTURE: OnceLock<Captured> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Captured::default();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_writer(capture.clone())
            .with_ansi(false)
            .with_target(true)
            .init();
        capture
    })
}

#[tokio::test]
async fn no_key_or_key_hash_appears_in_any_log_line() {
    let capture = captured();
    let mut keys = KeysFile::default();
    let (good, _) = keys.add_key("alice", 0).unwrap();
    let (fenced, fenced_key) = keys.add_key("alice", 0).unwrap();
    let (revoked, revoked_key) = keys.add_key("bob", 0).unwrap();
    let (slow, _) = keys.add_key("carol", 0).unwrap();
    keys.allow(&fenced_key.id, "10.0.0.0/8").unwrap();
    keys.revoke(&revoked_key.id).unwrap();
    keys.accounts[2].requests_per_second = Some(1);
    keys.accounts[2].request_burst = Some(1);
    let unknown = access::keys::generate_key();
    let gate = Gate::start(keys, |_| {}).await;

    let mut statuses = Vec::new();
    for key in [&good, &fenced, &revoked, &unknown, &slow, &slow] {
        statuses.push(gate.get(&format!("/{key}/v1/feeds"), None).await.status);
        statuses.push(gate.get("/v1/feeds", Some(key)).await.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 403, 403, 401, 401, 401, 401, 200, 429, 429, 429]
    );

    let mut client = gate.client().await;
    for key in [&good, &fenced, &revoked, &unknown, &slow] {
        let _ = client.list_feeds(with_key(ListFeedsRequest {}, key)).await;
        if let Ok(response) = client
            .stream_blocks(with_key(StreamRequest::default(), key))
            .await
        {
            let mut stream = response.into_inner();
            let _ = tokio::time::timeout(Duration::from_millis(100), stream.message()).await;
        }
    }
    // Let the server's tasks log whatever they log about those calls.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(client);
    drop(gate);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let text = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    assert!(
        text.contains("request refused") && text.contains("serving"),
        "the capture must have seen the server's own debug lines:\n{text}"
    );
    for key in [&good, &fenced, &revoked, &unknown, &slow] {
        let hex = key.trim_start_matches(access::keys::KEY_PREFIX);
        for secret in [key.as_str(), hex, &hash_key(key)] {
            assert!(!text.contains(secret), "key material in the logs");
        }
    }
}
