//! l1gate's REST rules for Aptos-family nodes, checked before
//! any upstream work: a request that breaks one is answered `400
//! invalid_input` naming the parameter or field, in the node's own error
//! shape, and never reaches the node.
//!
//! What is checked (paths are below `/v1`):
//!
//! | Where | Rule |
//! |---|---|
//! | `accounts/{address}/…`, `tables/{handle}/…` | `0x` + 1–64 hex digits, or exactly 64 hex digits (the node's own parser) |
//! | `blocks/by_version/{version}`, `transactions/by_version/{version}` | unsigned 64-bit integer |
//! | `blocks/by_height/{height}` | unsigned 64-bit integer |
//! | `…/events/{creation_number}` | unsigned 64-bit integer |
//! | `transactions/by_hash/{hash}`, `wait_by_hash/{hash}` | `0x` + 64 hex digits |
//! | `ledger_version` query | unsigned 64-bit integer |
//! | `start` query | unsigned 64-bit integer; on `resources` and `modules` an opaque hex cursor |
//! | `limit` query | 1–65535; on the events routes 1–[`MAX_EVENTS_LIMIT`], and [`DEFAULT_EVENTS_LIMIT`] is sent when omitted |
//! | `with_transactions` query | `true` or `false` |
//! | JSON bodies of submit, simulate, encode, batch, view, table item | JSON, and the required fields present with the right JSON type |
//!
//! Bodies in the node's BCS content types
//! (`application/x.aptos.signed_transaction+bcs`, `application/x-bcs`) are
//! the node's to check. Everything else — the checks that need the chain
//! (does the account exist, is the function there) — is the node's, and its
//! answers pass through unchanged.

use serde_json::Value;

/// Events per request when the caller gives no `limit`.
pub const DEFAULT_EVENTS_LIMIT: u64 = 25;

/// Largest `limit` on the events routes: l1gate accepts up to 1000, and a
/// node configured for fewer answers fewer, which callers page past
/// (`start` = last `sequence_number` + 1).
pub const MAX_EVENTS_LIMIT: u64 = 1000;

/// What a checked request is, for the parts of the gateway that treat some
/// routes specially.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /v1`: ledger info, served from the per-network cache.
    Ledger,
    /// `GET /v1/transactions/wait_by_hash/{hash}`: its own longer timeout.
    Wait,
    /// `POST /v1/graphql`: the network's indexer, not its node.
    GraphQl,
    /// Anything else, relayed to the node.
    Node,
}

/// A request that passed the rules: its route and the query to send (the
/// caller's, with the events default `limit` added when it was missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Which route.
    pub route: Route,
    /// The query string to relay (without `?`), if any.
    pub query: Option<String>,
}

/// The request's route (`rest` = path below `/v1`, no leading `/`), without
/// any rule: what the gateway uses for networks outside the Move family.
pub fn route_of(method: &str, rest: &str) -> Route {
    let rest = rest.trim_end_matches('/');
    match (method, rest) {
        ("GET", "") => Route::Ledger,
        ("POST", "graphql") => Route::GraphQl,
        ("GET", path) if path.starts_with("transactions/wait_by_hash/") => Route::Wait,
        _ => Route::Node,
    }
}

/// Checks a request against l1gate's REST rules.
///
/// `rest` is the path below `/v1` without its leading `/`, percent-encoded
/// as received; `query` the raw query string; `content_type` the request's
/// `Content-Type`; `body` its bytes.
///
/// # Errors
/// The `invalid_input` message, naming the parameter or field.
pub fn check(
    method: &str,
    rest: &str,
    query: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Checked, String> {
    let route = route_of(method, rest);
    let segments: Vec<&str> = rest
        .trim_end_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let params = Query::parse(query)?;
    let mut shape = Shape::default();
    match segments.as_slice() {
        ["blocks", "by_version", version] => {
            integer("version", version)?;
            shape.flag("with_transactions");
        }
        ["blocks", "by_height", height] => {
            integer("height", height)?;
            shape.flag("with_transactions");
        }
        ["transactions"] if method == "GET" => shape.start = Start::Integer,
        ["transactions"] | ["transactions", "simulate"] if method == "POST" => {
            shape.body = Some(Body::Transaction {
                signed: true,
                encode: false,
            });
        }
        ["transactions", "by_version", version] => integer("version", version)?,
        ["transactions", "by_hash" | "wait_by_hash", hash] => transaction_hash("hash", hash)?,
        ["transactions", "encode_submission"] if method == "POST" => {
            shape.body = Some(Body::Transaction {
                signed: false,
                encode: true,
            });
        }
        ["transactions", "batch"] if method == "POST" => shape.body = Some(Body::Batch),
        ["accounts", address, tail @ ..] => {
            account_address("address", address)?;
            match tail {
                ["resources" | "modules"] => shape.start = Start::Cursor,
                ["resource", tag] => struct_tag("resource_type", tag)?,
                ["module", name] => identifier("module_name", name)?,
                ["transactions"] => shape.start = Start::Integer,
                ["events", creation_number] => {
                    integer("creation_number", creation_number)?;
                    shape.events();
                }
                ["events", handle, field] => {
                    struct_tag("event_handle", handle)?;
                    identifier("field_name", field)?;
                    shape.events();
                }
                _ => {}
            }
        }
        ["tables", handle, "item"] if method == "POST" => {
            account_address("table_handle", handle)?;
            shape.body = Some(Body::TableItem);
        }
        ["tables", handle, "raw_item"] if method == "POST" => {
            account_address("table_handle", handle)?;
            shape.body = Some(Body::RawTableItem);
        }
        ["view"] if method == "POST" => shape.body = Some(Body::View),
        _ => {}
    }
    params.check(&shape)?;
    if let Some(kind) = shape.body
        && is_json(content_type)
    {
        check_body(kind, body)?;
    }
    let query = if shape.events && params.get("limit").is_none() {
        Some(match query.filter(|q| !q.is_empty()) {
            Some(query) => format!("{query}&limit={DEFAULT_EVENTS_LIMIT}"),
            None => format!("limit={DEFAULT_EVENTS_LIMIT}"),
        })
    } else {
        query.map(str::to_owned)
    };
    Ok(Checked { route, query })
}

/// How a route reads `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Start {
    /// Whatever the node makes of it (routes with no `start`).
    #[default]
    Unchecked,
    /// A sequence number or version.
    Integer,
    /// The node's opaque pagination cursor (hex).
    Cursor,
}

/// The body a route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Transaction { signed: bool, encode: bool },
    Batch,
    TableItem,
    RawTableItem,
    View,
}

/// What one route accepts in its query and body.
#[derive(Debug, Clone, Default)]
struct Shape {
    start: Start,
    events: bool,
    flags: Vec<&'static str>,
    body: Option<Body>,
}

impl Shape {
    fn flag(&mut self, name: &'static str) {
        self.flags.push(name);
    }

    fn events(&mut self) {
        self.events = true;
        self.start = Start::Integer;
    }
}

/// A decoded query string.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name =
                decode(name).ok_or_else(|| "query: not valid percent-encoded UTF-8".to_owned())?;
            let value =
                decode(value).ok_or_else(|| format!("{name}: not valid percent-encoded UTF-8"))?;
            pairs.push((name, value));
        }
        Ok(Self(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn check(&self, shape: &Shape) -> Result<(), String> {
        for (name, value) in &self.0 {
            if self.0.iter().filter(|(n, _)| n == name).count() > 1 {
                return Err(format!("{name}: given more than once"));
            }
            match name.as_str() {
                "ledger_version" => integer("ledger_version", value)?,
                "limit" => {
                    let max = if shape.events {
                        MAX_EVENTS_LIMIT
                    } else {
                        u64::from(u16::MAX)
                    };
                    let limit = parse_u64(value).ok_or_else(|| {
                        format!(
                            "limit: {} is not an integer",
                            common::quoted(&common::bounded(value.clone()))
                        )
                    })?;
                    if limit == 0 || limit > max {
                        return Err(format!("limit: {limit} is outside 1..={max}"));
                    }
                }
                "start" => match shape.start {
                    Start::Unchecked => {}
                    Start::Integer => integer("start", value)?,
                    Start::Cursor => {
                        let digits = value.strip_prefix("0x").unwrap_or(value);
                        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return Err(format!(
                                "start: {} is not a pagination cursor (hex, as the node's X-Aptos-Cursor header gives it)",
                                common::quoted(&common::bounded(value.clone()))
                            ));
                        }
                    }
                },
                flag if shape.flags.contains(&flag) && value != "true" && value != "false" => {
                    return Err(format!(
                        "{flag}: {} is not true or false",
                        common::quoted(&common::bounded(value.clone()))
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A query name or value, decoded as the node APIs read their queries
/// (`+` is a space; `None` when it is not UTF-8 once decoded).
fn decode(text: &str) -> Option<String> {
    edge::percent::form(text)
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// A path segment, percent-decoded (`+` is a plus; `None` when it is not
/// UTF-8 once decoded).
fn segment(text: &str) -> Option<String> {
    edge::percent::component(text)
        .ok()
        .map(std::borrow::Cow::into_owned)
}

fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn integer(name: &str, text: &str) -> Result<(), String> {
    let text = segment(text).unwrap_or_else(|| text.to_owned());
    parse_u64(&text).map(drop).ok_or_else(|| {
        format!(
            "{name}: {} is not an unsigned 64-bit integer",
            common::quoted(&common::bounded(text))
        )
    })
}

/// An account address as the node parses one.
pub fn is_account_address(text: &str) -> bool {
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    match text.strip_prefix("0x") {
        Some(digits) => !digits.is_empty() && digits.len() <= 64 && hex(digits),
        None => text.len() == 64 && hex(text),
    }
}

fn account_address(name: &str, text: &str) -> Result<(), String> {
    let text = segment(text).unwrap_or_else(|| text.to_owned());
    if is_account_address(&text) {
        Ok(())
    } else {
        Err(format!(
            "{name}: {} is not an account address (0x followed by up to 64 hex digits)",
            common::quoted(&common::bounded(text))
        ))
    }
}

fn transaction_hash(name: &str, text: &str) -> Result<(), String> {
    let text = segment(text).unwrap_or_else(|| text.to_owned());
    let ok = text
        .strip_prefix("0x")
        .is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name}: {} is not a transaction hash (0x followed by 64 hex digits)",
            common::quoted(&common::bounded(text))
        ))
    }
}

/// A Move identifier: a letter or `_`, then letters, digits and `_`.
fn is_identifier(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn identifier(name: &str, text: &str) -> Result<(), String> {
    let text = segment(text).unwrap_or_else(|| text.to_owned());
    if is_identifier(&text) {
        Ok(())
    } else {
        Err(format!(
            "{name}: {} is not a Move identifier",
            common::quoted(&common::bounded(text))
        ))
    }
}

/// `<address>::<module>::<Name>`, optionally with type arguments.
fn is_struct_tag(text: &str) -> bool {
    let head = text.split('<').next().unwrap_or("");
    let parts: Vec<&str> = head.split("::").collect();
    matches!(parts.as_slice(), [address, module, name]
        if is_account_address(address) && is_identifier(module) && is_identifier(name))
        && (!text.contains('<') || text.ends_with('>'))
}

fn struct_tag(name: &str, text: &str) -> Result<(), String> {
    let text = segment(text).ok_or_else(|| format!("{name}: not valid percent-encoded UTF-8"))?;
    if is_struct_tag(&text) {
        Ok(())
    } else {
        Err(format!(
            "{name}: {} is not a struct tag (<address>::<module>::<Struct>)",
            common::quoted(&common::bounded(text))
        ))
    }
}

/// `<address>::<module>::<function>`.
fn is_function_id(text: &str) -> bool {
    matches!(text.split("::").collect::<Vec<_>>().as_slice(), [address, module, function]
        if is_account_address(address) && is_identifier(module) && is_identifier(function))
}

fn is_json(content_type: Option<&str>) -> bool {
    // The node reads a body without a content type as JSON too.
    content_type.is_none_or(|value| {
        let essence = value.split(';').next().unwrap_or("").trim();
        essence.eq_ignore_ascii_case("application/json") || essence.is_empty()
    })
}

fn check_body(kind: Body, body: &[u8]) -> Result<(), String> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("body: not JSON ({})", common::bounded(e.to_string())))?;
    match kind {
        Body::Transaction { signed, encode } => transaction("body", &value, signed, encode),
        Body::Batch => {
            let items = value
                .as_array()
                .ok_or_else(|| "body: must be a JSON array of transactions".to_owned())?;
            if items.is_empty() {
                return Err("body: the batch is empty".to_owned());
            }
            for (i, item) in items.iter().enumerate() {
                transaction(&format!("body[{i}]"), item, true, false)?;
            }
            Ok(())
        }
        Body::TableItem => {
            let object = object("body", &value)?;
            string_field("body", object, "key_type")?;
            string_field("body", object, "value_type")?;
            present("body", object, "key")
        }
        Body::RawTableItem => {
            let object = object("body", &value)?;
            present("body", object, "key")
        }
        Body::View => {
            let object = object("body", &value)?;
            let function = string_field("body", object, "function")?;
            if !is_function_id(function) {
                return Err(format!(
                    "body.function: {} is not <address>::<module>::<function>",
                    common::quoted(&common::bounded(function.to_owned()))
                ));
            }
            string_array("body", object, "type_arguments")?;
            array_field("body", object, "arguments").map(drop)
        }
    }
}

fn object<'a>(at: &str, value: &'a Value) -> Result<&'a serde_json::Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{at}: must be a JSON object"))
}

fn present(at: &str, object: &serde_json::Map<String, Value>, field: &str) -> Result<(), String> {
    match object.get(field) {
        Some(Value::Null) | None => Err(format!("{at}.{field}: required")),
        Some(_) => Ok(()),
    }
}

fn string_field<'a>(
    at: &str,
    object: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<&'a str, String> {
    present(at, object, field)?;
    object
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}.{field}: must be a string"))
}

fn array_field<'a>(
    at: &str,
    object: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<&'a Vec<Value>, String> {
    present(at, object, field)?;
    object
        .get(field)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{at}.{field}: must be an array"))
}

fn string_array(
    at: &str,
    object: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<(), String> {
    let items = array_field(at, object, field)?;
    match items.iter().position(|v| !v.is_string()) {
        Some(i) => Err(format!("{at}.{field}[{i}]: must be a string")),
        None => Ok(()),
    }
}

/// An integer the node writes as a string (`"42"`).
fn u64_string(
    at: &str,
    object: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<(), String> {
    let text = string_field(at, object, field)?;
    parse_u64(text).map(drop).ok_or_else(|| {
        format!(
            "{at}.{field}: {} is not an unsigned 64-bit integer in a string",
            common::quoted(&common::bounded(text.to_owned()))
        )
    })
}

/// A transaction request: `sender`, `sequence_number`, `payload` always;
/// the gas and expiration fields whenever they are given, and always on a
/// signed transaction; `signature` on a signed one.
fn transaction(at: &str, value: &Value, signed: bool, encode: bool) -> Result<(), String> {
    let object = object(at, value)?;
    let sender = string_field(at, object, "sender")?;
    if !is_account_address(sender) {
        return Err(format!(
            "{at}.sender: {} is not an account address",
            common::quoted(&common::bounded(sender.to_owned()))
        ));
    }
    u64_string(at, object, "sequence_number")?;
    for field in [
        "max_gas_amount",
        "gas_unit_price",
        "expiration_timestamp_secs",
    ] {
        if signed || object.get(field).is_some_and(|v| !v.is_null()) {
            u64_string(at, object, field)?;
        }
    }
    let payload = object
        .get("payload")
        .filter(|v| !v.is_null())
        .ok_or_else(|| format!("{at}.payload: required"))?;
    let payload = self::object(&format!("{at}.payload"), payload)?;
    let kind = string_field(&format!("{at}.payload"), payload, "type")?;
    if kind == "entry_function_payload" {
        let function = string_field(&format!("{at}.payload"), payload, "function")?;
        if !is_function_id(function) {
            return Err(format!(
                "{at}.payload.function: {} is not <address>::<module>::<function>",
                common::quoted(&common::bounded(function.to_owned()))
            ));
        }
        string_array(&format!("{at}.payload"), payload, "type_arguments")?;
        array_field(&format!("{at}.payload"), payload, "arguments")?;
    }
    if signed && !encode {
        let signature = object
            .get("signature")
            .filter(|v| !v.is_null())
            .ok_or_else(|| format!("{at}.signature: required"))?;
        let signature = self::object(&format!("{at}.signature"), signature)?;
        string_field(&format!("{at}.signature"), signature, "type")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(rest: &str, query: Option<&str>) -> Result<Checked, String> {
        check("GET", rest, query, None, b"")
    }

    fn post(rest: &str, body: &str) -> Result<Checked, String> {
        check(
            "POST",
            rest,
            None,
            Some("application/json"),
            body.as_bytes(),
        )
    }

    #[test]
    fn addresses_follow_the_nodes_parser() {
        for ok in ["0x1", &format!("0x{}", "a".repeat(64)), &"F".repeat(64)] {
            assert!(is_account_address(ok), "{ok}");
        }
        for bad in [
            "0x",
            "1",
            "notanaddress",
            &format!("0x{}", "a".repeat(65)),
            "0xzz",
        ] {
            assert!(!is_account_address(bad), "{bad}");
        }
        let message = get("accounts/notanaddress/resources", None).unwrap_err();
        assert!(message.starts_with("address: "), "{message}");
    }

    #[test]
    fn path_numbers_and_hashes_are_named_when_malformed() {
        for (rest, name) in [
            ("blocks/by_version/12a", "version"),
            ("blocks/by_height/-1", "height"),
            ("transactions/by_version/1.5", "version"),
            ("accounts/0x1/events/xyz", "creation_number"),
            ("transactions/by_hash/0x12", "hash"),
            ("transactions/wait_by_hash/abc", "hash"),
            ("accounts/0x1/resource/0x1::account", "resource_type"),
            (
                "accounts/0x1/events/0x1::coin::CoinStore/1bad",
                "field_name",
            ),
        ] {
            let message = get(rest, None).unwrap_err();
            assert!(
                message.starts_with(&format!("{name}: ")),
                "{rest}: {message}"
            );
        }
        let hash = format!("0x{}", "ab".repeat(32));
        assert_eq!(
            get(&format!("transactions/wait_by_hash/{hash}"), None)
                .unwrap()
                .route,
            Route::Wait
        );
        assert!(
            get(
                "accounts/0x1/resource/0x1::coin::CoinStore%3C0x1::aptos_coin::AptosCoin%3E",
                None
            )
            .is_ok()
        );
        assert!(get("blocks/by_height/18446744073709551615", None).is_ok());
        assert!(get("blocks/by_height/18446744073709551616", None).is_err());
    }

    #[test]
    fn query_parameters_are_checked_per_route() {
        for (rest, query, name) in [
            (
                "accounts/0x1/resources",
                "ledger_version=abc",
                "ledger_version",
            ),
            ("accounts/0x1/resources", "limit=0", "limit"),
            ("accounts/0x1/resources", "start=zz", "start"),
            ("accounts/0x1/events/2", "start=-3", "start"),
            ("accounts/0x1/events/2", "limit=1001", "limit"),
            ("accounts/0x1/events/2", "limit=5&limit=6", "limit"),
            (
                "blocks/by_version/5",
                "with_transactions=yes",
                "with_transactions",
            ),
        ] {
            let message = get(rest, Some(query)).unwrap_err();
            assert!(
                message.starts_with(&format!("{name}: ")),
                "{query}: {message}"
            );
        }
        assert!(get("accounts/0x1/resources", Some("start=0a1b&limit=9999")).is_ok());
        assert!(get("accounts/0x1/events/2", Some("limit=1000")).is_ok());
    }

    #[test]
    fn the_events_limit_defaults_to_25() {
        let checked = get("accounts/0x1/events/2", None).unwrap();
        assert_eq!(checked.query.as_deref(), Some("limit=25"));
        let checked = get("accounts/0x1/events/2", Some("start=4")).unwrap();
        assert_eq!(checked.query.as_deref(), Some("start=4&limit=25"));
        let checked = get("accounts/0x1/events/2", Some("limit=7")).unwrap();
        assert_eq!(checked.query.as_deref(), Some("limit=7"));
        let checked = get("accounts/0x1/resources", None).unwrap();
        assert_eq!(checked.query, None);
    }

    #[test]
    fn bodies_name_their_missing_fields() {
        let payload = r#"{"type":"entry_function_payload","function":"0x1::coin::transfer","type_arguments":[],"arguments":[]}"#;
        let encode = format!(r#"{{"sender":"0x1","sequence_number":"0","payload":{payload}}}"#);
        assert!(post("transactions/encode_submission", &encode).is_ok());
        let message = post("transactions", &encode).unwrap_err();
        assert!(
            message.starts_with("body.max_gas_amount: required"),
            "{message}"
        );
        let signed = format!(
            r#"{{"sender":"0x1","sequence_number":"0","max_gas_amount":"10","gas_unit_price":"100","expiration_timestamp_secs":"9","payload":{payload},"signature":{{"type":"ed25519_signature","public_key":"0x","signature":"0x"}}}}"#
        );
        assert!(post("transactions", &signed).is_ok());
        assert!(post("transactions/simulate", &signed).is_ok());
        assert!(post("transactions/batch", &format!("[{signed}]")).is_ok());
        for (rest, body, field) in [
            (
                "transactions/encode_submission",
                r#"{"sequence_number":"0"}"#,
                "body.sender",
            ),
            (
                "transactions/encode_submission",
                r#"{"sender":"0x1","sequence_number":7}"#,
                "body.sequence_number",
            ),
            (
                "transactions/encode_submission",
                r#"{"sender":"0x1","sequence_number":"1"}"#,
                "body.payload",
            ),
            ("transactions/batch", "{}", "body"),
            ("transactions/batch", "[{}]", "body[0].sender"),
            (
                "view",
                r#"{"function":"0x1::coin::balance","arguments":[]}"#,
                "body.type_arguments",
            ),
            (
                "view",
                r#"{"function":"balance","type_arguments":[],"arguments":[]}"#,
                "body.function",
            ),
            (
                "tables/0x1/item",
                r#"{"key_type":"address","key":"0x1"}"#,
                "body.value_type",
            ),
            ("tables/0x1/raw_item", "{}", "body.key"),
            ("view", "not json", "body"),
        ] {
            let message = post(rest, body).unwrap_err();
            assert!(message.starts_with(field), "{rest} {body}: {message}");
        }
        // BCS bodies are the node's to check.
        let bcs = check(
            "POST",
            "transactions",
            None,
            Some("application/x.aptos.signed_transaction+bcs"),
            &[1, 2, 3],
        );
        assert!(bcs.is_ok());
    }

    #[test]
    fn routes_are_told_apart() {
        assert_eq!(get("", None).unwrap().route, Route::Ledger);
        assert_eq!(post("graphql", "{}").unwrap().route, Route::GraphQl);
        assert_eq!(get("-/healthy", None).unwrap().route, Route::Node);
        assert_eq!(route_of("GET", "/"), Route::Ledger);
        assert_eq!(route_of("POST", ""), Route::Node);
        assert_eq!(route_of("GET", ""), Route::Ledger);
    }
}
