//! The exchange's WebSocket subscription types that views serve, the
//! channels their messages go out on, and the message every one of them
//! is: `{"channel":…,"data":…}`.
//!
//! A view lists its subscription types beside its renderings
//! ([`crate::views::Served::WS`]): the type's name (which is also its
//! channel's), how its fields become the view's key, and the message a new
//! subscriber gets before any frame. The WebSocket protocol looks the type
//! up by name ([`crate::views::ws_channel`]), so a new type is one entry in
//! its view's file.

use std::cmp::Ordering;
use std::fmt;

use axum::extract::ws::Utf8Bytes;
use engine::book::l2::L2Level;
use engine::views::registry::Key;
use serde_json::{Map, Value, json};

/// One exchange WebSocket subscription type a view serves.
#[derive(Debug)]
pub struct WsType {
    /// `type` in the subscription, and the channel its messages go out on.
    pub name: &'static str,
    /// The subscription's fields (as sent, `type` included) checked and
    /// normalised; the error names the field.
    pub parse: fn(&Map<String, Value>) -> Result<Parsed, String>,
    /// The `data` of a message sent when the subscription opens, before any
    /// frame, given the account it follows (the fills channels' empty
    /// snapshot: l1gate keeps no fill history).
    pub opening: Option<fn(&str) -> Value>,
}

/// A subscription's fields, normalised.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Parsed {
    /// The view key it reads.
    pub key: Key,
    /// The account it follows (counted against the distinct-users limit).
    pub user: Option<String>,
    /// An option that changes no frame but makes another subscription of
    /// the same key (`userFills`' `aggregateByTime`).
    pub variant: u8,
}

impl Parsed {
    /// A subscription to `key` following no account.
    pub fn of(key: Key) -> Self {
        Self {
            key,
            user: None,
            variant: 0,
        }
    }

    /// A subscription to `key` following `user`.
    pub fn user(key: Key, user: String) -> Self {
        Self {
            key,
            user: Some(user),
            variant: 0,
        }
    }
}

/// A channel that frames of views are rendered for: one subscription type
/// of one view, and its place among that view's types.
#[derive(Clone, Copy)]
pub struct Channel {
    ty: &'static WsType,
    at: usize,
}

/// The most subscription types one view serves (the fills view's three).
pub const MAX_PER_VIEW: usize = 4;

impl Channel {
    /// The `at`th of a view's types, `ty`.
    pub(crate) fn new(ty: &'static WsType, at: usize) -> Self {
        Self { ty, at }
    }

    /// The channel's place among its view's types (below
    /// [`MAX_PER_VIEW`]).
    pub fn index(self) -> usize {
        self.at
    }

    /// The channel name on the wire.
    pub fn name(self) -> &'static str {
        self.ty.name
    }

    /// Its subscription type.
    pub fn ws_type(self) -> &'static WsType {
        self.ty
    }
}

impl PartialEq for Channel {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Channel {}

impl PartialOrd for Channel {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Channel {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `{"channel":…,"data":…}` as text, `data` written straight from what it
/// is (a JSON value, or the fields of a view's frame: for messages of
/// thousands of entries, an order book's snapshot or a market maker's open
/// orders, a JSON tree of them would cost a map and its keys per entry).
pub fn message(channel: &str, data: &impl serde::Serialize) -> Utf8Bytes {
    #[derive(serde::Serialize)]
    struct Message<'a, T> {
        channel: &'a str,
        data: &'a T,
    }
    // Writing to a `String`'s bytes fails only when a value refuses to
    // serialise (none of the views' does), and leaves UTF-8 only.
    let text = serde_json::to_string(&Message { channel, data }).unwrap_or_default();
    Utf8Bytes::from(text)
}

/// An aggregated level as the exchange's `WsLevel`.
pub fn level(level: &L2Level) -> Value {
    json!({ "px": level.px.to_string(), "sz": level.sz.to_string(), "n": level.n })
}

/// Aggregated levels, in order.
pub fn levels(levels: &[L2Level]) -> Vec<Value> {
    levels.iter().map(level).collect()
}

/// A required non-blank string field.
///
/// # Errors
/// What is wrong with it, naming the field.
pub fn string(fields: &Map<String, Value>, name: &str) -> Result<String, String> {
    match fields.get(name) {
        Some(Value::String(value)) if !value.trim().is_empty() => Ok(value.clone()),
        Some(Value::String(_)) => Err(format!("{name}: must not be blank")),
        Some(Value::Null) | None => Err(format!("{name}: required")),
        Some(other) => Err(format!(
            "{name}: must be a string, got {}",
            common::clipped(&other.to_string())
        )),
    }
}

/// An optional string field (`null` or absent: empty).
///
/// # Errors
/// What is wrong with it, naming the field.
pub fn optional_string(fields: &Map<String, Value>, name: &str) -> Result<String, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(value)) => Ok(value.clone()),
        Some(other) => Err(format!(
            "{name}: must be a string, got {}",
            common::clipped(&other.to_string())
        )),
    }
}

/// An optional unsigned integer field (`null` = absent).
///
/// # Errors
/// What is wrong with it, naming the field.
pub fn uint(fields: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{name}: must be a non-negative integer, got {number}")),
        Some(other) => Err(format!(
            "{name}: must be an integer, got {}",
            common::clipped(&other.to_string())
        )),
    }
}

/// An optional boolean field (`null` or absent: false).
///
/// # Errors
/// What is wrong with it, naming the field.
pub fn flag(fields: &Map<String, Value>, name: &str) -> Result<bool, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(other) => Err(format!(
            "{name}: must be a boolean, got {}",
            common::clipped(&other.to_string())
        )),
    }
}

/// The required `user` field: an address, lowercased.
///
/// # Errors
/// What is wrong with it, naming the field.
pub fn user(fields: &Map<String, Value>) -> Result<String, String> {
    let user = string(fields, "user")?;
    common::address("user", &user)
}
