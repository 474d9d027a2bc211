//! The exchange's WebSocket API on the HTTP address: keys and limits before
//! the upgrade, the protocol's answers and every refusal (the connection
//! stays up), the per-connection limits, revocation and a reader that stops
//! reading.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{self, Message};

use super::harness::TestServer;
use super::market_live::{live_node, ready};

const WAIT: Duration = Duration::from_secs(30);

/// A client socket.
pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects to `path` on the server's HTTP address, with `header_key` in
/// `X-Api-Key` when given; the refusal's HTTP status on failure.
pub async fn try_connect(
    server: &TestServer,
    path: &str,
    header_key: Option<&str>,
) -> Result<Socket, u16> {
    let mut request = format!("ws://{}{path}", server.running.http_addr)
        .into_client_request()
        .unwrap();
    if let Some(key) = header_key {
        request
            .headers_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(error) => panic!("connecting to {path}: {error}"),
    }
}

/// A connection in the path form `/{key}/ws`.
pub async fn connect(server: &TestServer) -> Socket {
    try_connect(server, &format!("/{}/ws", server.key), None)
        .await
        .unwrap()
}

pub async fn send(socket: &mut Socket, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

/// The next message, parsed; `Err` with the close code and reason when the
/// server closed the connection instead.
pub async fn recv(socket: &mut Socket) -> Result<Value, (u16, String)> {
    loop {
        let message = tokio::time::timeout(WAIT, socket.next())
            .await
            .expect("a message within the wait");
        match message {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => {
                return Err(frame.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                }));
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => return Err((1006, error.to_string())),
            None => return Err((1006, "ended".into())),
        }
    }
}

/// The next message on `channel`, skipping others.
pub async fn on_channel(socket: &mut Socket, channel: &str) -> Value {
    loop {
        let message = recv(socket).await.unwrap();
        if message["channel"] == channel {
            return message;
        }
    }
}

/// The data of the next `error` message.
async fn error(socket: &mut Socket) -> String {
    on_channel(socket, "error").await["data"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn subscribe(subscription: Value) -> Value {
    json!({ "method": "subscribe", "subscription": subscription })
}

fn user(n: usize) -> String {
    format!("0x{n:040x}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_checked_before_the_upgrade_in_both_forms() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    assert_eq!(try_connect(&server, "/ws", None).await.err(), Some(401));
    assert_eq!(
        try_connect(&server, "/not-a-key/ws", None).await.err(),
        Some(401)
    );
    assert_eq!(
        try_connect(&server, "/ws", Some("wrong")).await.err(),
        Some(401)
    );
    // Path form with and without /ws, and the header form.
    for (path, header) in [
        (format!("/{}/ws", server.key), None),
        (format!("/{}", server.key), None),
        ("/ws".to_owned(), Some(server.key.as_str())),
    ] {
        let mut socket = try_connect(&server, &path, header).await.unwrap();
        send(&mut socket, json!({"method":"ping"})).await;
        assert_eq!(recv(&mut socket).await.unwrap(), json!({"channel":"pong"}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_counts_against_the_stream_cap() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |args| args.max_streams = Some(2)).await;
    ready(&server).await;
    let _first = connect(&server).await;
    let _second = connect(&server).await;
    assert_eq!(
        try_connect(&server, &format!("/{}/ws", server.key), None)
            .await
            .err(),
        Some(429)
    );
    drop(_first);
    // The slot comes back once the server saw the connection go.
    let mut admitted = false;
    for _ in 0..100 {
        if try_connect(&server, &format!("/{}/ws", server.key), None)
            .await
            .is_ok()
        {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(admitted, "a closed connection gives its stream slot back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_names_the_problem_and_the_connection_stays_up() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut socket = connect(&server).await;

    socket.send(Message::Text("not json".into())).await.unwrap();
    assert!(error(&mut socket).await.contains("Error parsing JSON"));
    send(&mut socket, json!({"method":"dance"})).await;
    assert!(
        error(&mut socket)
            .await
            .contains("method: unknown method \"dance\"")
    );
    send(
        &mut socket,
        subscribe(json!({"type":"l3Book","coin":"BTC"})),
    )
    .await;
    assert!(
        error(&mut socket)
            .await
            .contains("type: unknown subscription type \"l3Book\"")
    );
    send(&mut socket, subscribe(json!({"type":"trades"}))).await;
    assert!(error(&mut socket).await.contains("coin: required"));
    send(
        &mut socket,
        subscribe(json!({"type":"trades","coin":"NOPE"})),
    )
    .await;
    let unknown = error(&mut socket).await;
    assert!(unknown.contains("unknown coin \"NOPE\""), "{unknown}");
    send(
        &mut socket,
        subscribe(json!({"type":"l2Book","coin":"BTC","nSigFigs":9})),
    )
    .await;
    assert!(error(&mut socket).await.contains("nSigFigs"));

    // Subscribe, the acknowledgement echoing the message, then a repeat.
    let trades = subscribe(json!({"type":"trades","coin":"BTC"}));
    send(&mut socket, trades.clone()).await;
    let ack = on_channel(&mut socket, "subscriptionResponse").await;
    assert_eq!(ack["data"], trades);
    send(&mut socket, trades.clone()).await;
    assert!(error(&mut socket).await.starts_with("Already subscribed"));
    // Unsubscribing what is not subscribed, then what is.
    send(
        &mut socket,
        json!({"method":"unsubscribe","subscription":{"type":"bbo","coin":"ETH"}}),
    )
    .await;
    assert!(error(&mut socket).await.starts_with("Already unsubscribed"));
    let unsubscribe = json!({"method":"unsubscribe","subscription":{"type":"trades","coin":"BTC"}});
    send(&mut socket, unsubscribe.clone()).await;
    assert_eq!(
        on_channel(&mut socket, "subscriptionResponse").await["data"],
        unsubscribe
    );

    // Ten distinct users at most; the same user again is fine.
    for n in 0..10 {
        send(
            &mut socket,
            subscribe(json!({"type":"userFills","user":user(n)})),
        )
        .await;
        on_channel(&mut socket, "subscriptionResponse").await;
    }
    send(
        &mut socket,
        subscribe(json!({"type":"userEvents","user":user(3)})),
    )
    .await;
    on_channel(&mut socket, "subscriptionResponse").await;
    send(
        &mut socket,
        subscribe(json!({"type":"userFills","user":user(10)})),
    )
    .await;
    assert_eq!(
        error(&mut socket).await,
        "Cannot track more than 10 total users."
    );

    // Posts: Info answered on the socket under the id; actions refused.
    send(
        &mut socket,
        json!({"method":"post","id":7,"request":{"type":"info","payload":{"type":"meta"}}}),
    )
    .await;
    let answer = on_channel(&mut socket, "post").await;
    assert_eq!(answer["data"]["id"], 7);
    assert_eq!(answer["data"]["response"]["type"], "info");
    assert_eq!(answer["data"]["response"]["payload"]["type"], "meta");
    assert!(
        answer["data"]["response"]["payload"]["data"]["universe"]
            .as_array()
            .is_some_and(|u| !u.is_empty()),
        "{answer}"
    );
    send(
        &mut socket,
        json!({"method":"post","id":8,"request":{"type":"info","payload":{"type":5}}}),
    )
    .await;
    let refused = on_channel(&mut socket, "post").await;
    assert_eq!(refused["data"]["id"], 8);
    assert_eq!(refused["data"]["response"]["type"], "error");
    assert!(
        refused["data"]["response"]["payload"]
            .as_str()
            .unwrap()
            .contains("type: must be a string"),
        "{refused}"
    );
    send(
        &mut socket,
        json!({"method":"post","id":9,"request":{"type":"action","payload":{}}}),
    )
    .await;
    let action = on_channel(&mut socket, "post").await;
    assert_eq!(action["data"]["response"]["type"], "error");

    // Still up after all of it.
    send(&mut socket, json!({"method":"ping"})).await;
    assert_eq!(
        on_channel(&mut socket, "pong").await,
        json!({"channel":"pong"})
    );

    // An oversize message closes the connection with 1009.
    let huge = "x".repeat(100 * 1024);
    socket
        .send(Message::Text(
            json!({"method":"ping","pad":huge}).to_string().into(),
        ))
        .await
        .unwrap();
    let closed = loop {
        match recv(&mut socket).await {
            Ok(_) => {}
            Err(closed) => break closed,
        }
    };
    assert_eq!(closed.0, 1009, "{closed:?}");
}

/// The JSON an SDK finds in an error message: from its first `{` to its
/// last `}`, parsed.
fn echoed(error: &str) -> Value {
    let (Some(from), Some(to)) = (error.find('{'), error.rfind('}')) else {
        panic!("no echo in {error:?}");
    };
    serde_json::from_str(&error[from..=to]).unwrap_or_else(|e| panic!("{error:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_echo_the_subscription_whole_so_sdks_can_match_them() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut socket = connect(&server).await;
    let address = format!("0x{}", "AbCdEf0123".repeat(4));
    // Long enough to have been cut at 64 characters before.
    let subscriptions = [
        json!({"type":"userFills","user":address,"aggregateByTime":false}),
        json!({"type":"l2Book","coin":"BTC","nSigFigs":null,"mantissa":null}),
    ];
    for subscription in &subscriptions {
        send(&mut socket, subscribe(subscription.clone())).await;
        on_channel(&mut socket, "subscriptionResponse").await;
        send(&mut socket, subscribe(subscription.clone())).await;
        let again = error(&mut socket).await;
        assert!(again.starts_with("Already subscribed: "), "{again}");
        assert_eq!(&echoed(&again), subscription, "{again}");
    }
    let not_held = json!({"type":"l2Book","coin":"ETH","nSigFigs":null,"mantissa":null});
    send(
        &mut socket,
        json!({"method":"unsubscribe","subscription":not_held}),
    )
    .await;
    let unsubscribed = error(&mut socket).await;
    assert!(
        unsubscribed.starts_with("Already unsubscribed: "),
        "{unsubscribed}"
    );
    assert_eq!(echoed(&unsubscribed), not_held);
    // Refused by the parser, by the engine, and for a coin no view knows:
    // the echo is whole and the reason follows it.
    for (subscription, reason) in [
        (
            json!({"type":"userFills","user":format!("{address}0"),"aggregateByTime":true}),
            "is not an address",
        ),
        (
            json!({"type":"l2Book","coin":"BTC","nSigFigs":9,"mantissa":null}),
            "nSigFigs",
        ),
        (
            json!({"type":"candle","coin":"NOPE","interval":"1m"}),
            "unknown coin \"NOPE\"",
        ),
        (json!({"type":"bbo","coin":"NOPE"}), "unknown coin \"NOPE\""),
    ] {
        send(&mut socket, subscribe(subscription.clone())).await;
        let refused = error(&mut socket).await;
        assert!(refused.starts_with("Invalid subscription "), "{refused}");
        assert_eq!(echoed(&refused), subscription, "{refused}");
        assert!(refused.contains(reason), "{refused}");
    }
    // A post whose id was read is answered under it, as HTTP would have
    // refused it: the status and its description, then the reason.
    send(
        &mut socket,
        json!({"method":"post","id":11,"request":{"payload":{"type":"meta"}}}),
    )
    .await;
    let refused = on_channel(&mut socket, "post").await;
    assert_eq!(refused["data"]["id"], 11);
    assert_eq!(refused["data"]["response"]["type"], "error");
    assert_eq!(
        refused["data"]["response"]["payload"],
        "400 Bad Request: request.type: required (info or action)"
    );
    send(
        &mut socket,
        json!({"method":"post","id":12,"request":{"type":"info","payload":{"type":"l2Book"}}}),
    )
    .await;
    let refused = on_channel(&mut socket, "post").await;
    assert_eq!(refused["data"]["id"], 12);
    let payload = refused["data"]["response"]["payload"].as_str().unwrap();
    assert!(
        payload.starts_with("400 Bad Request: ") && payload.contains("coin"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flooding_refused_messages_is_closed_and_its_neighbour_served() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |args| {
        args.max_streams = Some(4);
    })
    .await;
    ready(&server).await;
    let mut flood = connect(&server).await;
    let mut neighbour = connect(&server).await;
    // The flood: invalid JSON, far past the bound of refusals a minute.
    for _ in 0..500 {
        if flood.send(Message::Text("{not json".into())).await.is_err() {
            break;
        }
    }
    let mut errors = 0;
    let closed = loop {
        match recv(&mut flood).await {
            Ok(message) => {
                assert_eq!(message["channel"], "error", "{message}");
                errors += 1;
            }
            Err(closed) => break closed,
        }
    };
    assert_eq!(closed.0, 4004, "{closed:?}");
    assert!(closed.1.contains("too many refused messages"), "{closed:?}");
    // Every refusal up to the bound was answered, and no more than that.
    assert_eq!(
        errors, 51,
        "50 a minute, all at once at most, then the one that closed it"
    );
    // The neighbour's subscribes are all served.
    for levels in 1..=100 {
        send(
            &mut neighbour,
            subscribe(json!({"type":"l2Book","coin":"BTC","nLevels":levels})),
        )
        .await;
    }
    let mut acknowledged = 0;
    while acknowledged < 100 {
        let message = recv(&mut neighbour).await.unwrap();
        assert_ne!(message["channel"], "error", "{message}");
        if message["channel"] == "subscriptionResponse" {
            acknowledged += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_messages_a_minute_are_refused() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut socket = connect(&server).await;
    for _ in 0..2_001 {
        send(&mut socket, json!({"method":"ping"})).await;
    }
    let mut pongs = 0;
    loop {
        let message = recv(&mut socket).await.unwrap();
        if message["channel"] == "pong" {
            pongs += 1;
        } else {
            assert_eq!(message["channel"], "error");
            assert!(
                message["data"]
                    .as_str()
                    .unwrap()
                    .contains("2000 per minute"),
                "{message}"
            );
            break;
        }
    }
    assert_eq!(pongs, 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_key_closes_its_connections_with_1008() {
    let node = live_node(6_000, 50, Duration::from_millis(20));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let id = super::revocation::key_id(&server, &server.key);
    let mut socket = connect(&server).await;
    send(&mut socket, subscribe(json!({"type":"bbo","coin":"BTC"}))).await;
    on_channel(&mut socket, "bbo").await;
    super::revocation::edit_keys(&server, |file| file.revoke(&id).unwrap());
    let closed = loop {
        match recv(&mut socket).await {
            Ok(_) => {}
            Err(closed) => break closed,
        }
    };
    assert_eq!(closed.0, 1008, "{closed:?}");
    assert!(closed.1.contains("revoked"), "{closed:?}");
    assert!(!closed.1.contains(&server.key), "the key is never echoed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stops_reading_is_closed() {
    let node = live_node(6_000, 50, Duration::from_millis(5));
    let server = TestServer::start(node.dir.path(), |args| {
        args.send_timeout_ms = Some(1_000);
        args.market_max_lag_ms = Some(500);
    })
    .await;
    ready(&server).await;
    let mut socket = connect(&server).await;
    // The fills of every block, as userEvents of the busiest accounts,
    // and trades: incremental channels, which end the connection on lag.
    for coin in ["BTC", "ETH"] {
        send(&mut socket, subscribe(json!({"type":"trades","coin":coin}))).await;
        send(&mut socket, subscribe(json!({"type":"l4Book","coin":coin}))).await;
    }
    on_channel(&mut socket, "l4Book").await;
    // Stop reading: what the server sends piles up in the socket's buffers
    // and then in the views' rings, until the server ends the connection.
    let started = std::time::Instant::now();
    loop {
        let metrics = super::slow_subscribers::metrics(&server).await;
        if metrics.lines().any(|line| {
            line.starts_with("l1gate_streams_ended_total")
                && line.contains("service=\"websocket\"")
                && (line.contains("reason=\"lag\"") || line.contains("reason=\"stall\""))
        }) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server never ended the connection:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The connection ends after what the buffers held.
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            if recv(&mut socket).await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the socket was not closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_but_never_reads_is_closed() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |args| {
        args.send_timeout_ms = Some(1_000);
    })
    .await;
    ready(&server).await;
    let mut socket = connect(&server).await;
    // Requests, each answered with the busiest account's open orders (a
    // large answer), never read, within the connection's message budget
    // (so none is refused): the answers fill the connection's queue and
    // buffers, then the server stops reading and closes it.
    let user = super::market_views::actors(node.dir.path()).user;
    let request = json!({"method":"post","id":1,"request":{"type":"info",
        "payload":{"type":"frontendOpenOrders","user":user}}})
    .to_string();
    let started = std::time::Instant::now();
    for _ in 0..1_990 {
        let sent = tokio::time::timeout(
            Duration::from_secs(2),
            socket.send(Message::Text(request.clone().into())),
        )
        .await;
        if !matches!(sent, Ok(Ok(()))) || started.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let mut ended = false;
    for _ in 0..150 {
        let metrics = super::slow_subscribers::metrics(&server).await;
        if metrics.lines().any(|line| {
            line.starts_with("l1gate_streams_ended_total")
                && line.contains("service=\"websocket\"")
                && line.contains("view=\"connection\"")
                && line.contains("reason=\"stall\"")
        }) {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ended, "the server never closed the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_outside_the_allow_list_is_refused_before_the_upgrade() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let id = super::revocation::key_id(&server, &server.key);
    super::revocation::edit_keys(&server, |file| {
        file.allow(&id, "10.0.0.0/8").unwrap();
    });
    // The keys file is re-read every second.
    let mut status = None;
    for _ in 0..50 {
        status = try_connect(&server, &format!("/{}/ws", server.key), None)
            .await
            .err();
        if status == Some(403) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, Some(403));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_at_most_1000_subscriptions() {
    let node = live_node(30, 30, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut socket = connect(&server).await;
    // 1,000 distinct subscriptions: the mids of 1,000 (empty) exchanges.
    for n in 0..1_000 {
        send(
            &mut socket,
            subscribe(json!({"type":"allMids","dex":format!("d{n}")})),
        )
        .await;
    }
    let mut acks = 0;
    while acks < 1_000 {
        let message = recv(&mut socket).await.unwrap();
        assert_ne!(message["channel"], "error", "{message}");
        if message["channel"] == "subscriptionResponse" {
            acks += 1;
        }
    }
    send(
        &mut socket,
        subscribe(json!({"type":"trades","coin":"BTC"})),
    )
    .await;
    assert!(
        error(&mut socket)
            .await
            .contains("at most 1000 subscriptions"),
    );
    // Unsubscribing one makes room again.
    send(
        &mut socket,
        json!({"method":"unsubscribe","subscription":{"type":"allMids","dex":"d7"}}),
    )
    .await;
    on_channel(&mut socket, "subscriptionResponse").await;
    send(
        &mut socket,
        subscribe(json!({"type":"trades","coin":"BTC"})),
    )
    .await;
    let ack = on_channel(&mut socket, "subscriptionResponse").await;
    assert_eq!(ack["data"]["subscription"]["type"], "trades");
}
