//! One WebSocket connection: the reader (client messages, in order), one
//! task per subscription relaying its view's ring, and the writer, joined
//! by a bounded outbox.
//!
//! Backpressure: subscription tasks hand messages to the outbox and wait
//! when it is full, so a connection that does not read leaves its
//! subscriptions' frames in their views' rings, where the stream
//! supervisor ([`edge::flow`]) sees them age: a snapshot channel
//! skips to the newest state, an incremental channel ends the connection
//! (close code 4001), and a connection that takes nothing for
//! `send_timeout_ms` is ended (4002). See [`crate::ws`] for every close
//! code.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

use super::protocol::{self, ClientMessage, Subscription};
use super::render;
use crate::grpc::relay::RelaySource;
use crate::info::{InfoFeed, InfoLookup};
use crate::views::channel;
use access::Access;
use access::gcra::Gcra;
use access::keys::Principal;
use edge::flow::{EndReason, Measured, Slot, Supervisor};
use edge::listen::HeldConnection;

/// What the WebSocket edge serves from.
#[derive(Debug, Clone)]
pub struct WsService {
    /// Where subscriptions subscribe.
    pub relays: RelaySource,
    /// The stream supervisor (lag, stalls, revocation).
    pub flow: Supervisor,
    /// Keys, caps and usage.
    pub access: Access,
    /// The Info source's poller (`activeAssetCtx`), if any.
    pub info: Option<InfoFeed>,
    /// The Info lookup answering `post`.
    pub lookup: InfoLookup,
    /// Per-connection limits.
    pub limits: Limits,
    /// Cancelled when the server stops: every connection is closed with
    /// 1001 (going away).
    pub shutdown: CancellationToken,
}

/// Refused client messages (invalid, over a limit, refused subscriptions)
/// a connection may send in a minute, all at once at most: past it the
/// connection is closed ([`close::REFUSED`]), so that a client flooding
/// bad messages costs the server a bounded amount of work.
pub const REFUSALS_PER_MINUTE: u32 = 50;

/// Messages waiting for the socket, per connection.
const OUTBOX: usize = 256;
/// How long a closing connection waits to hand its close frame over.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Close codes (see [`crate::ws`]).
pub mod close {
    /// The server is shutting down (a restart, say): reconnect.
    pub const GOING_AWAY: u16 = 1001;
    /// The key was revoked or its allow-list no longer admits the source.
    pub const POLICY: u16 = 1008;
    /// A client message over the size limit.
    pub const TOO_BIG: u16 = 1009;
    /// The market engine stopped.
    pub const INTERNAL: u16 = 1011;
    /// Market data is stale (or the engine is not ready): reconnect later.
    pub const TRY_AGAIN_LATER: u16 = 1013;
    /// An incremental subscription fell too far behind.
    pub const LAGGING: u16 = 4001;
    /// The connection took nothing for `send_timeout_ms`.
    pub const STALLED: u16 = 4002;
    /// The key's byte quota for the period is used up.
    pub const QUOTA: u16 = 4003;
    /// The connection sent more refused messages than
    /// [`super::REFUSALS_PER_MINUTE`] in a minute.
    pub const REFUSED: u16 = 4004;
    /// The connection answered nothing — no Pong, no message — within
    /// [`super::Limits::keepalive`] of a Ping sent after as long a silence.
    pub const UNRESPONSIVE: u16 = 4005;
}

/// The per-connection limits the exchange documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Subscriptions one connection may hold.
    pub subscriptions: usize,
    /// Distinct users across one connection's user subscriptions.
    pub users: usize,
    /// Client messages per minute.
    pub messages_per_minute: u32,
    /// Posts waiting for their answer at once.
    pub inflight_posts: usize,
    /// Largest client message, bytes.
    pub max_message_bytes: usize,
    /// A connection that sent nothing this long is sent a Ping, and closed
    /// when it answers nothing within as long again: a stopped client
    /// process whose kernel still takes bytes answers no Ping.
    pub keepalive: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            subscriptions: 1_000,
            users: 10,
            messages_per_minute: 2_000,
            inflight_posts: 100,
            max_message_bytes: 64 * 1024,
            keepalive: std::time::Duration::from_secs(10),
        }
    }
}

/// What the writer sends.
enum Outgoing {
    Text(Utf8Bytes),
    Ping,
    Close(u16, String),
}

/// Why a subscription task stopped.
struct Ended {
    status: Status,
}

/// One open subscription.
struct Open {
    task: JoinHandle<()>,
    slot: Option<Arc<Slot>>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(slot) = &self.slot {
            slot.finish();
        }
    }
}

/// The client's messages a minute: the access layer's GCRA, `per_minute`
/// at most in any minute, all of them at once at most.
struct Budget {
    limit: Gcra,
    epoch: Instant,
    tat: Duration,
}

impl Budget {
    fn new(per_minute: u32) -> Self {
        Self {
            limit: Gcra::per(per_minute, Duration::from_secs(60)),
            epoch: Instant::now(),
            tat: Duration::ZERO,
        }
    }

    fn take(&mut self) -> bool {
        self.limit
            .check(&mut self.tat, self.epoch.elapsed())
            .is_ok()
    }
}

/// Why a connection is closed (1001) when the server stops.
pub const SHUTTING_DOWN: &str =
    "the server is shutting down (a restart, say): reconnect in a few seconds";

/// Serves one upgraded connection until either side ends it: `connection`
/// is its slot in the stream supervisor, holding the account's stream slot.
pub async fn run(
    socket: WebSocket,
    service: WsService,
    principal: Principal,
    connection: Arc<Slot>,
    held: Option<HeldConnection>,
) {
    let (mut sink, mut incoming) = socket.split();
    let (out, mut outbox) = mpsc::channel::<Outgoing>(OUTBOX);
    // The writer hands over everything queued, then flushes once: the
    // frames of a block's many subscriptions leave in few writes.
    let writer = {
        let connection = Arc::clone(&connection);
        tokio::spawn(async move {
            while let Some(mut message) = outbox.recv().await {
                loop {
                    match message {
                        Outgoing::Text(text) => {
                            let bytes = text.len();
                            if let Err(error) = sink.feed(Message::Text(text)).await {
                                tracing::debug!(%error, "WebSocket connection: write failed");
                                return;
                            }
                            connection.took(Measured {
                                bytes,
                                ..Measured::default()
                            });
                        }
                        Outgoing::Ping => {
                            if sink.feed(Message::Ping(bytes::Bytes::new())).await.is_err() {
                                return;
                            }
                        }
                        Outgoing::Close(code, reason) => {
                            let frame = CloseFrame {
                                code,
                                reason: Utf8Bytes::from(close_reason(&reason)),
                            };
                            let _ = sink.send(Message::Close(Some(frame))).await;
                            return;
                        }
                    }
                    match outbox.try_recv() {
                        Ok(next) => message = next,
                        Err(_) => break,
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
        })
    };
    let (ends, mut ended) = mpsc::unbounded_channel::<Ended>();
    let send_timeout = service.flow.settings().send_timeout;
    let shutdown = service.shutdown.clone();
    let going_away = || (close::GOING_AWAY, SHUTTING_DOWN.to_owned());
    let budget = Budget::new(service.limits.messages_per_minute);
    let mut session = Session {
        service,
        out,
        ends,
        principal,
        open: BTreeMap::new(),
        budget,
        posts: Arc::new(AtomicUsize::new(0)),
        send_timeout,
        stalled: false,
        retry: None,
        refusals: Budget::new(REFUSALS_PER_MINUTE),
    };
    // Keepalive: when the client last sent anything, and when it was sent
    // a Ping it has not answered.
    let keepalive = session.service.limits.keepalive;
    let mut heard = tokio::time::Instant::now();
    let mut pinged: Option<tokio::time::Instant> = None;
    let closing: Option<(u16, String)> = loop {
        if session.stalled {
            let reason = format!(
                "subscriber too slow: the connection took nothing for {} ms (send_timeout_ms)",
                send_timeout.as_millis()
            );
            // Counted and logged as every stalled stream is.
            connection.end(EndReason::Stall, Status::deadline_exceeded(reason.clone()));
            break Some((close::STALLED, reason));
        }
        if let Some(retry) = session.retry.take() {
            break Some(retry);
        }
        tokio::select! {
            // Shutting down goes first: the streams it ends must not read
            // as failures of their own.
            biased;
            () = shutdown.cancelled() => {
                session.error_if_room(&going_away().1);
                break Some(going_away());
            }
            message = incoming.next() => match message.inspect(|_| {
                heard = tokio::time::Instant::now();
                pinged = None;
            }) {
                Some(Ok(Message::Text(text))) => session.on_text(text.as_str()).await,
                Some(Ok(Message::Binary(_))) => {
                    session
                        .error("binary messages are not supported: send JSON text")
                        .await;
                }
                // The library answers pings; pongs need nothing.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => break None,
                Some(Err(error)) => {
                    let text = error.to_string();
                    break if text.contains("too long") || text.contains("Space limit") {
                        Some((
                            close::TOO_BIG,
                            format!(
                                "message too big: at most {} bytes",
                                session.service.limits.max_message_bytes
                            ),
                        ))
                    } else {
                        None
                    };
                }
            },
            () = tokio::time::sleep_until(pinged.unwrap_or(heard) + keepalive) => {
                if pinged.is_some() {
                    break Some((
                        close::UNRESPONSIVE,
                        format!(
                            "no answer to a ping within {} ms (keepalive_ms): the client stopped reading",
                            keepalive.as_millis()
                        ),
                    ));
                }
                // A full outbox means the client reads nothing anyway: the
                // stall check ends it.
                let _ = session.out.try_send(Outgoing::Ping);
                pinged = Some(tokio::time::Instant::now());
            }
            Some(Ended { status }) = ended.recv() => {
                // The full reason first, for clients that read messages (if
                // there is room: the client may be the one not reading); the
                // close frame's reason has room for 123 bytes.
                session.error_if_room(status.message());
                break Some((
                    close_code(&status, session.service.engine_stopped()),
                    status.message().to_owned(),
                ));
            }
            () = connection.cancelled() => {
                let status = connection.take_status().unwrap_or_else(|| {
                    Status::unauthenticated("the connection's key is no longer admitted")
                });
                session.error_if_room(status.message());
                break Some((
                    close_code(&status, session.service.engine_stopped()),
                    status.message().to_owned(),
                ));
            }
        }
    };
    session.open.clear();
    if let Some((code, reason)) = closing {
        let _ =
            tokio::time::timeout(CLOSE_WAIT, session.out.send(Outgoing::Close(code, reason))).await;
    }
    drop(session);
    // A writer stuck on a socket that takes nothing is let go of.
    let abort = writer.abort_handle();
    if tokio::time::timeout(CLOSE_WAIT, writer).await.is_err() {
        abort.abort();
    }
    connection.finish();
    drop(held);
}

/// The close code a subscription's ending status maps to; an unavailable
/// market is the server's failure (1011) once its engine has stopped, else
/// a passing state to retry (1013).
fn close_code(status: &Status, engine_stopped: bool) -> u16 {
    match status.code() {
        Code::Aborted => close::LAGGING,
        Code::DeadlineExceeded => close::STALLED,
        Code::Unauthenticated | Code::PermissionDenied => close::POLICY,
        Code::ResourceExhausted => close::QUOTA,
        Code::Unavailable if engine_stopped => close::INTERNAL,
        Code::Unavailable => close::TRY_AGAIN_LATER,
        _ => close::INTERNAL,
    }
}

/// At most the 123 bytes a close frame's reason may hold.
fn close_reason(reason: &str) -> String {
    const MAX: usize = 123;
    if reason.len() <= MAX {
        return reason.to_owned();
    }
    let mut end = MAX - 3;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &reason[..end])
}

/// The reader's state.
struct Session {
    service: WsService,
    out: mpsc::Sender<Outgoing>,
    ends: mpsc::UnboundedSender<Ended>,
    /// Whose key the connection was opened with (subscribes and posts
    /// count toward its quota).
    principal: Principal,
    open: BTreeMap<Subscription, Open>,
    budget: Budget,
    posts: Arc<AtomicUsize>,
    /// How long an answer may wait for room in the outbox.
    send_timeout: Duration,
    /// An answer found no room for `send_timeout`: the client reads
    /// nothing, and the connection is closed.
    stalled: bool,
    /// Close the connection with this code and reason after the message
    /// being answered: a subscription refused for a reason that passes
    /// (the engine not ready, stale data: the client reconnects and
    /// subscribes again), or too many refused messages.
    retry: Option<(u16, String)>,
    /// The refused messages a minute ([`REFUSALS_PER_MINUTE`]).
    refusals: Budget,
}

fn error_message(message: &str) -> Utf8Bytes {
    channel::message("error", &Value::String(common::bounded(message.to_owned())))
}

/// An error that echoes the client's request whole after `prefix`, as the
/// exchange does: SDKs find the pending request it answers by parsing the
/// echo as JSON, so it is never cut (it is no longer than the message the
/// connection already took). The reason, if any, follows the echo, bounded
/// and without braces, so the echo is the message's only JSON object.
fn echo_message(prefix: &str, echo: &Value, reason: Option<&str>) -> Utf8Bytes {
    let mut text = format!("{prefix}{echo}");
    if let Some(reason) = reason {
        let reason = common::bounded(reason.replace('{', "(").replace('}', ")"));
        text.push_str(": ");
        text.push_str(&reason);
    }
    channel::message("error", &Value::String(text))
}

impl Session {
    /// Queues an answer; a client that leaves no room for it within
    /// `send_timeout` marks the connection stalled.
    async fn send(&mut self, text: Utf8Bytes) {
        if self.stalled {
            return;
        }
        let queued = tokio::time::timeout(self.send_timeout, self.out.send(Outgoing::Text(text)));
        if queued.await.is_err() {
            self.stalled = true;
        }
    }

    /// Refuses a client message with an `error` message.
    async fn error(&mut self, message: &str) {
        self.refuse(error_message(message)).await;
    }

    /// Answers a refused client message with `text`; past
    /// [`REFUSALS_PER_MINUTE`] the connection is closed after it.
    async fn refuse(&mut self, text: Utf8Bytes) {
        self.send(text).await;
        if !self.refusals.take() && self.retry.is_none() {
            self.retry = Some((
                close::REFUSED,
                format!("too many refused messages: more than {REFUSALS_PER_MINUTE} in a minute"),
            ));
        }
    }

    /// Queues an error only if there is room at once (the connection is
    /// closing).
    fn error_if_room(&self, message: &str) {
        let _ = self.out.try_send(Outgoing::Text(error_message(message)));
    }

    async fn on_text(&mut self, text: &str) {
        if !self.budget.take() {
            let limit = self.service.limits.messages_per_minute;
            self.error(&format!(
                "Too many messages: at most {limit} per minute on one connection; this one was \
                 dropped"
            ))
            .await;
            return;
        }
        let message = protocol::parse(text);
        if matches!(
            message,
            Ok(ClientMessage::Subscribe { .. } | ClientMessage::Post { .. })
        ) && let Err(denial) = self.service.access.charge_quota(&self.principal)
        {
            // Refused, so not counted; the connection stays up.
            self.service.access.record_denial("websocket", &denial);
            self.error(&denial.message()).await;
            return;
        }
        match message {
            Err(protocol::Refusal::Echo {
                prefix,
                echo,
                reason,
            }) => {
                self.refuse(echo_message(prefix, &echo, Some(&reason)))
                    .await;
            }
            Err(protocol::Refusal::Text(why)) => self.error(&why).await,
            Err(protocol::Refusal::Post { id, message }) => {
                let response = json!({ "type": "error", "payload": message });
                self.refuse(post_answer(&id, &response)).await;
            }
            Ok(ClientMessage::Ping) => {
                self.send(Utf8Bytes::from_static(r#"{"channel":"pong"}"#))
                    .await;
            }
            Ok(ClientMessage::Subscribe {
                subscription,
                original,
            }) => self.subscribe(subscription, original).await,
            Ok(ClientMessage::Unsubscribe {
                subscription,
                original,
            }) => {
                if self.open.remove(&subscription).is_some() {
                    self.send(channel::message("subscriptionResponse", &original))
                        .await;
                } else {
                    self.refuse(echo_message(
                        "Already unsubscribed: ",
                        &original["subscription"],
                        None,
                    ))
                    .await;
                }
            }
            Ok(ClientMessage::Post { id, kind, payload }) => self.post(id, kind, payload).await,
        }
    }

    async fn subscribe(&mut self, subscription: Subscription, original: Value) {
        if self.open.contains_key(&subscription) {
            self.refuse(echo_message(
                "Already subscribed: ",
                &original["subscription"],
                None,
            ))
            .await;
            return;
        }
        let limits = self.service.limits;
        if self.open.len() >= limits.subscriptions {
            self.error(&format!(
                "Cannot subscribe: at most {} subscriptions on one connection",
                limits.subscriptions
            ))
            .await;
            return;
        }
        if let Some(user) = subscription.user() {
            let users: BTreeSet<&str> = self.open.keys().filter_map(Subscription::user).collect();
            if !users.contains(user) && users.len() >= limits.users {
                self.error(&format!(
                    "Cannot track more than {} total users.",
                    limits.users
                ))
                .await;
                return;
            }
        }
        match self.start(&subscription).await {
            Ok((open, first)) => {
                // The acknowledgement goes out before the task's first frame.
                self.send(channel::message("subscriptionResponse", &original))
                    .await;
                let _ = first.send(());
                self.open.insert(subscription, open);
            }
            Err(status) if matches!(status.code(), Code::Unavailable | Code::ResourceExhausted) => {
                // Not the request's fault, and it passes (the engine is
                // catching up or busy, or its data is stale): the client is
                // told why and the connection closed with 1013 (1011 when
                // the engine stopped), so that an SDK reconnects and
                // subscribes again rather than dropping the subscription as
                // invalid.
                // Not the client's fault: not counted as a refusal.
                self.send(error_message(&format!(
                    "Service unavailable: {}; reconnect and subscribe again",
                    status.message()
                )))
                .await;
                let code = match status.code() {
                    Code::Unavailable => close_code(&status, self.service.engine_stopped()),
                    _ => close::TRY_AGAIN_LATER,
                };
                self.retry = Some((code, status.message().to_owned()));
            }
            Err(status) => {
                self.refuse(echo_message(
                    "Invalid subscription ",
                    &original["subscription"],
                    Some(status.message()),
                ))
                .await;
            }
        }
    }

    /// Subscribes and starts the subscription's task, which waits for the
    /// returned signal before sending.
    async fn start(
        &self,
        subscription: &Subscription,
    ) -> Result<(Open, tokio::sync::oneshot::Sender<()>), Status> {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let out = self.out.clone();
        let ends = self.ends.clone();
        let Some((key, channel)) = subscription.view() else {
            return self.start_ctx(subscription, go, wait).await;
        };
        let kind = key.kind();
        let slot = self
            .service
            .flow
            .watch("websocket", kind.name(), Some(kind.on_lag()), None)?;
        // The fills channels open with a snapshot message: l1gate keeps no
        // fill history, so it holds no fills (see crate::ws).
        let mut opening = subscription.opening();
        let mut relay = self
            .service
            .relays
            .open(
                key,
                Arc::clone(&slot),
                Box::new(move |batch| {
                    let mut messages: Vec<Utf8Bytes> = opening.take().into_iter().collect();
                    messages.extend(render::messages(batch, channel));
                    messages
                }),
            )
            .await?;
        let task = tokio::spawn(async move {
            if wait.await.is_err() {
                return;
            }
            let status = loop {
                match relay.next().await {
                    Some(Ok((text, at))) => {
                        let bytes = text.len();
                        let slot = Arc::clone(relay.slot());
                        // A full outbox (a client that reads nothing) must not
                        // hide the stream's end from the connection.
                        tokio::select! {
                            sent = out.send(Outgoing::Text(text)) => if sent.is_err() {
                                return;
                            },
                            () = slot.cancelled() => match slot.take_status() {
                                Some(status) => break status,
                                None => return,
                            },
                        }
                        slot.took(Measured {
                            bytes,
                            block: Some(at.block_number),
                            block_time_ms: Some(at.time),
                        });
                    }
                    Some(Err(status)) => break status,
                    None => match relay.slot().take_status() {
                        Some(status) => break status,
                        None => return,
                    },
                }
            };
            let _ = ends.send(Ended { status });
        });
        Ok((
            Open {
                task,
                slot: Some(slot),
            },
            go,
        ))
    }

    /// `activeAssetCtx` from the Info source's poller.
    async fn start_ctx(
        &self,
        subscription: &Subscription,
        go: tokio::sync::oneshot::Sender<()>,
        wait: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(Open, tokio::sync::oneshot::Sender<()>), Status> {
        let Subscription::ActiveAssetCtx { coin } = subscription else {
            return Err(Status::internal("no view serves this subscription"));
        };
        let Some(info) = &self.service.info else {
            return Err(Status::failed_precondition(
                "activeAssetCtx needs an Info source: start l1gate with --info-url \
                 (L1GATE_INFO_URL, info_url)",
            ));
        };
        if coin.starts_with('@') || coin.contains('/') {
            return Err(Status::invalid_argument(format!(
                "coin: {} is a spot coin; activeSpotAssetCtx is not served (the Info poller \
                 follows perp contexts only)",
                common::quoted(coin)
            )));
        }
        let mut stream = crate::info::streams::active_asset_ctx(info, coin.clone()).await?;
        let out = self.out.clone();
        let task = tokio::spawn(async move {
            if wait.await.is_err() {
                return;
            }
            while let Some(Ok(update)) = stream.next().await {
                let Some(ctx) = update.ctx else { continue };
                let data = json!({
                    "coin": update.coin,
                    "ctx": {
                        "funding": ctx.funding,
                        "openInterest": ctx.open_interest,
                        "prevDayPx": ctx.prev_day_px,
                        "dayNtlVlm": ctx.day_ntl_vlm,
                        "premium": ctx.premium,
                        "oraclePx": ctx.oracle_px,
                        "markPx": ctx.mark_px,
                        "midPx": ctx.mid_px,
                        "impactPxs": (!ctx.impact_pxs.is_empty()).then_some(ctx.impact_pxs),
                        "dayBaseVlm": ctx.day_base_vlm,
                    }
                });
                if out
                    .send(Outgoing::Text(channel::message("activeAssetCtx", &data)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        Ok((Open { task, slot: None }, go))
    }

    /// `post`: an Info request answered on the socket under its id, as
    /// `{"channel":"post","data":{"id","response":{"type":"info","payload":
    /// {"type","data"}}}}`, or `{"type":"error","payload":…}`.
    async fn post(&mut self, id: Value, kind: String, payload: Value) {
        let respond = |response: Value| post_answer(&id, &response);
        if kind != "info" {
            let why = if kind == "action" {
                "501 Not Implemented: action requests are not served: l1gate is a market-data \
                 server and signs or forwards no exchange actions"
                    .to_owned()
            } else {
                format!(
                    "400 Bad Request: request.type: unknown type {}; info or action",
                    common::quoted(&kind)
                )
            };
            self.send(respond(json!({ "type": "error", "payload": why })))
                .await;
            return;
        }
        let limit = self.service.limits.inflight_posts;
        if self.posts.fetch_add(1, Ordering::AcqRel) >= limit {
            self.posts.fetch_sub(1, Ordering::AcqRel);
            self.send(respond(json!({
                "type": "error",
                "payload": format!(
                    "429 Too Many Requests: too many posts in flight: at most {limit} on one \
                     connection"
                ),
            })))
            .await;
            return;
        }
        let lookup = self.service.lookup.clone();
        let out = self.out.clone();
        let id = id.clone();
        let posts = Arc::clone(&self.posts);
        tokio::spawn(async move {
            let info_type = payload
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let body = bytes::Bytes::from(payload.to_string());
            let response = match lookup.answer_json(body).await {
                Ok(data) => json!({
                    "type": "info",
                    "payload": { "type": info_type, "data": data },
                }),
                Err(message) => json!({ "type": "error", "payload": message }),
            };
            let _ = out.send(Outgoing::Text(post_answer(&id, &response))).await;
            posts.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// `{"channel":"post","data":{"id","response"}}`.
fn post_answer(id: &Value, response: &Value) -> Utf8Bytes {
    channel::message("post", &json!({ "id": id, "response": response }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_fit_a_close_frame() {
        let long = "é".repeat(200);
        assert!(close_reason(&long).len() <= 123);
        assert_eq!(close_reason("short"), "short");
    }

    #[test]
    fn the_budget_refuses_past_its_minute() {
        let mut budget = Budget::new(3);
        assert!(budget.take() && budget.take() && budget.take());
        assert!(!budget.take());
    }

    #[test]
    fn statuses_map_to_documented_close_codes() {
        let code = |status: &Status| close_code(status, false);
        assert_eq!(code(&Status::aborted("lag")), close::LAGGING);
        assert_eq!(code(&Status::deadline_exceeded("slow")), close::STALLED);
        assert_eq!(code(&Status::unauthenticated("revoked")), close::POLICY);
        assert_eq!(
            code(&Status::unavailable("market data is stale")),
            close::TRY_AGAIN_LATER
        );
        assert_eq!(
            code(&Status::resource_exhausted("usage quota exhausted")),
            close::QUOTA
        );
        // The same status once the engine has stopped: the server failed.
        assert_eq!(
            close_code(&Status::unavailable("the market engine stopped"), true),
            close::INTERNAL
        );
    }
}
