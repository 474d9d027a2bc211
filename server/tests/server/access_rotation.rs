//! Key rotation on a real server: the old key keeps working during its
//! grace period on every edge, and once the grace ends — with no change to
//! the keys file, judged by the access clock — it is refused with a message
//! saying it was rotated (not that it is unknown), its open gRPC stream ends
//! and its open WebSocket connection is closed with 1008; the new key works
//! throughout.

use std::time::{Duration, Instant};

use access::clock::Clock;
use access::keys::KeysFile;
use futures_util::StreamExt as _;
use proto::{ListFeedsRequest, StreamRequest};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{self, Message};
use tonic::Code;

use super::access_support::{Gate, sample};
use super::harness::{end_status, from_block, next, with_key};

const WAIT: Duration = Duration::from_secs(30);
/// The sweeper looks a few times a second.
const BOUND: Duration = Duration::from_secs(3);

/// A client WebSocket.
pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the exchange's WebSocket API (`/ws`) with `key` in `X-Api-Key`;
/// the refusal's HTTP status and body on failure.
pub async fn ws_connect(gate: &Gate, key: &str) -> Result<Socket, (u16, String)> {
    let mut request = format!("ws://{}/ws", gate.running.http_addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("x-api-key", key.parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            Err((status, body))
        }
        Err(error) => panic!("connecting: {error}"),
    }
}

/// Reads `socket` until the server closes it: the close code and reason,
/// and the text messages before it.
pub async fn ws_closed(socket: &mut Socket) -> ((u16, String), Vec<String>) {
    let mut texts = Vec::new();
    loop {
        let message = tokio::time::timeout(WAIT, socket.next())
            .await
            .expect("the connection is closed within the wait");
        match message {
            Some(Ok(Message::Text(text))) => texts.push(text.to_string()),
            Some(Ok(Message::Close(frame))) => {
                let closed = frame.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                });
                return (closed, texts);
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => return ((1006, error.to_string()), texts),
            None => return ((1006, "ended".into()), texts),
        }
    }
}

/// 2026-05-05T12:00:00Z, Unix ms.
pub fn noon() -> i64 {
    feeds::time::parse_iso8601_ms("2026-05-05T12:00:00Z").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_works_until_its_grace_ends_then_is_refused_and_its_streams_end() {
    let clock = Clock::manual(noon());
    let mut keys = KeysFile::default();
    let (old_key, old) = keys.add_key("alice", 0).unwrap();
    let (new_key, new) = keys.rotate(&old.id, noon(), 3_600_000).unwrap();
    let gate = Gate::start_with_clock(keys, clock.clone(), |args| {
        args.idle_timeout_ms = Some(600_000);
    })
    .await;
    let mut client = gate.client().await;

    // During the grace period both keys work on every edge.
    for key in [&old_key, &new_key] {
        assert_eq!(gate.get("/v1/feeds", Some(key)).await.status, 200);
        client
            .list_feeds(with_key(ListFeedsRequest {}, key))
            .await
            .unwrap();
    }
    let mut stream = client
        .stream_order_statuses(with_key(from_block(1), &old_key))
        .await
        .unwrap()
        .into_inner();
    next(&mut stream, WAIT).await.unwrap();
    // A quiet stream too: the live tail of a capture nobody writes to.
    let mut quiet = client
        .stream_fills(with_key(StreamRequest::default(), &old_key))
        .await
        .unwrap()
        .into_inner();
    let mut socket = ws_connect(&gate, &old_key).await.unwrap();
    let mut bystander = client
        .stream_fills(with_key(StreamRequest::default(), &new_key))
        .await
        .unwrap()
        .into_inner();

    // The grace period ends: nothing in the keys file changes.
    clock.advance(Duration::from_secs(3_600));
    let ended_at = Instant::now();
    let rotated = |message: &str| {
        message.contains(&format!(
            "API key {} was rotated at 2026-05-05T12:00:00Z",
            old.id
        )) && message.contains(&format!("(replaced by {})", new.id))
            && message.contains("its grace period ended at 2026-05-05T13:00:00Z")
            && !message.contains("unknown")
            && !message.contains(&old_key)
    };
    for (what, stream_status) in [
        ("streaming", end_status(&mut stream, WAIT).await),
        ("quiet", end_status(&mut quiet, WAIT).await),
    ] {
        assert_eq!(
            stream_status.code(),
            Code::Unauthenticated,
            "{what}: {stream_status:?}"
        );
        assert!(
            rotated(stream_status.message()),
            "{what}: {}",
            stream_status.message()
        );
        assert!(
            ended_at.elapsed() <= BOUND,
            "{what}: ended {:?} after the grace end",
            ended_at.elapsed()
        );
    }
    let ((code, reason), texts) = ws_closed(&mut socket).await;
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("was rotated"), "{reason}");
    assert!(
        texts.iter().any(|text| rotated(text)),
        "the full reason is sent first: {texts:?}"
    );

    // New requests with the old key: 401 / UNAUTHENTICATED, saying so.
    let refused = gate.get("/v1/feeds", Some(&old_key)).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    let body = refused.json();
    assert_eq!(body["error"], "rotated_key");
    assert!(rotated(body["message"].as_str().unwrap()), "{body}");
    let status = client
        .list_feeds(with_key(ListFeedsRequest {}, &old_key))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(rotated(status.message()), "{}", status.message());
    let refused_ws = ws_connect(&gate, &old_key).await.err().unwrap();
    assert_eq!(refused_ws.0, 401, "{refused_ws:?}");

    // The new key and its stream carry on.
    assert_eq!(gate.get("/v1/feeds", Some(&new_key)).await.status, 200);
    client
        .list_feeds(with_key(ListFeedsRequest {}, &new_key))
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), bystander.message())
            .await
            .is_err(),
        "the new key's stream is still open"
    );
    let metrics = gate.metrics().await;
    assert!(
        sample(
            &metrics,
            "l1gate_access_rejections_total{edge=\"http\",reason=\"rotated_key\"}"
        ) >= 1,
        "{metrics}"
    );
    assert!(
        metrics.contains("reason=\"rotated\""),
        "stream ends are counted:\n{metrics}"
    );
    assert!(gate.running.usage.report().pending_rotations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_made_while_serving_is_picked_up_and_listed_as_pending() {
    let clock = Clock::manual(noon());
    let mut keys = KeysFile::default();
    let (old_key, old) = keys.add_key("alice", 0).unwrap();
    let mut gate = Gate::start_with_clock(keys, clock.clone(), |_| {}).await;
    let mut new_key = String::new();
    std::thread::sleep(Duration::from_millis(20));
    gate.edit_keys(|file| {
        new_key = file.rotate(&old.id, noon(), 60_000).unwrap().0;
    });
    // Reloaded within the reload interval: the new key works, the old one
    // too, and the rotation is reported as pending.
    super::access_support::eventually(BOUND, "the new key is loaded", || {
        let gate = &gate;
        let key = new_key.clone();
        async move { gate.get("/v1/feeds", Some(&key)).await.status == 200 }
    })
    .await;
    assert_eq!(gate.get("/v1/feeds", Some(&old_key)).await.status, 200);
    let report = gate.running.usage.report();
    assert_eq!(report.pending_rotations.len(), 1, "{report:?}");
    assert_eq!(report.pending_rotations[0].key_id, old.id);
    assert_eq!(
        report.pending_rotations[0].rotation.grace_until_ms,
        noon() + 60_000
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(gate.get("/v1/feeds", Some(&old_key)).await.status, 401);
    assert_eq!(gate.get("/v1/feeds", Some(&new_key)).await.status, 200);
}
