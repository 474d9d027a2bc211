//! Stand-ins for the upstreams of l1gate's node gateway on an Aptos-family
//! chain: the node's REST API under `/v1` ([`AptosNode`]) and the GraphQL
//! indexer beside it ([`Indexer`]), each an in-process server on loopback
//! that records every request and stops when dropped; plus [`send`], a small
//! HTTP/1.1 client that keeps bodies as bytes.
//!
//! # The node's world
//!
//! Versions `5000..=9999` are served at start (`oldest_ledger_version` 5000,
//! so reads below it are pruned), five per block (heights `1000..=1999`):
//! a `block_metadata_transaction`, three `user_transaction`s and a
//! `state_checkpoint_transaction`. Two accounts exist: `0x1` and
//! [`AptosNode::account`] (`0x…a11ce5eed`, sequence number 17), which holds
//! four resources (`0x1::account::Account`,
//! `0x1::coin::CoinStore<0x1::aptos_coin::AptosCoin>`, `0x3::token::TokenStore`,
//! `0x1::code::PackageRegistry`) and eight event streams: creation numbers 0
//! (1 `CoinRegisterEvent`), 1 (none), 2 (40 `0x1::coin::DepositEvent`s),
//! 3 (3 `WithdrawEvent`s), 4–7 (none). Its `TokenStore` names the one table,
//! whose items map addresses (`key_type` `address`) to `u64`s: the account →
//! `"250"`, `0x1` → `"1"`.
//!
//! Every answer, errors and unknown routes included, carries the ledger
//! headers (`X-Aptos-Chain-Id`, `-Ledger-Version`, `-Ledger-Oldest-Version`,
//! `-Ledger-TimestampUsec`, `-Epoch`, `-Block-Height`, `-Oldest-Block-Height`).
//! Errors have the node's body `{"message", "error_code", "vm_error_code"}`.
//!
//! | Route | Answer | Errors |
//! |---|---|---|
//! | `GET /v1` | ledger info; `ledger_timestamp` = now − [`AptosNode::set_ledger_lag`] | |
//! | `GET /v1/-/healthy` | `{"message":"aptos-node:ok"}` | 503 `health_check_failed` when the lag exceeds `duration_secs` |
//! | `GET /v1/spec`, `/spec.json`, `/spec.yaml` | an OpenAPI document (the real `/spec` is an HTML explorer) | |
//! | `GET /v1/blocks/by_height/{h}` | block; `transactions` is `null` unless `with_transactions=true` | 400 `invalid_input`; 404 `block_not_found` above the newest; 404 `block_pruned` below the oldest |
//! | `GET /v1/blocks/by_version/{v}` | the block holding `v` | 400 `invalid_input`; 404 `version_not_found`; 404 `version_pruned` |
//! | `GET /v1/transactions` | `limit` (default 25, clamped to 100) versions from `start` (default: the newest page) | 400 `invalid_input` (limit 0, start above the newest); 404 `version_pruned` |
//! | `GET /v1/transactions/by_version/{v}` | the transaction | 400 `invalid_input`; 404 `transaction_not_found`; 404 `version_pruned` |
//! | `GET /v1/transactions/by_hash/{h}`, `wait_by_hash/{h}` | the transaction (see below) | 400 `invalid_input`; 404 `transaction_not_found` |
//! | `POST /v1/transactions` | 202 pending transaction | 400 `invalid_input`, `sequence_number_too_old`, `invalid_transaction_update`; 415 `web_framework_error` |
//! | `POST /v1/transactions/simulate` | 200 `[user_transaction]` | 400 `invalid_input` (also for a signature that is not all zeros) |
//! | `POST /v1/transactions/batch` | 202 `{"transaction_failures":[]}`; 206 with failures | 400 `invalid_input` (not an array, more than 10, a malformed item) |
//! | `POST /v1/transactions/encode_submission` | 200 JSON string `"0x…"` | 400 `invalid_input`, `invalid_payload`, `function_not_found`, `type_error` |
//! | `GET /v1/estimate_gas_price` | `{"deprioritized_gas_estimate":100,"gas_estimate":100,"prioritized_gas_estimate":150}` | |
//! | `GET /v1/accounts/{a}` | `sequence_number`, `authentication_key` | 400 `invalid_input`; 404 `account_not_found` |
//! | `GET /v1/accounts/{a}/resources` | resources; `limit` (default and cap 9999) and the `start` cursor from `X-Aptos-Cursor` | 400 `invalid_input`; 404 `account_not_found`, `version_not_found`, `version_pruned` |
//! | `GET /v1/accounts/{a}/resource/{type}` | one resource | 400 `invalid_input`; 404 `account_not_found`, `resource_not_found` |
//! | `GET /v1/accounts/{a}/events/{creation_number}` | events (below) | 400 `invalid_input`; 404 `account_not_found`, `resource_not_found`; 500 `internal_error` with the reader off |
//! | `GET /v1/accounts/{a}/events/{struct}/{field}` | the events of that handle | as above, and 404 `struct_field_not_found`; 400 `invalid_input` for a field that is no handle |
//! | `POST /v1/tables/{handle}/item` | the value as JSON (`"250"`) | 400 `invalid_input`; 404 `table_item_not_found` |
//! | `POST /v1/tables/{handle}/raw_item` | `{"key":"0x<32 bytes>"}` → the value's BCS bytes | 400 `invalid_input`; 404 `table_item_not_found` |
//! | `POST /v1/view` | a JSON array of return values | 400 `invalid_input` |
//! | anything else | | 404 `web_framework_error` |
//!
//! `ledger_version` on account and view reads is checked against the ledger
//! (404 `version_not_found` above it, `version_pruned` below it) and then
//! ignored: the state is the latest.
//!
//! # Rules the real node leaves to its VM
//!
//! - Addresses: `0x` followed by 1–64 hex digits, or exactly 64 hex digits
//!   without `0x` (as the node parses them); anything else is 400
//!   `invalid_input`. Answers write special addresses (`0x0`–`0xf`) short and
//!   others with 64 digits.
//! - Path and query numbers that do not parse are 400 `invalid_input` (the
//!   node says `web_framework_error` for some; the interface says
//!   `invalid_input`). Pruned reads are 404 as the interface says (the node
//!   answers 410) with the node's codes `version_pruned` / `block_pruned`.
//! - Events: `limit` defaults to 25 and is clamped to 100 (the node's
//!   `max_events_page_size`); 0 is 400. Without `start` the newest `limit`
//!   events come back, always in ascending `sequence_number`. An unknown
//!   creation number is 404 `resource_not_found` (the interface's rule).
//! - Submission: a JSON body needs `sender`, `sequence_number`,
//!   `max_gas_amount`, `gas_unit_price`, `expiration_timestamp_secs` (u64s in
//!   strings), `payload` (an object with `type`) and `signature` (an object
//!   with `type`). A body of content type
//!   `application/x.aptos.signed_transaction+bcs` needs at least 40 bytes:
//!   the sender's 32 bytes and the sequence number as a little-endian u64
//!   (the start of a real `SignedTransaction`); the other fields of its
//!   pending transaction are placeholders. A sequence number below the
//!   sender's is `sequence_number_too_old`; another body for a sequence
//!   number still pending is `invalid_transaction_update`; the same body again
//!   gets the same pending transaction.
//! - A submitted transaction is pending for the first lookup of its hash
//!   (`by_hash` or `wait_by_hash`, which answers at once) and committed at
//!   the next one, in a new block: the ledger grows by five versions and the
//!   sender's sequence number moves on.
//! - Simulation needs `signature.signature` to be all zeros (a real node
//!   refuses a valid signature); BCS bodies are not inspected.
//! - Encoding knows three entry functions: `0x1::aptos_account::transfer`
//!   (no type arguments), `0x1::coin::transfer` and
//!   `0x1::aptos_account::transfer_coins` (one each), all taking an address
//!   and a u64 in a string. Another function is `function_not_found`; the
//!   wrong number of type arguments, or one that is not a type, is
//!   `type_error`; a payload `type` other than `entry_function_payload` /
//!   `script_payload` (with `code.bytecode`), a malformed `function`, or the
//!   wrong arguments is `invalid_payload`; a missing transaction field is
//!   `invalid_input`. The answer is deterministic bytes of the signing
//!   message's shape (a 32-byte prefix, the sender, the sequence number, …),
//!   not real BCS.
//! - View functions: `0x1::coin::balance<T>(address)` (`["123456789"]` for
//!   the account's AptosCoin), `0x1::account::get_sequence_number(address)`,
//!   `0x1::chain_id::get()` and `0x1::timestamp::now_microseconds()`. An
//!   unknown function, wrong type arguments or arguments are 400
//!   `invalid_input`; a read of state that does not exist aborts: 400
//!   `invalid_input` with `vm_error_code` 4016 (`ABORTED`).
//!
//! # The indexer
//!
//! `POST /v1/graphql` with `{"query": "…"}` answers queries over
//! `ledger_infos` (argument `limit`, fields `chain_id`, `version` (the last
//! version it indexed, 9999) and `__typename`) with `{"data":{"ledger_infos":
//! [{"chain_id": N}]}}`. As on Hasura's `/v1/graphql`, every error is HTTP 200
//! with `{"errors":[{"extensions":{"path","code"},"message"}]}`: a body that is
//! not JSON is `invalid-json`, one without `query` is `parse-failed`, an
//! unparsable query or an unknown field or argument is `validation-failed`.
//! Other paths are 404 with Hasura's `{"path","error","code":"not-found"}`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One request a stand-in received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path_and_query: String,
    /// Names in lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Buffers `request`'s body, appends the request to `seen` and gives it back
/// whole (extensions included, so a WebSocket upgrade still works).
pub async fn record(seen: &Mutex<Vec<Seen>>, request: Request) -> Request {
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    seen.lock().push(Seen {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (n.as_str().to_owned(), value)
            })
            .collect(),
        body: bytes.to_vec(),
    });
    Request::from_parts(parts, Body::from(bytes))
}

/// Turns true when dropped; a server started by [`serve`] with it stops.
pub struct StopOnDrop(watch::Sender<bool>);

impl Default for StopOnDrop {
    fn default() -> Self {
        Self(watch::channel(false).0)
    }
}

impl StopOnDrop {
    /// A receiver that sees the drop.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Serves `router` on a fresh loopback port until `stop` turns true.
pub async fn serve(router: Router, mut stop: watch::Receiver<bool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            })
            .await;
    });
    addr
}

/// One HTTP answer, its body as bytes.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// `error_code` of a node error body.
    pub fn error_code(&self) -> String {
        self.json()["error_code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// Sends one request to `url` (`http://host:port/path?query`) over a fresh
/// HTTP/1.1 connection.
pub async fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let uri: axum::http::Uri = url.parse().unwrap();
    let authority = uri.authority().unwrap().as_str().to_owned();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header("host", &authority);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = Full::new(Bytes::copy_from_slice(body));
    let response = sender
        .send_request(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: body.to_vec(),
    }
}

const VERSIONS_PER_BLOCK: u64 = 5;
const OLDEST_VERSION: u64 = 5_000;
const FIRST_LEDGER_VERSION: u64 = 9_999;
const BLOCK_INTERVAL_USEC: u64 = 250_000;
const EPOCH: u64 = 7;
const GIT_HASH: &str = "5e1f0c2a9d8b7e6f5a4b3c2d1e0f9a8b7c6d5e4f";
const EVENTS_PAGE: u64 = 25;
const EVENTS_MAX: u64 = 100;
const TRANSACTIONS_PAGE: u64 = 25;
const TRANSACTIONS_MAX: u64 = 100;
const RESOURCES_MAX: u64 = 9_999;
const BATCH_MAX: usize = 10;
const ACCOUNT_SEQUENCE: u64 = 17;
const ACCOUNT_BALANCE: u64 = 123_456_789;
const DEPOSIT_CREATION: u64 = 2;
const APTOS_COIN: &str = "0x1::aptos_coin::AptosCoin";
const BCS_CONTENT_TYPE: &str = "application/x.aptos.signed_transaction+bcs";
const ABORTED: u64 = 4016;

/// The stand-in account's address, in the long form.
fn the_account() -> String {
    format!("0x{:0>64}", "a11ce5eed")
}

/// `0x1` in the long form.
fn framework() -> String {
    format!("0x{:0>64}", "1")
}

/// The one table's handle.
fn table_handle() -> String {
    format!("0x{:0>64}", "7ab1e5")
}

fn now_usec() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn digest_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// `0x` and 64 hex digits, deterministic in `label`.
fn some_hash(chain_id: u8, label: &str) -> String {
    format!("0x{}", digest_hex(&format!("{chain_id}/{label}")))
}

/// The hash of the generated transaction at `version`: the version in the
/// first 16 digits, so a lookup by hash needs no index.
fn version_hash(chain_id: u8, version: u64) -> String {
    let tail = digest_hex(&format!("{chain_id}/txn/{version}"));
    format!("0x{version:016x}{}", &tail[..48])
}

/// An error answer in the node's shape.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    vm_error_code: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            vm_error_code: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "message": self.message,
            "error_code": self.code,
            "vm_error_code": self.vm_error_code,
        });
        (self.status, axum::Json(body)).into_response()
    }
}

fn invalid_input(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message)
}

fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, code, message)
}

fn aborted(message: impl Into<String>) -> ApiError {
    ApiError {
        vm_error_code: Some(ABORTED),
        ..invalid_input(message)
    }
}

type Reply = Result<Response, ApiError>;

fn answer(status: StatusCode, body: Value) -> Reply {
    Ok((status, axum::Json(body)).into_response())
}

/// The canonical form of an address (`0x` and 64 lowercase hex digits), as
/// the node parses it.
fn parse_address(text: &str) -> Result<String, ApiError> {
    let digits = match text.strip_prefix("0x") {
        Some(digits) if !digits.is_empty() && digits.len() <= 64 => digits,
        None if text.len() == 64 => text,
        _ => return Err(invalid_input(format!("invalid account address {text:?}"))),
    };
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid_input(format!("invalid account address {text:?}")));
    }
    Ok(format!("0x{:0>64}", digits.to_ascii_lowercase()))
}

/// How the node writes an address: `0x0`–`0xf` short, others in full.
fn show_address(canonical: &str) -> String {
    let significant = canonical[2..].trim_start_matches('0');
    match significant.len() {
        0 => "0x0".to_owned(),
        1 => format!("0x{significant}"),
        _ => canonical.to_owned(),
    }
}

fn parse_u64(name: &str, text: &str) -> Result<u64, ApiError> {
    text.parse::<u64>()
        .map_err(|_| invalid_input(format!("failed to parse {name} {text:?} as a u64")))
}

fn query_u64(query: &HashMap<String, String>, name: &str) -> Result<Option<u64>, ApiError> {
    query.get(name).map(|t| parse_u64(name, t)).transpose()
}

/// `limit` as the node takes it: a u16, `default` when absent, never 0,
/// clamped to `max`.
fn page_limit(query: &HashMap<String, String>, default: u64, max: u64) -> Result<u64, ApiError> {
    let limit = match query.get("limit") {
        None => default,
        Some(text) => u64::from(
            text.parse::<u16>()
                .map_err(|_| invalid_input(format!("failed to parse limit {text:?} as a u16")))?,
        ),
    };
    if limit == 0 {
        return Err(invalid_input("Given limit value (0) must not be zero"));
    }
    Ok(limit.min(max))
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A struct tag (`addr::module::Name<…>`) with its addresses in the node's
/// form and without spaces.
fn normalize_struct_tag(tag: &str) -> Result<String, ApiError> {
    let compact: String = tag.chars().filter(|c| !c.is_whitespace()).collect();
    let wrong = || invalid_input(format!("invalid struct tag {tag:?}"));
    let head = compact.split('<').next().unwrap_or_default();
    let parts: Vec<&str> = head.split("::").collect();
    let balanced = compact.matches('<').count() == compact.matches('>').count()
        && (!compact.contains('<') || compact.ends_with('>'));
    if parts.len() != 3
        || !parts[0].starts_with("0x")
        || !is_identifier(parts[1])
        || !is_identifier(parts[2])
        || !balanced
    {
        return Err(wrong());
    }
    let mut out = String::new();
    let mut rest = compact.as_str();
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let len = after
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(after.len());
        if len == 0 {
            return Err(wrong());
        }
        out.push_str(&show_address(&parse_address(&rest[at..at + 2 + len])?));
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A type argument: a primitive, a vector of one, or a struct tag.
fn normalize_type(tag: &str) -> Option<String> {
    let compact: String = tag.chars().filter(|c| !c.is_whitespace()).collect();
    const PRIMITIVES: [&str; 10] = [
        "bool", "u8", "u16", "u32", "u64", "u128", "u256", "address", "signer", "i64",
    ];
    if PRIMITIVES.contains(&compact.as_str()) {
        return Some(compact);
    }
    if let Some(inner) = compact
        .strip_prefix("vector<")
        .and_then(|t| t.strip_suffix('>'))
    {
        return normalize_type(inner).map(|t| format!("vector<{t}>"));
    }
    normalize_struct_tag(&compact).ok()
}

/// A function id (`addr::module::name`) in the node's form.
fn normalize_function(function: &str) -> Option<String> {
    let parts: Vec<&str> = function.split("::").collect();
    if parts.len() != 3 || !is_identifier(parts[1]) || !is_identifier(parts[2]) {
        return None;
    }
    let address = parse_address(parts[0]).ok()?;
    Some(format!(
        "{}::{}::{}",
        show_address(&address),
        parts[1],
        parts[2]
    ))
}

/// The ledger's numbers at one moment.
#[derive(Debug, Clone, Copy)]
struct LedgerInfo {
    chain_id: u8,
    ledger_version: u64,
    timestamp_usec: u64,
}

impl LedgerInfo {
    fn block_height(&self) -> u64 {
        self.ledger_version / VERSIONS_PER_BLOCK
    }

    fn oldest_block_height(&self) -> u64 {
        OLDEST_VERSION / VERSIONS_PER_BLOCK
    }

    fn json(&self) -> Value {
        json!({
            "chain_id": self.chain_id,
            "epoch": EPOCH.to_string(),
            "ledger_version": self.ledger_version.to_string(),
            "oldest_ledger_version": OLDEST_VERSION.to_string(),
            "ledger_timestamp": self.timestamp_usec.to_string(),
            "node_role": "full_node",
            "oldest_block_height": self.oldest_block_height().to_string(),
            "block_height": self.block_height().to_string(),
            "git_hash": GIT_HASH,
        })
    }

    fn headers(&self) -> [(&'static str, u64); 7] {
        [
            ("x-aptos-chain-id", u64::from(self.chain_id)),
            ("x-aptos-ledger-version", self.ledger_version),
            ("x-aptos-ledger-oldest-version", OLDEST_VERSION),
            ("x-aptos-ledger-timestampusec", self.timestamp_usec),
            ("x-aptos-epoch", EPOCH),
            ("x-aptos-block-height", self.block_height()),
            ("x-aptos-oldest-block-height", self.oldest_block_height()),
        ]
    }

    /// 404 above the ledger, 404 `version_pruned` below its oldest version.
    fn check_version(&self, version: u64) -> Result<(), ApiError> {
        if version > self.ledger_version {
            return Err(not_found(
                "version_not_found",
                format!(
                    "Ledger version({version}) not found, the latest is {}",
                    self.ledger_version
                ),
            ));
        }
        if version < OLDEST_VERSION {
            return Err(not_found(
                "version_pruned",
                format!(
                    "Ledger version({version}) has been pruned, the oldest is {OLDEST_VERSION}"
                ),
            ));
        }
        Ok(())
    }
}

/// Where a submitted transaction is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TxState {
    /// Shown as pending by a lookup already when `shown`.
    Pending {
        shown: bool,
    },
    Committed(u64),
}

#[derive(Debug, Clone)]
struct Submitted {
    sender: String,
    sequence_number: u64,
    /// The pending transaction as submit answers it.
    pending: Value,
    state: TxState,
}

/// A transaction request as the stand-in understood it.
struct Submission {
    sender: String,
    sequence_number: u64,
    /// The fields of the pending transaction, without `hash`.
    fields: Map<String, Value>,
    hash: String,
}

/// The mutable part of the chain.
struct Ledger {
    version: u64,
    /// Blocks committed after start: height → (timestamp, its user
    /// transaction at the block's second version).
    blocks: BTreeMap<u64, (u64, Value)>,
    /// Submitted transactions by hash.
    pool: BTreeMap<String, Submitted>,
    /// Next sequence numbers that moved since start.
    sequence: BTreeMap<String, u64>,
}

/// One event stream of an account.
#[derive(Debug, Clone, Copy)]
struct Stream {
    creation: u64,
    count: u64,
    kind: &'static str,
}

struct Node {
    chain_id: u8,
    started_usec: u64,
    ledger: Mutex<Ledger>,
    seen: Mutex<Vec<Seen>>,
    ledger_requests: AtomicUsize,
    lag: Mutex<Duration>,
    event_reader: AtomicBool,
    delay: Mutex<Duration>,
}

impl Node {
    fn info_of(&self, ledger: &Ledger) -> LedgerInfo {
        let lag = self.lag.lock().as_micros() as u64;
        LedgerInfo {
            chain_id: self.chain_id,
            ledger_version: ledger.version,
            timestamp_usec: now_usec().saturating_sub(lag),
        }
    }

    fn info(&self) -> LedgerInfo {
        self.info_of(&self.ledger.lock())
    }

    fn block_timestamp(&self, ledger: &Ledger, height: u64) -> u64 {
        let first_height = FIRST_LEDGER_VERSION / VERSIONS_PER_BLOCK;
        match ledger.blocks.get(&height) {
            Some((timestamp, _)) => *timestamp,
            None => self
                .started_usec
                .saturating_sub(first_height.saturating_sub(height) * BLOCK_INTERVAL_USEC),
        }
    }

    fn next_sequence(ledger: &Ledger, address: &str) -> u64 {
        let start = if address == the_account() {
            ACCOUNT_SEQUENCE
        } else {
            0
        };
        ledger.sequence.get(address).copied().unwrap_or(start)
    }

    /// The event streams of an existing account; `None` for any other.
    fn streams(address: &str) -> Option<Vec<Stream>> {
        let stream = |creation, count, kind| Stream {
            creation,
            count,
            kind,
        };
        if address == the_account() {
            Some(vec![
                stream(0, 1, "0x1::account::CoinRegisterEvent"),
                stream(1, 0, "0x1::account::KeyRotationEvent"),
                stream(DEPOSIT_CREATION, 40, "0x1::coin::DepositEvent"),
                stream(3, 3, "0x1::coin::WithdrawEvent"),
                stream(4, 0, "0x3::token::BurnTokenEvent"),
                stream(5, 0, "0x3::token::DepositEvent"),
                stream(6, 0, "0x3::token::MutateTokenPropertyMapEvent"),
                stream(7, 0, "0x3::token::WithdrawEvent"),
            ])
        } else if address == framework() {
            Some(vec![
                stream(0, 0, "0x1::account::CoinRegisterEvent"),
                stream(1, 0, "0x1::account::KeyRotationEvent"),
            ])
        } else {
            None
        }
    }

    fn account_exists(address: &str) -> Result<(), ApiError> {
        match Self::streams(address) {
            Some(_) => Ok(()),
            None => Err(not_found(
                "account_not_found",
                format!("Account not found by Address({})", show_address(address)),
            )),
        }
    }

    /// The resources of an existing account, each `{type, data}`.
    fn resources(&self, ledger: &Ledger, address: &str) -> Option<Vec<Value>> {
        let streams = Self::streams(address)?;
        let shown = show_address(address);
        let handle = |creation: u64| {
            let count = streams
                .iter()
                .find(|s| s.creation == creation)
                .map_or(0, |s| s.count);
            json!({
                "counter": count.to_string(),
                "guid": {"id": {"addr": shown, "creation_num": creation.to_string()}},
            })
        };
        let none = json!({"for": {"vec": []}});
        let account = json!({
            "type": "0x1::account::Account",
            "data": {
                "authentication_key": address,
                "coin_register_events": handle(0),
                "guid_creation_num": streams.len().to_string(),
                "key_rotation_events": handle(1),
                "rotation_capability_offer": none,
                "sequence_number": Self::next_sequence(ledger, address).to_string(),
                "signer_capability_offer": none,
            },
        });
        if address != the_account() {
            return Some(vec![
                account,
                json!({"type": "0x1::chain_id::ChainId", "data": {"id": self.chain_id}}),
                json!({
                    "type": "0x1::timestamp::CurrentTimeMicroseconds",
                    "data": {"microseconds": self.info_of(ledger).timestamp_usec.to_string()},
                }),
            ]);
        }
        Some(vec![
            account,
            json!({
                "type": format!("0x1::coin::CoinStore<{APTOS_COIN}>"),
                "data": {
                    "coin": {"value": ACCOUNT_BALANCE.to_string()},
                    "deposit_events": handle(DEPOSIT_CREATION),
                    "frozen": false,
                    "withdraw_events": handle(3),
                },
            }),
            json!({
                "type": "0x3::token::TokenStore",
                "data": {
                    "burn_events": handle(4),
                    "deposit_events": handle(5),
                    "direct_transfer": false,
                    "mutate_token_property_events": handle(6),
                    "tokens": {"handle": table_handle()},
                    "withdraw_events": handle(7),
                },
            }),
            json!({"type": "0x1::code::PackageRegistry", "data": {"packages": []}}),
        ])
    }

    fn event(address: &str, stream: Stream, sequence: u64) -> Value {
        let data = match stream.kind {
            "0x1::coin::DepositEvent" => {
                json!({"amount": ((sequence + 1) * 1_000_000).to_string()})
            }
            "0x1::coin::WithdrawEvent" => json!({"amount": ((sequence + 1) * 250_000).to_string()}),
            "0x1::account::CoinRegisterEvent" => json!({
                "type_info": {
                    "account_address": "0x1",
                    "module_name": format!("0x{}", hex::encode("aptos_coin")),
                    "struct_name": format!("0x{}", hex::encode("AptosCoin")),
                }
            }),
            _ => json!({}),
        };
        let version = OLDEST_VERSION + 100 + stream.creation * 7 + sequence * 97;
        json!({
            "version": version.to_string(),
            "guid": {
                "creation_number": stream.creation.to_string(),
                "account_address": show_address(address),
            },
            "sequence_number": sequence.to_string(),
            "type": stream.kind,
            "data": data,
        })
    }

    /// The transaction at `version` (which the caller checked).
    fn transaction(&self, ledger: &Ledger, version: u64) -> Value {
        let height = version / VERSIONS_PER_BLOCK;
        let position = version % VERSIONS_PER_BLOCK;
        if position == 1
            && let Some((_, committed)) = ledger.blocks.get(&height)
        {
            return committed.clone();
        }
        let c = self.chain_id;
        let timestamp = self.block_timestamp(ledger, height).to_string();
        let mut txn = json!({
            "version": version.to_string(),
            "hash": version_hash(c, version),
            "state_change_hash": some_hash(c, &format!("state/{version}")),
            "event_root_hash": some_hash(c, &format!("events/{version}")),
            "state_checkpoint_hash": null,
            "gas_used": "0",
            "success": true,
            "vm_status": "Executed successfully",
            "accumulator_root_hash": some_hash(c, &format!("accumulator/{version}")),
            "changes": [],
            "timestamp": timestamp,
        });
        let extra = match position {
            0 => json!({
                "type": "block_metadata_transaction",
                "id": some_hash(c, &format!("block/{height}")),
                "epoch": EPOCH.to_string(),
                "round": (height * 2).to_string(),
                "events": [],
                "previous_block_votes_bitvec": [255, 127],
                "proposer": show_address(&format!("0x{:0>64x}", 0xfee0 + height % 4)),
                "failed_proposer_indices": [],
            }),
            4 => json!({
                "type": "state_checkpoint_transaction",
                "state_checkpoint_hash": some_hash(c, &format!("checkpoint/{version}")),
            }),
            _ => {
                let sender = format!("0x{}", digest_hex(&format!("{c}/sender/{version}")));
                json!({
                    "type": "user_transaction",
                    "gas_used": "9",
                    "sender": sender,
                    "sequence_number": (version / 7).to_string(),
                    "max_gas_amount": "200000",
                    "gas_unit_price": "100",
                    "expiration_timestamp_secs": (self.block_timestamp(ledger, height) / 1_000_000 + 600).to_string(),
                    "payload": {
                        "type": "entry_function_payload",
                        "function": "0x1::aptos_account::transfer",
                        "type_arguments": [],
                        "arguments": [show_address(&the_account()), "1000"],
                    },
                    "signature": {
                        "type": "ed25519_signature",
                        "public_key": some_hash(c, &format!("key/{version}")),
                        "signature": format!("0x{}{}", digest_hex(&format!("sig1/{version}")), digest_hex(&format!("sig2/{version}"))),
                    },
                    "events": [],
                })
            }
        };
        if let (Some(txn), Value::Object(extra)) = (txn.as_object_mut(), extra) {
            txn.extend(extra);
        }
        txn
    }

    fn block(&self, ledger: &Ledger, height: u64, with_transactions: bool) -> Value {
        let first = height * VERSIONS_PER_BLOCK;
        let last = first + VERSIONS_PER_BLOCK - 1;
        let transactions = if with_transactions {
            Value::Array(
                (first..=last)
                    .map(|v| self.transaction(ledger, v))
                    .collect(),
            )
        } else {
            Value::Null
        };
        json!({
            "block_height": height.to_string(),
            "block_hash": some_hash(self.chain_id, &format!("block/{height}")),
            "block_timestamp": self.block_timestamp(ledger, height).to_string(),
            "first_version": first.to_string(),
            "last_version": last.to_string(),
            "transactions": transactions,
        })
    }

    /// Commits the pending transaction `hash` in a new block; its version.
    fn commit(&self, ledger: &mut Ledger, hash: &str) -> u64 {
        let height = ledger.version / VERSIONS_PER_BLOCK + 1;
        let version = height * VERSIONS_PER_BLOCK + 1;
        let timestamp = self.info_of(ledger).timestamp_usec;
        let Some(submitted) = ledger.pool.get_mut(hash) else {
            return version;
        };
        submitted.state = TxState::Committed(version);
        let (sender, sequence_number) = (submitted.sender.clone(), submitted.sequence_number);
        let mut txn = submitted.pending.clone();
        let c = self.chain_id;
        if let Some(txn) = txn.as_object_mut() {
            txn.extend(
                json!({
                    "type": "user_transaction",
                    "version": version.to_string(),
                    "state_change_hash": some_hash(c, &format!("state/{version}")),
                    "event_root_hash": some_hash(c, &format!("events/{version}")),
                    "state_checkpoint_hash": null,
                    "gas_used": "9",
                    "success": true,
                    "vm_status": "Executed successfully",
                    "accumulator_root_hash": some_hash(c, &format!("accumulator/{version}")),
                    "changes": [],
                    "events": [],
                    "timestamp": timestamp.to_string(),
                })
                .as_object()
                .cloned()
                .unwrap_or_default(),
            );
        }
        ledger.blocks.insert(height, (timestamp, txn));
        ledger.version = height * VERSIONS_PER_BLOCK + VERSIONS_PER_BLOCK - 1;
        let next = ledger.sequence.entry(sender).or_insert(0);
        *next = (*next).max(sequence_number + 1);
        version
    }

    /// A lookup by hash: pending the first time, committed afterwards.
    fn by_hash(&self, hash: &str) -> Reply {
        let digits = hash.strip_prefix("0x").unwrap_or(hash).to_ascii_lowercase();
        if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid_input(format!("invalid transaction hash {hash:?}")));
        }
        let hash = format!("0x{digits}");
        let mut ledger = self.ledger.lock();
        if let Some(submitted) = ledger.pool.get_mut(&hash) {
            let version = match submitted.state {
                TxState::Pending { shown: false } => {
                    submitted.state = TxState::Pending { shown: true };
                    let mut pending = submitted.pending.clone();
                    pending["type"] = json!("pending_transaction");
                    return answer(StatusCode::OK, pending);
                }
                TxState::Pending { shown: true } => self.commit(&mut ledger, &hash),
                TxState::Committed(version) => version,
            };
            return answer(StatusCode::OK, self.transaction(&ledger, version));
        }
        let version = u64::from_str_radix(&digits[..16], 16).ok();
        match version {
            Some(v)
                if (OLDEST_VERSION..=ledger.version).contains(&v)
                    && version_hash(self.chain_id, v) == hash =>
            {
                answer(StatusCode::OK, self.transaction(&ledger, v))
            }
            _ => Err(not_found(
                "transaction_not_found",
                format!("Transaction not found by Transaction hash({hash})"),
            )),
        }
    }

    /// Accepts `submission` into the pool; the pending transaction.
    fn enqueue(&self, submission: Submission) -> Result<Value, ApiError> {
        let mut ledger = self.ledger.lock();
        let next = Self::next_sequence(&ledger, &submission.sender);
        if submission.sequence_number < next {
            return Err(bad_request(
                "sequence_number_too_old",
                format!(
                    "Transaction sequence number {} is below the account's {next}",
                    submission.sequence_number
                ),
            ));
        }
        let waiting = ledger.pool.values().find(|t| {
            t.sender == submission.sender
                && t.sequence_number == submission.sequence_number
                && matches!(t.state, TxState::Pending { .. })
        });
        if let Some(waiting) = waiting {
            if waiting.pending["hash"] == submission.hash.as_str() {
                return Ok(waiting.pending.clone());
            }
            return Err(bad_request(
                "invalid_transaction_update",
                "Transaction already in mempool with a different payload",
            ));
        }
        let mut pending = Map::new();
        pending.insert("hash".to_owned(), json!(submission.hash));
        pending.extend(submission.fields);
        let pending = Value::Object(pending);
        ledger.pool.insert(
            submission.hash.clone(),
            Submitted {
                sender: submission.sender,
                sequence_number: submission.sequence_number,
                pending: pending.clone(),
                state: TxState::Pending { shown: false },
            },
        );
        Ok(pending)
    }
}

/// Which body a POST carries.
enum BodyKind {
    Json,
    Bcs,
}

fn body_kind(headers: &HeaderMap) -> Result<BodyKind, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(BodyKind::Json),
        BCS_CONTENT_TYPE => Ok(BodyKind::Bcs),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "web_framework_error",
            format!("unsupported content type {content_type:?}"),
        )),
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| invalid_input(format!("parse request body: {e}")))
}

fn u64_field(object: &Map<String, Value>, name: &str) -> Result<u64, ApiError> {
    object
        .get(name)
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| {
            invalid_input(format!(
                "missing or malformed field `{name}` (a u64 in a string)"
            ))
        })
}

fn typed_object<'a>(object: &'a Map<String, Value>, name: &str) -> Result<&'a Value, ApiError> {
    object
        .get(name)
        .filter(|v| v.get("type").is_some_and(Value::is_string))
        .ok_or_else(|| {
            invalid_input(format!(
                "missing or malformed field `{name}` (an object with `type`)"
            ))
        })
}

/// The fields every transaction request has, checked.
fn request_fields(value: &Value) -> Result<(String, u64, Map<String, Value>), ApiError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid_input("the transaction is not a JSON object"))?;
    let sender = object
        .get("sender")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_input("missing field `sender`"))?;
    let sender = parse_address(sender)?;
    let sequence_number = u64_field(object, "sequence_number")?;
    let mut fields = Map::new();
    fields.insert("sender".to_owned(), json!(show_address(&sender)));
    fields.insert(
        "sequence_number".to_owned(),
        json!(sequence_number.to_string()),
    );
    for name in [
        "max_gas_amount",
        "gas_unit_price",
        "expiration_timestamp_secs",
    ] {
        fields.insert(name.to_owned(), json!(u64_field(object, name)?.to_string()));
    }
    fields.insert(
        "payload".to_owned(),
        typed_object(object, "payload")?.clone(),
    );
    Ok((sender, sequence_number, fields))
}

/// A signed transaction request in JSON.
fn submission_from_json(value: &Value) -> Result<Submission, ApiError> {
    let (sender, sequence_number, mut fields) = request_fields(value)?;
    let signature = typed_object(value.as_object().unwrap_or(&Map::new()), "signature")?.clone();
    fields.insert("signature".to_owned(), signature);
    let hash = format!(
        "0x{}",
        digest_hex(&Value::Object(fields.clone()).to_string())
    );
    Ok(Submission {
        sender,
        sequence_number,
        fields,
        hash,
    })
}

/// A BCS body: only its sender and sequence number are read.
fn submission_from_bcs(body: &[u8]) -> Result<Submission, ApiError> {
    if body.len() < 40 {
        return Err(invalid_input(
            "Failed to deserialize input into SignedTransaction",
        ));
    }
    let sender = format!("0x{}", hex::encode(&body[..32]));
    let mut number = [0u8; 8];
    number.copy_from_slice(&body[32..40]);
    let sequence_number = u64::from_le_bytes(number);
    let fields = json!({
        "sender": show_address(&sender),
        "sequence_number": sequence_number.to_string(),
        "max_gas_amount": "200000",
        "gas_unit_price": "100",
        "expiration_timestamp_secs": "0",
        "payload": {"type": "entry_function_payload", "function": "", "type_arguments": [], "arguments": []},
        "signature": {"type": "ed25519_signature", "public_key": "0x", "signature": "0x"},
    });
    Ok(Submission {
        sender,
        sequence_number,
        fields: fields.as_object().cloned().unwrap_or_default(),
        hash: format!("0x{}", hex::encode(Sha256::digest(body))),
    })
}

fn submission(headers: &HeaderMap, body: &[u8]) -> Result<Submission, ApiError> {
    match body_kind(headers)? {
        BodyKind::Json => submission_from_json(&parse_json(body)?),
        BodyKind::Bcs => submission_from_bcs(body),
    }
}

/// An entry function the encoder knows.
struct EntryFunction {
    id: &'static str,
    type_parameters: usize,
}

const ENTRY_FUNCTIONS: [EntryFunction; 3] = [
    EntryFunction {
        id: "0x1::aptos_account::transfer",
        type_parameters: 0,
    },
    EntryFunction {
        id: "0x1::coin::transfer",
        type_parameters: 1,
    },
    EntryFunction {
        id: "0x1::aptos_account::transfer_coins",
        type_parameters: 1,
    },
];

/// Checks an encode payload against the known functions.
fn check_payload(payload: &Value) -> Result<(), ApiError> {
    let invalid = |message: String| bad_request("invalid_payload", message);
    match payload["type"].as_str() {
        Some("entry_function_payload") => {}
        Some("script_payload") if payload["code"]["bytecode"].is_string() => return Ok(()),
        other => return Err(invalid(format!("unsupported payload type {other:?}"))),
    }
    let function = payload["function"]
        .as_str()
        .ok_or_else(|| invalid("missing field `function`".to_owned()))?;
    let id = normalize_function(function)
        .ok_or_else(|| invalid(format!("invalid function id {function:?}")))?;
    let known = ENTRY_FUNCTIONS
        .iter()
        .find(|f| f.id == id)
        .ok_or_else(|| bad_request("function_not_found", format!("Function {id} not found")))?;
    let type_arguments = payload["type_arguments"]
        .as_array()
        .ok_or_else(|| invalid("`type_arguments` is not an array".to_owned()))?;
    if type_arguments.len() != known.type_parameters {
        return Err(bad_request(
            "type_error",
            format!(
                "{id} takes {} type arguments, got {}",
                known.type_parameters,
                type_arguments.len()
            ),
        ));
    }
    if let Some(bad) = type_arguments
        .iter()
        .find(|t| t.as_str().and_then(normalize_type).is_none())
    {
        return Err(bad_request(
            "type_error",
            format!("invalid type argument {bad}"),
        ));
    }
    let arguments = payload["arguments"]
        .as_array()
        .ok_or_else(|| invalid("`arguments` is not an array".to_owned()))?;
    let fits = arguments.len() == 2
        && arguments[0]
            .as_str()
            .is_some_and(|a| parse_address(a).is_ok())
        && arguments[1]
            .as_str()
            .is_some_and(|a| a.parse::<u64>().is_ok());
    if !fits {
        return Err(invalid(format!(
            "{id} takes (address, u64 in a string), got {}",
            Value::Array(arguments.clone())
        )));
    }
    Ok(())
}

type Shared = State<Arc<Node>>;
type Params = Query<HashMap<String, String>>;

async fn around(State(node): Shared, request: Request, next: Next) -> Response {
    let request = record(&node.seen, request).await;
    let delay = *node.delay.lock();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut response = next.run(request).await;
    let info = node.info();
    let headers = response.headers_mut();
    for (name, value) in info.headers() {
        headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
    }
    response
}

async fn ledger_info(State(node): Shared) -> Reply {
    node.ledger_requests.fetch_add(1, Ordering::SeqCst);
    answer(StatusCode::OK, node.info().json())
}

async fn healthy(State(node): Shared, Query(query): Params) -> Reply {
    if let Some(text) = query.get("duration_secs") {
        let seconds = text
            .parse::<u32>()
            .map_err(|_| invalid_input(format!("failed to parse duration_secs {text:?}")))?;
        let behind = now_usec().saturating_sub(node.info().timestamp_usec);
        if behind > u64::from(seconds) * 1_000_000 {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "health_check_failed",
                "The latest ledger info timestamp is less than the expected timestamp",
            ));
        }
    }
    answer(StatusCode::OK, json!({"message": "aptos-node:ok"}))
}

const ROUTES: [(&str, &str); 21] = [
    ("get", "/"),
    ("get", "/-/healthy"),
    ("get", "/spec"),
    ("get", "/blocks/by_height/{block_height}"),
    ("get", "/blocks/by_version/{version}"),
    ("get", "/transactions"),
    ("post", "/transactions"),
    ("get", "/transactions/by_hash/{txn_hash}"),
    ("get", "/transactions/by_version/{txn_version}"),
    ("get", "/transactions/wait_by_hash/{txn_hash}"),
    ("post", "/transactions/simulate"),
    ("post", "/transactions/batch"),
    ("post", "/transactions/encode_submission"),
    ("get", "/estimate_gas_price"),
    ("get", "/accounts/{address}"),
    ("get", "/accounts/{address}/resources"),
    ("get", "/accounts/{address}/resource/{resource_type}"),
    ("get", "/accounts/{address}/events/{creation_number}"),
    (
        "get",
        "/accounts/{address}/events/{event_handle}/{field_name}",
    ),
    ("post", "/tables/{table_handle}/item"),
    ("post", "/view"),
];

fn openapi() -> Value {
    let mut paths = Map::new();
    for (method, path) in ROUTES {
        let entry = paths.entry(path.to_owned()).or_insert_with(|| json!({}));
        entry[method] = json!({"responses": {"200": {"description": "OK"}}});
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Aptos Node API (l1gate test stand-in)", "version": "1.2.0"},
        "servers": [{"url": "/v1"}],
        "paths": paths,
    })
}

async fn spec_json() -> Reply {
    answer(StatusCode::OK, openapi())
}

async fn spec_yaml() -> Response {
    let mut yaml = String::from(
        "openapi: 3.0.0\ninfo:\n  title: Aptos Node API (l1gate test stand-in)\n  version: 1.2.0\nservers:\n  - url: /v1\npaths:\n",
    );
    for (method, path) in ROUTES {
        yaml.push_str(&format!(
            "  \"{path}\":\n    {method}:\n      responses:\n        \"200\":\n          description: OK\n"
        ));
    }
    ([(header::CONTENT_TYPE, "application/x-yaml")], yaml).into_response()
}

fn with_transactions(query: &HashMap<String, String>) -> Result<bool, ApiError> {
    match query.get("with_transactions").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(invalid_input(format!(
            "failed to parse with_transactions {other:?} as a bool"
        ))),
    }
}

async fn block_by_height(
    State(node): Shared,
    Path(height): Path<String>,
    Query(query): Params,
) -> Reply {
    let height = parse_u64("block_height", &height)?;
    let full = with_transactions(&query)?;
    let ledger = node.ledger.lock();
    let info = node.info_of(&ledger);
    if height > info.block_height() {
        return Err(not_found(
            "block_not_found",
            format!(
                "Block not found by Block height({height}), the latest is {}",
                info.block_height()
            ),
        ));
    }
    if height < info.oldest_block_height() {
        return Err(not_found(
            "block_pruned",
            format!(
                "Block({height}) has been pruned, the oldest is {}",
                info.oldest_block_height()
            ),
        ));
    }
    answer(StatusCode::OK, node.block(&ledger, height, full))
}

async fn block_by_version(
    State(node): Shared,
    Path(version): Path<String>,
    Query(query): Params,
) -> Reply {
    let version = parse_u64("version", &version)?;
    let full = with_transactions(&query)?;
    let ledger = node.ledger.lock();
    node.info_of(&ledger).check_version(version)?;
    answer(
        StatusCode::OK,
        node.block(&ledger, version / VERSIONS_PER_BLOCK, full),
    )
}

async fn transactions(State(node): Shared, Query(query): Params) -> Reply {
    let limit = page_limit(&query, TRANSACTIONS_PAGE, TRANSACTIONS_MAX)?;
    let start = query_u64(&query, "start")?;
    let ledger = node.ledger.lock();
    let latest = ledger.version;
    let start = start.unwrap_or_else(|| latest.saturating_sub(limit - 1));
    if start > latest {
        return Err(invalid_input(format!(
            "Given start value ({start}) is higher than the current ledger version, it must be < {latest}"
        )));
    }
    node.info_of(&ledger).check_version(start)?;
    let end = (start + limit - 1).min(latest);
    let list = (start..=end)
        .map(|v| node.transaction(&ledger, v))
        .collect();
    answer(StatusCode::OK, Value::Array(list))
}

async fn transaction_by_version(State(node): Shared, Path(version): Path<String>) -> Reply {
    let version = parse_u64("txn_version", &version)?;
    let ledger = node.ledger.lock();
    if version > ledger.version {
        return Err(not_found(
            "transaction_not_found",
            format!("Transaction not found by Transaction version({version})"),
        ));
    }
    node.info_of(&ledger).check_version(version)?;
    answer(StatusCode::OK, node.transaction(&ledger, version))
}

async fn transaction_by_hash(State(node): Shared, Path(hash): Path<String>) -> Reply {
    node.by_hash(&hash)
}

async fn submit(State(node): Shared, headers: HeaderMap, body: Bytes) -> Reply {
    let pending = node.enqueue(submission(&headers, &body)?)?;
    answer(StatusCode::ACCEPTED, pending)
}

async fn simulate(State(node): Shared, headers: HeaderMap, body: Bytes) -> Reply {
    let submission = match body_kind(&headers)? {
        BodyKind::Json => {
            let submission = submission_from_json(&parse_json(&body)?)?;
            let signature = submission.fields["signature"]["signature"]
                .as_str()
                .unwrap_or_default();
            let digits = signature.strip_prefix("0x").unwrap_or(signature);
            if digits.is_empty() || digits.bytes().any(|b| b != b'0') {
                return Err(invalid_input(
                    "Simulated transactions must have a non-valid signature",
                ));
            }
            submission
        }
        BodyKind::Bcs => submission_from_bcs(&body)?,
    };
    let info = node.info();
    let mut txn = submission.fields;
    txn.extend(
        json!({
            "type": "user_transaction",
            "version": (info.ledger_version + 1).to_string(),
            "hash": submission.hash,
            "state_change_hash": "0x0",
            "event_root_hash": some_hash(node.chain_id, "simulated/events"),
            "state_checkpoint_hash": null,
            "gas_used": "8",
            "success": true,
            "vm_status": "Executed successfully",
            "accumulator_root_hash": "0x0",
            "changes": [],
            "events": [],
            "timestamp": info.timestamp_usec.to_string(),
        })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    );
    let mut response = answer(StatusCode::OK, json!([txn]))?;
    response
        .headers_mut()
        .insert("x-aptos-gas-used", HeaderValue::from_static("8"));
    Ok(response)
}

async fn batch(State(node): Shared, headers: HeaderMap, body: Bytes) -> Reply {
    if let BodyKind::Bcs = body_kind(&headers)? {
        return answer(StatusCode::ACCEPTED, json!({"transaction_failures": []}));
    }
    let value = parse_json(&body)?;
    let items = value
        .as_array()
        .ok_or_else(|| invalid_input("the batch is not a JSON array"))?;
    if items.len() > BATCH_MAX {
        return Err(invalid_input(format!(
            "Submitted too many transactions: {}, while limit is {BATCH_MAX}",
            items.len()
        )));
    }
    let submissions = items
        .iter()
        .map(submission_from_json)
        .collect::<Result<Vec<_>, _>>()?;
    let mut failures = Vec::new();
    for (index, submission) in submissions.into_iter().enumerate() {
        if let Err(error) = node.enqueue(submission) {
            failures.push(json!({
                "error": {"message": error.message, "error_code": error.code, "vm_error_code": null},
                "transaction_index": index,
            }));
        }
    }
    let status = if failures.is_empty() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::PARTIAL_CONTENT
    };
    answer(status, json!({"transaction_failures": failures}))
}

async fn encode_submission(State(node): Shared, body: Bytes) -> Reply {
    let value = parse_json(&body)?;
    let (sender, sequence_number, fields) = request_fields(&value)?;
    check_payload(&fields["payload"])?;
    let number = |name: &str| {
        fields[name]
            .as_str()
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or_default()
    };
    let mut bytes = Sha256::digest(b"APTOS::RawTransaction").to_vec();
    bytes.extend(hex::decode(&sender[2..]).unwrap_or_default());
    bytes.extend(sequence_number.to_le_bytes());
    bytes.extend(Sha256::digest(fields["payload"].to_string().as_bytes()));
    for name in [
        "max_gas_amount",
        "gas_unit_price",
        "expiration_timestamp_secs",
    ] {
        bytes.extend(number(name).to_le_bytes());
    }
    bytes.push(node.chain_id);
    answer(StatusCode::OK, json!(format!("0x{}", hex::encode(bytes))))
}

async fn estimate_gas_price() -> Reply {
    answer(
        StatusCode::OK,
        json!({"deprioritized_gas_estimate": 100, "gas_estimate": 100, "prioritized_gas_estimate": 150}),
    )
}

async fn account(State(node): Shared, Path(address): Path<String>, Query(query): Params) -> Reply {
    let address = parse_address(&address)?;
    let ledger = node.ledger.lock();
    if let Some(version) = query_u64(&query, "ledger_version")? {
        node.info_of(&ledger).check_version(version)?;
    }
    Node::account_exists(&address)?;
    answer(
        StatusCode::OK,
        json!({
            "sequence_number": Node::next_sequence(&ledger, &address).to_string(),
            "authentication_key": address,
        }),
    )
}

/// The resources of `address` after the version checks.
fn resources_of(
    node: &Node,
    address: &str,
    query: &HashMap<String, String>,
) -> Result<Vec<Value>, ApiError> {
    let address = parse_address(address)?;
    let ledger = node.ledger.lock();
    if let Some(version) = query_u64(query, "ledger_version")? {
        node.info_of(&ledger).check_version(version)?;
    }
    Node::account_exists(&address)?;
    Ok(node.resources(&ledger, &address).unwrap_or_default())
}

fn cursor(index: usize) -> String {
    format!("0x{}", hex::encode(format!("resource:{index}")))
}

fn parse_cursor(text: &str) -> Option<usize> {
    let bytes = hex::decode(text.strip_prefix("0x").unwrap_or(text)).ok()?;
    String::from_utf8(bytes)
        .ok()?
        .strip_prefix("resource:")?
        .parse()
        .ok()
}

async fn resources(
    State(node): Shared,
    Path(address): Path<String>,
    Query(query): Params,
) -> Reply {
    let limit = page_limit(&query, RESOURCES_MAX, RESOURCES_MAX)? as usize;
    let start = match query.get("start") {
        None => 0,
        Some(text) => parse_cursor(text)
            .ok_or_else(|| invalid_input(format!("invalid cursor start={text:?}")))?,
    };
    let all = resources_of(&node, &address, &query)?;
    let end = start.saturating_add(limit).min(all.len());
    let page: Vec<Value> = all.get(start..end).unwrap_or_default().to_vec();
    let mut response = answer(StatusCode::OK, Value::Array(page))?;
    if end < all.len() {
        let next = HeaderValue::from_str(&cursor(end)).unwrap_or(HeaderValue::from_static(""));
        response.headers_mut().insert("x-aptos-cursor", next);
    }
    Ok(response)
}

/// The resource `tag` of `address`.
fn find_resource(
    node: &Node,
    address: &str,
    tag: &str,
    query: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let tag = normalize_struct_tag(tag)?;
    resources_of(node, address, query)?
        .into_iter()
        .find(|r| r["type"] == tag.as_str())
        .ok_or_else(|| {
            not_found(
                "resource_not_found",
                format!("Resource not found by Address({address}), Struct tag({tag})"),
            )
        })
}

async fn resource(
    State(node): Shared,
    Path((address, tag)): Path<(String, String)>,
    Query(query): Params,
) -> Reply {
    answer(
        StatusCode::OK,
        find_resource(&node, &address, &tag, &query)?,
    )
}

/// A page of the events of stream `creation` of `address`.
fn events_page(
    node: &Node,
    address: &str,
    creation: u64,
    query: &HashMap<String, String>,
) -> Reply {
    let limit = page_limit(query, EVENTS_PAGE, EVENTS_MAX)?;
    let start = query_u64(query, "start")?;
    let streams = Node::streams(address).ok_or_else(|| {
        not_found(
            "account_not_found",
            format!("Account not found by Address({})", show_address(address)),
        )
    })?;
    if !node.event_reader.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!(
                "Failed to find events by key {creation}/{}: the indexer reader is not available",
                show_address(address)
            ),
        ));
    }
    let stream = streams
        .into_iter()
        .find(|s| s.creation == creation)
        .ok_or_else(|| {
            not_found(
                "resource_not_found",
                format!(
                    "No event stream with creation number {creation} at Address({})",
                    show_address(address)
                ),
            )
        })?;
    let first = start.unwrap_or_else(|| stream.count.saturating_sub(limit));
    let last = stream.count.min(first.saturating_add(limit));
    let events = (first..last)
        .map(|sequence| Node::event(address, stream, sequence))
        .collect();
    answer(StatusCode::OK, Value::Array(events))
}

async fn events_by_creation_number(
    State(node): Shared,
    Path((address, creation)): Path<(String, String)>,
    Query(query): Params,
) -> Reply {
    let address = parse_address(&address)?;
    let creation = parse_u64("creation_number", &creation)?;
    events_page(&node, &address, creation, &query)
}

async fn events_by_handle(
    State(node): Shared,
    Path((address, handle, field)): Path<(String, String, String)>,
    Query(query): Params,
) -> Reply {
    let canonical = parse_address(&address)?;
    if !is_identifier(&field) {
        return Err(invalid_input(format!("'field_name' invalid: {field:?}")));
    }
    page_limit(&query, EVENTS_PAGE, EVENTS_MAX)?;
    let resource = find_resource(&node, &address, &handle, &HashMap::new())?;
    let value = resource["data"].get(&field).ok_or_else(|| {
        not_found(
            "struct_field_not_found",
            format!("Struct field not found by {}::{field}", resource["type"]),
        )
    })?;
    let creation = value["guid"]["id"]["creation_num"]
        .as_str()
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| invalid_input(format!("field({field}) type is not EventHandle struct")))?;
    events_page(&node, &canonical, creation, &query)
}

/// `key` of the one table, when `handle` names it.
fn table_value(handle: &str, key: &str) -> Result<u64, ApiError> {
    match (handle == table_handle(), key) {
        (true, key) if key == the_account() => Ok(250),
        (true, key) if key == framework() => Ok(1),
        _ => Err(not_found(
            "table_item_not_found",
            format!("Table Item not found by Table handle({handle}), Table key({key})"),
        )),
    }
}

async fn table_item(
    State(node): Shared,
    Path(handle): Path<String>,
    Query(query): Params,
    body: Bytes,
) -> Reply {
    let handle = parse_address(&handle)?;
    if let Some(version) = query_u64(&query, "ledger_version")? {
        node.info().check_version(version)?;
    }
    let request = parse_json(&body)?;
    let field = |name: &str| {
        request[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| invalid_input(format!("missing field `{name}`")))
    };
    let (key_type, value_type) = (field("key_type")?, field("value_type")?);
    let key = request
        .get("key")
        .ok_or_else(|| invalid_input("missing field `key`"))?;
    if handle == table_handle() && (key_type != "address" || value_type != "u64") {
        return Err(invalid_input(format!(
            "table {handle} maps address to u64, not {key_type} to {value_type}"
        )));
    }
    let key = key
        .as_str()
        .ok_or_else(|| invalid_input(format!("key {key} is not an address")))?;
    let key = parse_address(key)?;
    answer(
        StatusCode::OK,
        json!(table_value(&handle, &key)?.to_string()),
    )
}

async fn table_raw_item(Path(handle): Path<String>, body: Bytes) -> Reply {
    let handle = parse_address(&handle)?;
    let request = parse_json(&body)?;
    let key = request["key"]
        .as_str()
        .ok_or_else(|| invalid_input("missing field `key` (hex bytes)"))?;
    let bytes = hex::decode(key.strip_prefix("0x").unwrap_or(key))
        .map_err(|e| invalid_input(format!("key {key:?}: {e}")))?;
    // A key of another length is no address, so no item of the table.
    let key = format!("0x{:0>64}", hex::encode(&bytes));
    let value = table_value(if bytes.len() == 32 { &handle } else { "" }, &key)?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-bcs")],
        value.to_le_bytes().to_vec(),
    )
        .into_response())
}

async fn view(State(node): Shared, Query(query): Params, body: Bytes) -> Reply {
    let request = parse_json(&body)?;
    if let Some(version) = query_u64(&query, "ledger_version")? {
        node.info().check_version(version)?;
    }
    let function = request["function"]
        .as_str()
        .ok_or_else(|| invalid_input("missing field `function`"))?;
    let id = normalize_function(function)
        .ok_or_else(|| invalid_input(format!("invalid function id {function:?}")))?;
    let type_arguments: Vec<String> = match &request["type_arguments"] {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|t| t.as_str().and_then(normalize_type))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid_input("`type_arguments` holds a non-type"))?,
        _ => return Err(invalid_input("`type_arguments` is not an array")),
    };
    let arguments = match &request["arguments"] {
        Value::Null => Vec::new(),
        Value::Array(items) => items.clone(),
        _ => return Err(invalid_input("`arguments` is not an array")),
    };
    let signature = |types: usize, args: usize| -> Result<(), ApiError> {
        if type_arguments.len() != types || arguments.len() != args {
            return Err(invalid_input(format!(
                "{id} takes {types} type arguments and {args} arguments"
            )));
        }
        Ok(())
    };
    let address_argument = || -> Result<String, ApiError> {
        arguments[0]
            .as_str()
            .ok_or_else(|| invalid_input("argument 0 is not an address"))
            .and_then(parse_address)
    };
    let ledger = node.ledger.lock();
    let values = match id.as_str() {
        "0x1::coin::balance" => {
            signature(1, 1)?;
            let owner = address_argument()?;
            if owner != the_account() || type_arguments[0] != APTOS_COIN {
                return Err(aborted(format!(
                    "Execution aborted: no CoinStore<{}> at {}",
                    type_arguments[0],
                    show_address(&owner)
                )));
            }
            json!([ACCOUNT_BALANCE.to_string()])
        }
        "0x1::account::get_sequence_number" => {
            signature(0, 1)?;
            let owner = address_argument()?;
            if Node::streams(&owner).is_none() {
                return Err(aborted(format!(
                    "Execution aborted: no account at {}",
                    show_address(&owner)
                )));
            }
            json!([Node::next_sequence(&ledger, &owner).to_string()])
        }
        "0x1::chain_id::get" => {
            signature(0, 0)?;
            json!([node.chain_id])
        }
        "0x1::timestamp::now_microseconds" => {
            signature(0, 0)?;
            json!([node.info_of(&ledger).timestamp_usec.to_string()])
        }
        _ => return Err(invalid_input(format!("function {id} not found"))),
    };
    let mut response = answer(StatusCode::OK, values)?;
    response
        .headers_mut()
        .insert("x-aptos-gas-used", HeaderValue::from_static("1"));
    Ok(response)
}

async fn node_fallback() -> ApiError {
    not_found("web_framework_error", "not found")
}

/// A stand-in Aptos node REST API on loopback; it stops when dropped.
pub struct AptosNode {
    addr: SocketAddr,
    node: Arc<Node>,
    _stop: StopOnDrop,
}

impl AptosNode {
    /// Starts a node of chain `chain_id` on 127.0.0.1:0.
    pub async fn start(chain_id: u8) -> AptosNode {
        let node = Arc::new(Node {
            chain_id,
            started_usec: now_usec(),
            ledger: Mutex::new(Ledger {
                version: FIRST_LEDGER_VERSION,
                blocks: BTreeMap::new(),
                pool: BTreeMap::new(),
                sequence: BTreeMap::new(),
            }),
            seen: Mutex::new(Vec::new()),
            ledger_requests: AtomicUsize::new(0),
            lag: Mutex::new(Duration::ZERO),
            event_reader: AtomicBool::new(true),
            delay: Mutex::new(Duration::ZERO),
        });
        let v1 = Router::new()
            .route("/", get(ledger_info))
            .route("/-/healthy", get(healthy))
            .route("/spec", get(spec_json))
            .route("/spec.json", get(spec_json))
            .route("/spec.yaml", get(spec_yaml))
            .route("/blocks/by_height/{height}", get(block_by_height))
            .route("/blocks/by_version/{version}", get(block_by_version))
            .route("/transactions", get(transactions).post(submit))
            .route("/transactions/by_hash/{hash}", get(transaction_by_hash))
            .route(
                "/transactions/wait_by_hash/{hash}",
                get(transaction_by_hash),
            )
            .route(
                "/transactions/by_version/{version}",
                get(transaction_by_version),
            )
            .route("/transactions/simulate", post(simulate))
            .route("/transactions/batch", post(batch))
            .route("/transactions/encode_submission", post(encode_submission))
            .route("/estimate_gas_price", get(estimate_gas_price))
            .route("/accounts/{address}", get(account))
            .route("/accounts/{address}/resources", get(resources))
            .route("/accounts/{address}/resource/{tag}", get(resource))
            .route(
                "/accounts/{address}/events/{creation_number}",
                get(events_by_creation_number),
            )
            .route(
                "/accounts/{address}/events/{handle}/{field}",
                get(events_by_handle),
            )
            .route("/tables/{handle}/item", post(table_item))
            .route("/tables/{handle}/raw_item", post(table_raw_item))
            .route("/view", post(view));
        let router = Router::new()
            .nest("/v1", v1)
            .route("/v1/", get(ledger_info))
            .fallback(node_fallback)
            .layer(middleware::from_fn_with_state(node.clone(), around))
            .with_state(node.clone());
        let stop = StopOnDrop::default();
        let addr = serve(router, stop.subscribe()).await;
        AptosNode {
            addr,
            node,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn rest_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// How many `GET /v1` it answered.
    pub fn ledger_requests(&self) -> usize {
        self.node.ledger_requests.load(Ordering::SeqCst)
    }

    /// Every request, in arrival order.
    pub fn requests(&self) -> Vec<Seen> {
        self.node.seen.lock().clone()
    }

    /// `ledger_timestamp` (and the header) becomes now − `lag`.
    pub fn set_ledger_lag(&self, lag: Duration) {
        *self.node.lag.lock() = lag;
    }

    /// `false`: the events routes answer 500 `internal_error`.
    pub fn set_event_reader(&self, up: bool) {
        self.node.event_reader.store(up, Ordering::SeqCst);
    }

    /// Every answer waits `delay` first (after the request is recorded).
    pub fn set_delay(&self, delay: Duration) {
        *self.node.delay.lock() = delay;
    }

    /// An existing account with resources and events, in the long form.
    pub fn account(&self) -> String {
        the_account()
    }

    /// The creation number of the account's deposit events (40 of them).
    pub fn deposit_creation_number(&self) -> u64 {
        DEPOSIT_CREATION
    }
}

/// What the indexer says it indexed last.
const INDEXED_VERSION: u64 = FIRST_LEDGER_VERSION;

/// A GraphQL token.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Int(i64),
    Text(String),
    Punct(char),
}

fn tokenize(query: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = query.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == ',' {
            chars.next();
        } else if c == '#' {
            while chars.next().is_some_and(|c| c != '\n') {}
        } else if "{}():".contains(c) {
            tokens.push(Token::Punct(c));
            chars.next();
        } else if c.is_ascii_alphabetic() || c == '_' {
            let mut name = String::new();
            while let Some(&c) = chars
                .peek()
                .filter(|c| c.is_ascii_alphanumeric() || **c == '_')
            {
                name.push(c);
                chars.next();
            }
            tokens.push(Token::Name(name));
        } else if c.is_ascii_digit() || c == '-' {
            let mut number = String::from(c);
            chars.next();
            while let Some(&c) = chars.peek().filter(|c| c.is_ascii_digit()) {
                number.push(c);
                chars.next();
            }
            tokens.push(Token::Int(number.parse().ok()?));
        } else if c == '"' {
            chars.next();
            let mut text = String::new();
            loop {
                match chars.next()? {
                    '"' => break,
                    c => text.push(c),
                }
            }
            tokens.push(Token::Text(text));
        } else {
            return None;
        }
    }
    Some(tokens)
}

/// One top-level field of a query.
#[derive(Debug)]
struct Selection {
    name: String,
    arguments: Vec<(String, Token)>,
    fields: Vec<String>,
}

/// `query Name { field(arg: value) { a b } … }` and its shorthand.
fn parse_query(query: &str) -> Option<Vec<Selection>> {
    let tokens = tokenize(query)?;
    let mut at = 0;
    let next = |at: &mut usize| {
        let token = tokens.get(*at).cloned();
        *at += 1;
        token
    };
    if tokens.first() == Some(&Token::Name("query".to_owned())) {
        at += 1;
        if matches!(tokens.get(at), Some(Token::Name(_))) {
            at += 1;
        }
    }
    if next(&mut at)? != Token::Punct('{') {
        return None;
    }
    let mut selections = Vec::new();
    loop {
        let name = match next(&mut at)? {
            Token::Punct('}') => break,
            Token::Name(name) => name,
            _ => return None,
        };
        let mut selection = Selection {
            name,
            arguments: Vec::new(),
            fields: Vec::new(),
        };
        if tokens.get(at) == Some(&Token::Punct('(')) {
            at += 1;
            loop {
                match next(&mut at)? {
                    Token::Punct(')') => break,
                    Token::Name(argument) => {
                        if next(&mut at)? != Token::Punct(':') {
                            return None;
                        }
                        let value = next(&mut at)?;
                        if matches!(value, Token::Punct(_)) {
                            return None;
                        }
                        selection.arguments.push((argument, value));
                    }
                    _ => return None,
                }
            }
        }
        if tokens.get(at) == Some(&Token::Punct('{')) {
            at += 1;
            loop {
                match next(&mut at)? {
                    Token::Punct('}') => break,
                    Token::Name(field) => selection.fields.push(field),
                    _ => return None,
                }
            }
        }
        selections.push(selection);
    }
    (at == tokens.len()).then_some(selections)
}

fn graphql_error(path: &str, code: &str, message: &str) -> Response {
    let body =
        json!({"errors": [{"extensions": {"path": path, "code": code}, "message": message}]});
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// The answer to one GraphQL request body.
fn run_graphql(chain_id: u8, body: &[u8]) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return graphql_error(
            "$",
            "invalid-json",
            "Error in $: Failed reading: not a valid json value",
        );
    };
    let Some(query) = request.get("query") else {
        return graphql_error("$", "parse-failed", "key \"query\" not found");
    };
    let Some(selections) = query.as_str().and_then(parse_query) else {
        return graphql_error("$.query", "validation-failed", "not a valid graphql query");
    };
    let mut data = Map::new();
    for selection in selections {
        let path = format!("$.selectionSet.{}", selection.name);
        if selection.name != "ledger_infos" {
            let message = format!("field '{}' not found in type: 'query_root'", selection.name);
            return graphql_error(&path, "validation-failed", &message);
        }
        let mut limit = 1;
        for (argument, value) in &selection.arguments {
            match (argument.as_str(), value) {
                ("limit", Token::Int(n)) if *n >= 0 => limit = (*n).min(1),
                ("limit", _) => {
                    return graphql_error(
                        &format!("{path}.args.limit"),
                        "validation-failed",
                        "expected a 32-bit integer for type 'Int'",
                    );
                }
                _ => {
                    let message = format!("'ledger_infos' has no argument named '{argument}'");
                    return graphql_error(&path, "validation-failed", &message);
                }
            }
        }
        if selection.fields.is_empty() {
            return graphql_error(
                &path,
                "validation-failed",
                "missing selection set for 'ledger_infos'",
            );
        }
        let mut row = Map::new();
        for field in &selection.fields {
            let value = match field.as_str() {
                "chain_id" => json!(chain_id),
                "version" => json!(INDEXED_VERSION),
                "__typename" => json!("ledger_infos"),
                other => {
                    let message = format!("field '{other}' not found in type: 'ledger_infos'");
                    return graphql_error(
                        &format!("{path}.selectionSet.{other}"),
                        "validation-failed",
                        &message,
                    );
                }
            };
            row.insert(field.clone(), value);
        }
        let rows = if limit == 0 {
            Vec::new()
        } else {
            vec![Value::Object(row)]
        };
        data.insert(selection.name, Value::Array(rows));
    }
    (StatusCode::OK, axum::Json(json!({"data": data}))).into_response()
}

struct IndexerState {
    chain_id: u8,
    seen: Mutex<Vec<Seen>>,
}

async fn graphql(State(state): State<Arc<IndexerState>>, request: Request) -> Response {
    let request = record(&state.seen, request).await;
    let body = request
        .into_body()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    run_graphql(state.chain_id, &body)
}

async fn indexer_fallback(State(state): State<Arc<IndexerState>>, request: Request) -> Response {
    record(&state.seen, request).await;
    let body = json!({"path": "$", "error": "resource does not exist", "code": "not-found"});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// A stand-in GraphQL indexer on loopback (a server of its own); it stops
/// when dropped.
pub struct Indexer {
    addr: SocketAddr,
    state: Arc<IndexerState>,
    _stop: StopOnDrop,
}

impl Indexer {
    /// Starts an indexer of chain `chain_id` on 127.0.0.1:0.
    pub async fn start(chain_id: u8) -> Indexer {
        let state = Arc::new(IndexerState {
            chain_id,
            seen: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .route("/v1/graphql", post(graphql))
            .fallback(indexer_fallback)
            .with_state(state.clone());
        let stop = StopOnDrop::default();
        let addr = serve(router, stop.subscribe()).await;
        Indexer {
            addr,
            state,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:PORT/v1/graphql`.
    pub fn url(&self) -> String {
        format!("http://{}/v1/graphql", self.addr)
    }

    /// Every request, in arrival order.
    pub fn requests(&self) -> Vec<Seen> {
        self.state.seen.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: (&str, &str) = ("content-type", "application/json");

    async fn get(url: &str) -> Answer {
        send("GET", url, &[], b"").await
    }

    async fn post(url: &str, body: &Value) -> Answer {
        send("POST", url, &[JSON], body.to_string().as_bytes()).await
    }

    /// Asserts an error answer: status, code, the node's body shape.
    #[track_caller]
    fn assert_error(answer: &Answer, status: u16, code: &str) {
        let body = answer.json();
        assert_eq!(answer.status, status, "{body}");
        assert_eq!(answer.error_code(), code, "{body}");
        assert!(body["message"].is_string(), "{body}");
        assert!(
            body["vm_error_code"].is_null() || body["vm_error_code"].is_u64(),
            "{body}"
        );
        assert!(answer.header("x-aptos-ledger-version").is_some(), "{body}");
    }

    fn number(value: &Value) -> u64 {
        value.as_str().unwrap().parse().unwrap()
    }

    fn transfer(sender: &str, sequence_number: u64, signature: &str) -> Value {
        json!({
            "sender": sender,
            "sequence_number": sequence_number.to_string(),
            "max_gas_amount": "2000",
            "gas_unit_price": "100",
            "expiration_timestamp_secs": "4000000000",
            "payload": {
                "type": "entry_function_payload",
                "function": "0x1::aptos_account::transfer",
                "type_arguments": [],
                "arguments": ["0x1", "5"],
            },
            "signature": {"type": "ed25519_signature", "public_key": "0x12", "signature": signature},
        })
    }

    #[tokio::test]
    async fn aptos_standin_ledger_info_carries_the_ledger_headers() {
        let node = AptosNode::start(4).await;
        let url = node.rest_url();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"),
            "{url}"
        );

        let reply = send("GET", &url, &[("x-trace", "t-1")], b"").await;
        assert_eq!(reply.status, 200);
        let info = reply.json();
        assert_eq!(info["chain_id"], 4);
        for field in [
            "epoch",
            "ledger_version",
            "oldest_ledger_version",
            "ledger_timestamp",
            "block_height",
            "oldest_block_height",
            "node_role",
            "git_hash",
        ] {
            assert!(info[field].is_string(), "{field}: {info}");
        }
        assert_eq!(info["node_role"], "full_node");
        assert!(number(&info["oldest_ledger_version"]) > 0);
        assert!(number(&info["oldest_block_height"]) > 0);
        assert!(number(&info["ledger_version"]) > number(&info["oldest_ledger_version"]));
        for (header, field) in [
            ("x-aptos-chain-id", "chain_id"),
            ("x-aptos-ledger-version", "ledger_version"),
            ("x-aptos-ledger-oldest-version", "oldest_ledger_version"),
            ("x-aptos-epoch", "epoch"),
            ("x-aptos-block-height", "block_height"),
            ("x-aptos-oldest-block-height", "oldest_block_height"),
        ] {
            let want = info[field].to_string().replace('"', "");
            assert_eq!(reply.header(header), Some(want.as_str()), "{header}");
        }
        let stamp: u64 = reply
            .header("x-aptos-ledger-timestampusec")
            .unwrap()
            .parse()
            .unwrap();
        assert!(now_usec().abs_diff(stamp) < 5_000_000);
        assert!(now_usec().abs_diff(number(&info["ledger_timestamp"])) < 5_000_000);
        assert_eq!(get(&format!("{url}/")).await.status, 200);
        assert_eq!(node.ledger_requests(), 2);

        // What it saw.
        let seen = node.requests();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].method, "GET");
        assert_eq!(seen[0].path_and_query, "/v1");
        assert_eq!(seen[0].header("X-Trace"), Some("t-1"));
        assert!(seen[0].body.is_empty());

        // A lagging node: the timestamp and the health check follow.
        node.set_ledger_lag(Duration::from_secs(60));
        let info = get(&url).await.json();
        let behind = now_usec() - number(&info["ledger_timestamp"]);
        assert!((59_000_000..65_000_000).contains(&behind), "{behind}");
        let health = get(&format!("{url}/-/healthy")).await;
        assert_eq!(health.status, 200);
        assert_eq!(health.json(), json!({"message": "aptos-node:ok"}));
        let health = get(&format!("{url}/-/healthy?duration_secs=30")).await;
        assert_error(&health, 503, "health_check_failed");
        node.set_ledger_lag(Duration::ZERO);
        assert_eq!(
            get(&format!("{url}/-/healthy?duration_secs=30"))
                .await
                .status,
            200
        );

        // The spec, and a route the node does not have (headers all the same).
        let spec = get(&format!("{url}/spec")).await.json();
        assert_eq!(spec["openapi"], "3.0.0");
        assert!(spec["paths"]["/accounts/{address}/events/{creation_number}"]["get"].is_object());
        let yaml = get(&format!("{url}/spec.yaml")).await;
        assert!(
            String::from_utf8(yaml.body)
                .unwrap()
                .starts_with("openapi: 3.0.0")
        );
        assert_error(
            &get(&format!("{url}/nowhere")).await,
            404,
            "web_framework_error",
        );
        assert_eq!(node.ledger_requests(), 3);
    }

    #[tokio::test]
    async fn aptos_standin_accounts_and_addresses() {
        let node = AptosNode::start(2).await;
        let url = node.rest_url();
        let account = node.account();
        assert_eq!(account.len(), 66);
        let short = format!("0x{}", account[2..].trim_start_matches('0'));
        for form in [
            account.clone(),
            short.clone(),
            account[2..].to_owned(),
            account.to_uppercase().replace("0X", "0x"),
        ] {
            let reply = get(&format!("{url}/accounts/{form}")).await;
            assert_eq!(reply.status, 200, "{form}");
            let data = reply.json();
            assert_eq!(data["sequence_number"], "17");
            assert_eq!(data["authentication_key"], account.as_str());
        }
        assert_eq!(get(&format!("{url}/accounts/0x1")).await.status, 200);
        for bad in [
            "0x",
            "1",
            "01",
            "x1",
            "0xzz",
            "invalid",
            &format!("0x{}", "1".repeat(65)),
        ] {
            assert_error(
                &get(&format!("{url}/accounts/{bad}")).await,
                400,
                "invalid_input",
            );
        }
        assert_error(
            &get(&format!("{url}/accounts/0x2")).await,
            404,
            "account_not_found",
        );

        // One resource by its type, in any address form.
        let coin = format!(
            "{url}/accounts/{short}/resource/0x0001::coin::CoinStore%3C0x1::aptos_coin::AptosCoin%3E"
        );
        let store = get(&coin).await.json();
        assert_eq!(
            store["type"],
            "0x1::coin::CoinStore<0x1::aptos_coin::AptosCoin>"
        );
        assert_eq!(store["data"]["coin"]["value"], "123456789");
        let handle = &store["data"]["deposit_events"];
        assert_eq!(handle["counter"], "40");
        assert_eq!(handle["guid"]["id"]["addr"], account.as_str());
        assert_eq!(
            handle["guid"]["id"]["creation_num"],
            node.deposit_creation_number().to_string()
        );
        let missing =
            format!("{url}/accounts/{account}/resource/0x1::coin::CoinStore%3C0x1::nope::Nope%3E");
        assert_error(&get(&missing).await, 404, "resource_not_found");
        assert_error(
            &get(&format!("{url}/accounts/{account}/resource/nope")).await,
            400,
            "invalid_input",
        );
        let elsewhere = format!("{url}/accounts/0x2/resource/0x1::account::Account");
        assert_error(&get(&elsewhere).await, 404, "account_not_found");
    }

    #[tokio::test]
    async fn aptos_standin_resources_page_with_the_cursor_header() {
        let node = AptosNode::start(2).await;
        let base = format!("{}/accounts/{}/resources", node.rest_url(), node.account());
        let all = get(&base).await;
        assert_eq!(all.status, 200);
        assert!(all.header("x-aptos-cursor").is_none());
        let all = all.json();
        assert_eq!(all.as_array().unwrap().len(), 4);
        for resource in all.as_array().unwrap() {
            assert!(
                resource["type"].is_string() && resource["data"].is_object(),
                "{resource}"
            );
        }

        // Pages of three: a cursor while more remain, then none.
        let mut collected = Vec::new();
        let mut url = format!("{base}?limit=3");
        let mut pages = 0;
        loop {
            let page = get(&url).await;
            assert_eq!(page.status, 200);
            pages += 1;
            collected.extend(page.json().as_array().unwrap().clone());
            match page.header("x-aptos-cursor") {
                Some(cursor) => url = format!("{base}?limit=3&start={cursor}"),
                None => break,
            }
        }
        assert_eq!(pages, 2);
        assert_eq!(Value::Array(collected), all);

        // ledger_version is checked, then the latest state is served.
        let info = get(&node.rest_url()).await.json();
        let latest = number(&info["ledger_version"]);
        let oldest = number(&info["oldest_ledger_version"]);
        assert_eq!(
            get(&format!("{base}?ledger_version={oldest}")).await.json(),
            all
        );
        let ahead = get(&format!("{base}?ledger_version={}", latest + 1)).await;
        assert_error(&ahead, 404, "version_not_found");
        let pruned = get(&format!("{base}?ledger_version={}", oldest - 1)).await;
        assert_error(&pruned, 404, "version_pruned");
        for bad in ["limit=0", "limit=x", "start=zz", "ledger_version=x"] {
            assert_error(&get(&format!("{base}?{bad}")).await, 400, "invalid_input");
        }
        let unknown = format!("{}/accounts/0x2/resources", node.rest_url());
        assert_error(&get(&unknown).await, 404, "account_not_found");
    }

    #[tokio::test]
    async fn aptos_standin_events_page_by_sequence_number() {
        let node = AptosNode::start(2).await;
        let account = node.account();
        let creation = node.deposit_creation_number();
        let base = format!("{}/accounts/{account}/events/{creation}", node.rest_url());
        let sequence = |events: &Value| -> Vec<u64> {
            events
                .as_array()
                .unwrap()
                .iter()
                .map(|e| number(&e["sequence_number"]))
                .collect()
        };

        // No start: the newest 25, ascending.
        let newest = get(&base).await.json();
        assert_eq!(sequence(&newest), (15..40).collect::<Vec<_>>());
        let event = &newest[0];
        assert_eq!(event["type"], "0x1::coin::DepositEvent");
        assert_eq!(event["guid"]["creation_number"], creation.to_string());
        assert_eq!(event["guid"]["account_address"], account.as_str());
        assert!(event["data"]["amount"].is_string());
        assert!(number(&event["version"]) >= 5_000);

        // Paging forward from 0 by last + 1 reads every event once, versions rising.
        let mut seen = Vec::new();
        let mut start = 0;
        loop {
            let page = get(&format!("{base}?start={start}&limit=7")).await.json();
            let numbers = sequence(&page);
            if numbers.is_empty() {
                break;
            }
            assert!(numbers.len() <= 7);
            start = numbers.last().unwrap() + 1;
            seen.extend(page.as_array().unwrap().clone());
        }
        assert_eq!(
            sequence(&Value::Array(seen.clone())),
            (0..40).collect::<Vec<_>>()
        );
        assert!(
            seen.windows(2)
                .all(|w| number(&w[0]["version"]) < number(&w[1]["version"]))
        );

        // The cap is 100: a larger limit is clamped, not refused.
        assert_eq!(
            sequence(&get(&format!("{base}?start=0&limit=1000")).await.json()).len(),
            40
        );
        assert_eq!(
            sequence(&get(&format!("{base}?start=39&limit=100")).await.json()),
            vec![39]
        );
        assert_eq!(get(&format!("{base}?start=40")).await.json(), json!([]));
        for bad in ["limit=0", "limit=70000", "start=-1", "start=x"] {
            assert_error(&get(&format!("{base}?{bad}")).await, 400, "invalid_input");
        }

        // The handle route reads the same stream.
        let store = "0x1::coin::CoinStore%3C0x1::aptos_coin::AptosCoin%3E";
        let by_handle = format!(
            "{}/accounts/{account}/events/{store}/deposit_events",
            node.rest_url()
        );
        assert_eq!(get(&by_handle).await.json(), newest);
        let by_field = |field: &str| {
            format!(
                "{}/accounts/{account}/events/{store}/{field}",
                node.rest_url()
            )
        };
        assert_error(
            &get(&by_field("nothing_here")).await,
            404,
            "struct_field_not_found",
        );
        assert_error(&get(&by_field("frozen")).await, 400, "invalid_input");
        let other = format!(
            "{}/accounts/{account}/events/0x1::nope::Nope/deposit_events",
            node.rest_url()
        );
        assert_error(&get(&other).await, 404, "resource_not_found");

        // Errors of the creation-number route.
        let url = node.rest_url();
        assert_error(
            &get(&format!("{url}/accounts/{account}/events/99")).await,
            404,
            "resource_not_found",
        );
        assert_error(
            &get(&format!("{url}/accounts/{account}/events/abc")).await,
            400,
            "invalid_input",
        );
        assert_error(
            &get(&format!("{url}/accounts/0x2/events/2")).await,
            404,
            "account_not_found",
        );
        assert_error(
            &get(&format!("{url}/accounts/0xq/events/2")).await,
            400,
            "invalid_input",
        );
        node.set_event_reader(false);
        assert_error(&get(&base).await, 500, "internal_error");
        assert_error(&get(&by_handle).await, 500, "internal_error");
        node.set_event_reader(true);
        assert_eq!(get(&base).await.status, 200);
    }

    #[tokio::test]
    async fn aptos_standin_blocks_by_height_and_version() {
        let node = AptosNode::start(2).await;
        let url = node.rest_url();
        let info = get(&url).await.json();
        let height = number(&info["block_height"]);
        let oldest_height = number(&info["oldest_block_height"]);
        let latest = number(&info["ledger_version"]);
        let oldest = number(&info["oldest_ledger_version"]);

        let block = get(&format!("{url}/blocks/by_height/{height}"))
            .await
            .json();
        assert_eq!(number(&block["block_height"]), height);
        assert_eq!(number(&block["last_version"]), latest);
        assert!(block["block_hash"].as_str().unwrap().starts_with("0x"));
        assert!(block["transactions"].is_null());
        let full = get(&format!(
            "{url}/blocks/by_height/{height}?with_transactions=true"
        ))
        .await
        .json();
        let first = number(&full["first_version"]);
        let txns = full["transactions"].as_array().unwrap();
        assert_eq!(txns.len() as u64, latest - first + 1);
        assert_eq!(txns[0]["type"], "block_metadata_transaction");
        assert_eq!(txns[1]["type"], "user_transaction");
        assert_eq!(txns.last().unwrap()["type"], "state_checkpoint_transaction");
        let by_version = get(&format!("{url}/blocks/by_version/{}", first + 2))
            .await
            .json();
        assert_eq!(by_version, block);
        assert_eq!(
            get(&format!("{url}/blocks/by_height/{oldest_height}"))
                .await
                .status,
            200
        );

        let answers = [
            (format!("by_height/{}", height + 1), 404, "block_not_found"),
            (
                format!("by_height/{}", oldest_height - 1),
                404,
                "block_pruned",
            ),
            ("by_height/x".to_owned(), 400, "invalid_input"),
            (
                format!("by_height/{height}?with_transactions=yes"),
                400,
                "invalid_input",
            ),
            (
                format!("by_version/{}", latest + 1),
                404,
                "version_not_found",
            ),
            (format!("by_version/{}", oldest - 1), 404, "version_pruned"),
            ("by_version/-1".to_owned(), 400, "invalid_input"),
        ];
        for (path, status, code) in answers {
            assert_error(&get(&format!("{url}/blocks/{path}")).await, status, code);
        }
    }

    #[tokio::test]
    async fn aptos_standin_transactions_by_page_version_and_hash() {
        let node = AptosNode::start(2).await;
        let url = node.rest_url();
        let info = get(&url).await.json();
        let latest = number(&info["ledger_version"]);
        let oldest = number(&info["oldest_ledger_version"]);

        let recent = get(&format!("{url}/transactions")).await.json();
        let versions: Vec<u64> = recent
            .as_array()
            .unwrap()
            .iter()
            .map(|t| number(&t["version"]))
            .collect();
        assert_eq!(versions, (latest - 24..=latest).collect::<Vec<_>>());
        let page = get(&format!("{url}/transactions?start={oldest}&limit=3"))
            .await
            .json();
        assert_eq!(page.as_array().unwrap().len(), 3);
        assert_eq!(page[0]["version"], oldest.to_string());
        let clamped = get(&format!("{url}/transactions?start={oldest}&limit=500"))
            .await
            .json();
        assert_eq!(clamped.as_array().unwrap().len(), 100);

        let one = get(&format!("{url}/transactions/by_version/{oldest}"))
            .await
            .json();
        assert_eq!(one, page[0]);
        let hash = one["hash"].as_str().unwrap();
        assert_eq!(
            get(&format!("{url}/transactions/by_hash/{hash}"))
                .await
                .json(),
            one
        );
        assert_eq!(
            get(&format!("{url}/transactions/wait_by_hash/{}", &hash[2..]))
                .await
                .json(),
            one
        );

        let zeros = format!("0x{}", "0".repeat(64));
        let answers = [
            (
                format!("transactions?start={}", latest + 1),
                400,
                "invalid_input",
            ),
            (
                format!("transactions?start={}", oldest - 1),
                404,
                "version_pruned",
            ),
            ("transactions?limit=0".to_owned(), 400, "invalid_input"),
            (
                format!("transactions/by_version/{}", latest + 1),
                404,
                "transaction_not_found",
            ),
            (
                format!("transactions/by_version/{}", oldest - 1),
                404,
                "version_pruned",
            ),
            (
                "transactions/by_version/abc".to_owned(),
                400,
                "invalid_input",
            ),
            (
                format!("transactions/by_hash/{zeros}"),
                404,
                "transaction_not_found",
            ),
            (
                format!("transactions/wait_by_hash/{zeros}"),
                404,
                "transaction_not_found",
            ),
            ("transactions/by_hash/0x12".to_owned(), 400, "invalid_input"),
        ];
        for (path, status, code) in answers {
            assert_error(&get(&format!("{url}/{path}")).await, status, code);
        }
    }

    #[tokio::test]
    async fn aptos_standin_submit_then_wait_commits() {
        let node = AptosNode::start(2).await;
        let url = node.rest_url();
        let account = node.account();
        let before = number(&get(&url).await.json()["ledger_version"]);
        let sequence =
            number(&get(&format!("{url}/accounts/{account}")).await.json()["sequence_number"]);
        let signature = format!("0x{}", "ab".repeat(64));

        // Encode, then submit: 202 and a pending transaction.
        let mut unsigned = transfer(&account, sequence, &signature);
        unsigned.as_object_mut().unwrap().remove("signature");
        let encoded = post(&format!("{url}/transactions/encode_submission"), &unsigned).await;
        assert_eq!(encoded.status, 200);
        assert!(encoded.json().as_str().unwrap().starts_with("0x"));
        let body = transfer(&account, sequence, &signature);
        let pending = post(&format!("{url}/transactions"), &body).await;
        assert_eq!(pending.status, 202);
        let pending = pending.json();
        let hash = pending["hash"].as_str().unwrap().to_owned();
        assert_eq!(hash.len(), 66);
        assert_eq!(pending["sender"], account.as_str());
        assert_eq!(pending["sequence_number"], sequence.to_string());
        assert_eq!(pending["payload"], body["payload"]);
        for field in [
            "gas_unit_price",
            "max_gas_amount",
            "expiration_timestamp_secs",
        ] {
            assert!(pending[field].is_string(), "{field}");
        }

        // The same body again is the same transaction; another for that
        // sequence number is an invalid update.
        assert_eq!(
            post(&format!("{url}/transactions"), &body).await.json(),
            pending
        );
        let mut other = body.clone();
        other["payload"]["arguments"][1] = json!("6");
        let update = post(&format!("{url}/transactions"), &other).await;
        assert_error(&update, 400, "invalid_transaction_update");

        // Pending at the first lookup, committed from the next one on.
        let first = get(&format!("{url}/transactions/wait_by_hash/{hash}"))
            .await
            .json();
        assert_eq!(first["type"], "pending_transaction");
        assert_eq!(first["hash"], hash.as_str());
        let committed = get(&format!("{url}/transactions/wait_by_hash/{hash}"))
            .await
            .json();
        assert_eq!(committed["type"], "user_transaction");
        assert_eq!(committed["success"], true);
        assert_eq!(committed["hash"], hash.as_str());
        let version = number(&committed["version"]);
        assert!(version > before);
        assert_eq!(
            get(&format!("{url}/transactions/by_hash/{hash}"))
                .await
                .json(),
            committed
        );
        assert_eq!(
            get(&format!("{url}/transactions/by_version/{version}"))
                .await
                .json(),
            committed
        );
        let after = get(&url).await.json();
        assert!(number(&after["ledger_version"]) >= version);
        let account_now = get(&format!("{url}/accounts/{account}")).await.json();
        assert_eq!(number(&account_now["sequence_number"]), sequence + 1);
        let block = get(&format!(
            "{url}/blocks/by_version/{version}?with_transactions=true"
        ))
        .await
        .json();
        assert_eq!(block["transactions"][1], committed);

        // An old sequence number, a missing signature, a bad sender.
        let old = post(&format!("{url}/transactions"), &body).await;
        assert_error(&old, 400, "sequence_number_too_old");
        let mut unsigned = transfer(&account, sequence + 1, &signature);
        unsigned.as_object_mut().unwrap().remove("signature");
        assert_error(
            &post(&format!("{url}/transactions"), &unsigned).await,
            400,
            "invalid_input",
        );
        let stranger = transfer("0xnope", 0, &signature);
        assert_error(
            &post(&format!("{url}/transactions"), &stranger).await,
            400,
            "invalid_input",
        );
        let broken = send("POST", &format!("{url}/transactions"), &[JSON], b"{").await;
        assert_error(&broken, 400, "invalid_input");

        // BCS bodies: sender and sequence number read from the first 40 bytes.
        let mut bcs = hex::decode(&account[2..]).unwrap();
        bcs.extend((sequence + 1).to_le_bytes());
        bcs.extend(b"payload and signature");
        let bcs_type = ("content-type", BCS_CONTENT_TYPE);
        let reply = send("POST", &format!("{url}/transactions"), &[bcs_type], &bcs).await;
        assert_eq!(reply.status, 202);
        assert_eq!(reply.json()["sender"], account.as_str());
        assert_eq!(reply.json()["sequence_number"], (sequence + 1).to_string());
        let short = send(
            "POST",
            &format!("{url}/transactions"),
            &[bcs_type],
            b"short",
        )
        .await;
        assert_error(&short, 400, "invalid_input");
        let text = ("content-type", "text/plain");
        let wrong = send("POST", &format!("{url}/transactions"), &[text], b"{}").await;
        assert_error(&wrong, 415, "web_framework_error");
    }

    #[tokio::test]
    async fn aptos_standin_encode_submission_errors() {
        let node = AptosNode::start(2).await;
        let url = format!("{}/transactions/encode_submission", node.rest_url());
        let mut request = transfer(&node.account(), 17, "0x00");
        request.as_object_mut().unwrap().remove("signature");
        let with = |path: &str, value: Value| {
            let mut request = request.clone();
            request["payload"][path] = value;
            request
        };

        let ok = post(&url, &request).await;
        assert_eq!(ok.status, 200);
        let again = post(&url, &request).await;
        assert_eq!(again.json(), ok.json(), "deterministic");
        let coin = with("function", json!("0x1::coin::transfer"));
        let coin = {
            let mut coin = coin;
            coin["payload"]["type_arguments"] = json!(["0x1::aptos_coin::AptosCoin"]);
            coin
        };
        assert_eq!(post(&url, &coin).await.status, 200);

        let answers = [
            (
                with("function", json!("0x1::aptos_account::nope")),
                "function_not_found",
            ),
            (
                with("function", json!("0xcafe::m::f")),
                "function_not_found",
            ),
            (with("type_arguments", json!(["u64"])), "type_error"),
            (with("function", json!("0x1::coin::transfer")), "type_error"),
            (with("arguments", json!(["0x1"])), "invalid_payload"),
            (
                with("arguments", json!(["not an address", "5"])),
                "invalid_payload",
            ),
            (with("arguments", json!(["0x1", 5])), "invalid_payload"),
            (
                with("type", json!("module_bundle_payload")),
                "invalid_payload",
            ),
            (
                with("function", json!("aptos_account::transfer")),
                "invalid_payload",
            ),
        ];
        for (body, code) in answers {
            assert_error(&post(&url, &body).await, 400, code);
        }
        let mut coin_wrong = coin_type_arguments(&request, json!(["not a type"]));
        coin_wrong["payload"]["function"] = json!("0x1::coin::transfer");
        assert_error(&post(&url, &coin_wrong).await, 400, "type_error");
        let mut missing = request.clone();
        missing.as_object_mut().unwrap().remove("max_gas_amount");
        assert_error(&post(&url, &missing).await, 400, "invalid_input");
        let mut no_payload = request.clone();
        no_payload.as_object_mut().unwrap().remove("payload");
        assert_error(&post(&url, &no_payload).await, 400, "invalid_input");
    }

    fn coin_type_arguments(request: &Value, type_arguments: Value) -> Value {
        let mut request = request.clone();
        request["payload"]["type_arguments"] = type_arguments;
        request
    }

    #[tokio::test]
    async fn aptos_standin_simulate_and_batch() {
        let node = AptosNode::start(2).await;
        let url = node.rest_url();
        let account = node.account();
        let zeros = format!("0x{}", "0".repeat(128));
        let signed = format!("0x{}", "ab".repeat(64));

        let simulated = post(
            &format!("{url}/transactions/simulate"),
            &transfer(&account, 17, &zeros),
        )
        .await;
        assert_eq!(simulated.status, 200);
        assert_eq!(simulated.header("x-aptos-gas-used"), Some("8"));
        let simulated = simulated.json();
        assert_eq!(simulated[0]["type"], "user_transaction");
        assert_eq!(simulated[0]["success"], true);
        let valid = post(
            &format!("{url}/transactions/simulate"),
            &transfer(&account, 17, &signed),
        )
        .await;
        assert_error(&valid, 400, "invalid_input");
        // Simulation submits nothing.
        let ok = post(
            &format!("{url}/transactions"),
            &transfer(&account, 17, &signed),
        )
        .await;
        assert_eq!(ok.status, 202);

        let batch_url = format!("{url}/transactions/batch");
        let two = json!([transfer(&account, 18, &signed), transfer("0x1", 0, &signed)]);
        let reply = post(&batch_url, &two).await;
        assert_eq!(reply.status, 202);
        assert_eq!(reply.json(), json!({"transaction_failures": []}));
        let partial = post(
            &batch_url,
            &json!([
                transfer(&account, 19, &signed),
                transfer(&account, 3, &signed)
            ]),
        )
        .await;
        assert_eq!(partial.status, 206);
        let failures = partial.json()["transaction_failures"].clone();
        assert_eq!(failures.as_array().unwrap().len(), 1);
        assert_eq!(failures[0]["transaction_index"], 1);
        assert_eq!(
            failures[0]["error"]["error_code"],
            "sequence_number_too_old"
        );
        let eleven: Vec<Value> = (0..11)
            .map(|i| transfer(&account, 30 + i, &signed))
            .collect();
        assert_error(
            &post(&batch_url, &json!(eleven)).await,
            400,
            "invalid_input",
        );
        assert_error(
            &post(&batch_url, &transfer(&account, 40, &signed)).await,
            400,
            "invalid_input",
        );
        assert_error(
            &post(&batch_url, &json!([{"sender": "0x1"}])).await,
            400,
            "invalid_input",
        );
    }

    #[tokio::test]
    async fn aptos_standin_tables_view_and_gas() {
        let node = AptosNode::start(9).await;
        let url = node.rest_url();
        let account = node.account();
        let store = get(&format!(
            "{url}/accounts/{account}/resource/0x3::token::TokenStore"
        ))
        .await
        .json();
        let handle = store["data"]["tokens"]["handle"]
            .as_str()
            .unwrap()
            .to_owned();

        let item_url = format!("{url}/tables/{handle}/item");
        let item = |key: &str| json!({"key_type": "address", "value_type": "u64", "key": key});
        let reply = post(&item_url, &item(&account)).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.json(), json!("250"));
        assert_eq!(post(&item_url, &item("0x1")).await.json(), json!("1"));
        assert_error(
            &post(&item_url, &item("0x2")).await,
            404,
            "table_item_not_found",
        );
        let elsewhere = format!("{url}/tables/0x99/item");
        assert_error(
            &post(&elsewhere, &item("0x1")).await,
            404,
            "table_item_not_found",
        );
        assert_error(
            &post(&format!("{url}/tables/nope/item"), &item("0x1")).await,
            400,
            "invalid_input",
        );
        assert_error(
            &post(&item_url, &json!({"key": "0x1"})).await,
            400,
            "invalid_input",
        );
        let mistyped = json!({"key_type": "u64", "value_type": "u64", "key": "1"});
        assert_error(&post(&item_url, &mistyped).await, 400, "invalid_input");

        let raw_url = format!("{url}/tables/{handle}/raw_item");
        let raw = post(&raw_url, &json!({"key": account})).await;
        assert_eq!(raw.status, 200);
        assert_eq!(raw.header("content-type"), Some("application/x-bcs"));
        assert_eq!(raw.body, 250u64.to_le_bytes());
        assert_error(
            &post(&raw_url, &json!({"key": "0x0102"})).await,
            404,
            "table_item_not_found",
        );
        assert_error(
            &post(&raw_url, &json!({"key": "0xzz"})).await,
            400,
            "invalid_input",
        );

        let view_url = format!("{url}/view");
        let call = |function: &str, types: Value, args: Value| json!({"function": function, "type_arguments": types, "arguments": args});
        let balance = post(
            &view_url,
            &call("0x1::coin::balance", json!([APTOS_COIN]), json!([account])),
        )
        .await;
        assert_eq!(balance.status, 200);
        assert_eq!(balance.json(), json!(["123456789"]));
        let chain = post(&view_url, &call("0x1::chain_id::get", json!([]), json!([]))).await;
        assert_eq!(chain.json(), json!([9]));
        let sequence = post(
            &view_url,
            &call(
                "0x1::account::get_sequence_number",
                json!([]),
                json!(["0x1"]),
            ),
        )
        .await;
        assert_eq!(sequence.json(), json!(["0"]));
        let now = post(
            &view_url,
            &call("0x1::timestamp::now_microseconds", json!([]), json!([])),
        )
        .await;
        assert!(now.json()[0].is_string());
        let nobody = post(
            &view_url,
            &call("0x1::coin::balance", json!([APTOS_COIN]), json!(["0x2"])),
        )
        .await;
        assert_error(&nobody, 400, "invalid_input");
        assert_eq!(nobody.json()["vm_error_code"], ABORTED);
        for body in [
            call("0x1::nope::nope", json!([]), json!([])),
            call("0x1::coin::balance", json!([]), json!([account])),
            call("0x1::coin::balance", json!([APTOS_COIN]), json!([])),
            call("not a function", json!([]), json!([])),
            json!({"type_arguments": []}),
        ] {
            assert_error(&post(&view_url, &body).await, 400, "invalid_input");
        }
        let at = format!("{view_url}?ledger_version=1");
        assert_error(
            &post(&at, &call("0x1::chain_id::get", json!([]), json!([]))).await,
            404,
            "version_pruned",
        );

        let gas = get(&format!("{url}/estimate_gas_price")).await.json();
        assert_eq!(gas["gas_estimate"], 100);
        assert_eq!(gas["prioritized_gas_estimate"], 150);
        assert_eq!(gas["deprioritized_gas_estimate"], 100);
    }

    #[tokio::test]
    async fn aptos_standin_delays_answers_and_stops_when_dropped() {
        let node = AptosNode::start(2).await;
        let url = node.rest_url();
        node.set_delay(Duration::from_millis(400));
        let slow = tokio::time::timeout(Duration::from_millis(100), get(&url)).await;
        assert!(slow.is_err(), "answered within the delay");
        // Recorded on arrival, but never answered.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(node.requests().len(), 1);
        assert_eq!(node.ledger_requests(), 0);
        let started = std::time::Instant::now();
        assert_eq!(get(&url).await.status, 200);
        assert!(started.elapsed() >= Duration::from_millis(400));
        node.set_delay(Duration::ZERO);
        assert_eq!(get(&url).await.status, 200);

        let addr = node.addr;
        drop(node);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn aptos_standin_indexer_answers_graphql() {
        let indexer = Indexer::start(3).await;
        let url = indexer.url();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/v1/graphql"),
            "{url}"
        );
        let query = |q: &str| json!({"query": q});

        let reply = post(&url, &query("{ ledger_infos(limit: 1) { chain_id } }")).await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.json(),
            json!({"data": {"ledger_infos": [{"chain_id": 3}]}})
        );
        let named = query("query Ledger { ledger_infos(limit: 1) { chain_id version } }");
        let reply = post(&url, &named).await.json();
        assert_eq!(reply["data"]["ledger_infos"][0]["chain_id"], 3);
        assert_eq!(reply["data"]["ledger_infos"][0]["version"], INDEXED_VERSION);
        let none = post(&url, &query("{ ledger_infos(limit: 0) { chain_id } }")).await;
        assert_eq!(none.json(), json!({"data": {"ledger_infos": []}}));

        let error = |answer: &Answer| {
            assert_eq!(answer.status, 200, "Hasura answers errors with 200");
            let body = answer.json();
            assert!(body.get("data").is_none(), "{body}");
            assert!(body["errors"][0]["message"].is_string(), "{body}");
            body["errors"][0]["extensions"]["code"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let bad_json = send("POST", &url, &[JSON], b"{not json").await;
        assert_eq!(error(&bad_json), "invalid-json");
        assert_eq!(error(&post(&url, &json!({"q": 1})).await), "parse-failed");
        for bad in [
            "{ ledger_infos(limit: 1) { chain_id }",
            "{ ledger_infos(limit: 1) { nope } }",
            "{ blocks { height } }",
            "{ ledger_infos(where: 1) { chain_id } }",
            "{ ledger_infos }",
        ] {
            assert_eq!(
                error(&post(&url, &query(bad)).await),
                "validation-failed",
                "{bad}"
            );
        }
        let elsewhere = send("GET", &url.replace("/v1/graphql", "/v1/other"), &[], b"").await;
        assert_eq!(elsewhere.status, 404);

        let seen = indexer.requests();
        assert_eq!(seen.len(), 11);
        assert_eq!(seen[0].method, "POST");
        assert_eq!(seen[0].path_and_query, "/v1/graphql");
        assert_eq!(seen[0].header("content-type"), Some("application/json"));
        assert_eq!(
            seen[0].body,
            query("{ ledger_infos(limit: 1) { chain_id } }")
                .to_string()
                .into_bytes()
        );
    }
}
