//! The client side of the exchange's WebSocket protocol: what a text
//! message may ask for, parsed and checked field by field, and the error
//! text each refusal sends (as `{"channel":"error","data":…}`).
//!
//! Client messages: `{"method":"subscribe"|"unsubscribe","subscription":{…}}`,
//! `{"method":"ping"}` and `{"method":"post","id":N,"request":{"type":"info",
//! "payload":{…}}}`. Subscriptions keep the exchange's names and spelling;
//! a subscription's identity is its normalised form (user addresses
//! lowercased, absent and `null` options alike), so unsubscribing with the
//! same fields finds it whatever their order.

use axum::extract::ws::Utf8Bytes;
use engine::views::registry::Key;
use serde_json::{Map, Value};

use crate::views::{
    self,
    channel::{self, Channel, Parsed},
};

/// One parsed client message.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    /// Subscribe; `original` is the message as sent, echoed in the
    /// acknowledgement.
    Subscribe {
        /// What to subscribe.
        subscription: Subscription,
        /// The client's message.
        original: Value,
    },
    /// Unsubscribe; `original` as for subscribe.
    Unsubscribe {
        /// What to unsubscribe.
        subscription: Subscription,
        /// The client's message.
        original: Value,
    },
    /// Keep-alive; answered `{"channel":"pong"}`.
    Ping,
    /// A request answered on the socket under its `id`.
    Post {
        /// The client's id, echoed.
        id: Value,
        /// `request.type` (`info` or `action`).
        kind: String,
        /// `request.payload`.
        payload: Value,
    },
}

/// A subscription, normalised: what `unsubscribe` must name to end it, and
/// what a second `subscribe` is compared with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subscription {
    /// A type a view serves ([`crate::views::Served::WS`]): the channel its
    /// messages go out on, and its fields as the view's key.
    View {
        /// The type's channel.
        channel: Channel,
        /// Its fields, normalised.
        parsed: Parsed,
    },
    /// `activeAssetCtx` (perps) / `activeSpotAssetCtx` (spot answers): from
    /// the Info source, not the engine.
    ActiveAssetCtx {
        /// Market.
        coin: String,
    },
}

/// The one subscription type no view serves.
const ACTIVE_ASSET_CTX: &str = "activeAssetCtx";

/// Every subscription type, as the exchange spells them: the views', then
/// `activeAssetCtx`.
pub fn types() -> Vec<&'static str> {
    let mut types = views::ws_types();
    types.push(ACTIVE_ASSET_CTX);
    types
}

impl Subscription {
    /// The subscription type, as the exchange spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Subscription::View { channel, .. } => channel.name(),
            Subscription::ActiveAssetCtx { .. } => ACTIVE_ASSET_CTX,
        }
    }

    /// The account a user subscription names (counted against the
    /// distinct-users limit).
    pub fn user(&self) -> Option<&str> {
        match self {
            Subscription::View { parsed, .. } => parsed.user.as_deref(),
            Subscription::ActiveAssetCtx { .. } => None,
        }
    }

    /// The view key the subscription reads and the channel its frames are
    /// rendered for (`None`: served from the Info source, not the engine).
    pub fn view(&self) -> Option<(Key, Channel)> {
        match self {
            Subscription::View { channel, parsed } => Some((parsed.key.clone(), *channel)),
            Subscription::ActiveAssetCtx { .. } => None,
        }
    }

    /// The message a new subscriber gets before any frame, if its type
    /// sends one.
    pub fn opening(&self) -> Option<Utf8Bytes> {
        let Subscription::View { channel, parsed } = self else {
            return None;
        };
        let opening = channel.ws_type().opening?;
        let data = opening(parsed.user.as_deref().unwrap_or_default());
        Some(channel::message(channel.name(), &data))
    }
}

/// Why a client message is refused, in the shape the client gets it.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// An `error` channel message.
    Text(String),
    /// An `error` channel message echoing the request whole after
    /// `prefix`, then the reason (SDKs match it to the request they sent).
    Echo {
        /// `Invalid subscription `, say.
        prefix: &'static str,
        /// The request's `subscription`, as sent.
        echo: Value,
        /// What is wrong with it, naming the field.
        reason: String,
    },
    /// A `post` whose `id` was read: answered on the `post` channel under
    /// that id with an error payload.
    Post {
        /// The post's id.
        id: Value,
        /// The error payload: the HTTP status and description the request
        /// would have got, then the reason.
        message: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Text(text) => f.write_str(text),
            Refusal::Echo {
                prefix,
                echo,
                reason,
            } => write!(f, "{prefix}{echo}: {reason}"),
            Refusal::Post { id, message } => write!(f, "post {id}: {message}"),
        }
    }
}

impl From<String> for Refusal {
    fn from(text: String) -> Self {
        Refusal::Text(text)
    }
}

/// The error payload of a `post` refused as HTTP would refuse it with 400.
fn bad_post(reason: &str) -> String {
    format!("400 Bad Request: {reason}")
}

/// Parses one text message; the refusal says how the client is told.
pub fn parse(text: &str) -> Result<ClientMessage, Refusal> {
    let value: Value = serde_json::from_str(text).map_err(|error| {
        format!(
            "Error parsing JSON into valid websocket request: {} ({error})",
            common::clipped(text)
        )
    })?;
    let Some(object) = value.as_object() else {
        return Err(format!(
            "Error parsing JSON into valid websocket request: {}: not an object",
            common::clipped(text)
        )
        .into());
    };
    let method = match object.get("method") {
        Some(Value::String(method)) => method.as_str(),
        Some(other) => {
            return Err(format!(
                "method: must be a string, got {}",
                common::clipped(&other.to_string())
            )
            .into());
        }
        None => {
            return Err(
                String::from("method: required (subscribe, unsubscribe, ping or post)").into(),
            );
        }
    };
    match method {
        "subscribe" | "unsubscribe" => {
            let subscription = match object.get("subscription") {
                Some(Value::Object(fields)) => {
                    subscription(fields).map_err(|reason| Refusal::Echo {
                        prefix: "Invalid subscription ",
                        echo: Value::Object(fields.clone()),
                        reason,
                    })?
                }
                Some(_) => return Err(String::from("subscription: must be an object").into()),
                None => return Err(String::from("subscription: required").into()),
            };
            Ok(if method == "subscribe" {
                ClientMessage::Subscribe {
                    subscription,
                    original: value,
                }
            } else {
                ClientMessage::Unsubscribe {
                    subscription,
                    original: value,
                }
            })
        }
        "ping" => Ok(ClientMessage::Ping),
        "post" => post(object),
        other => Err(format!(
            "method: unknown method {}; one of subscribe, unsubscribe, ping, post",
            common::quoted(other)
        )
        .into()),
    }
}

fn post(object: &Map<String, Value>) -> Result<ClientMessage, Refusal> {
    let id = match object.get("id") {
        Some(id @ Value::Number(number)) if number.is_u64() => id.clone(),
        Some(other) => {
            return Err(format!(
                "id: must be a non-negative integer, got {}",
                common::clipped(&other.to_string())
            )
            .into());
        }
        None => return Err(String::from("id: required for post").into()),
    };
    // With its id read, the post is answered under it.
    let refuse = |reason: &str| Refusal::Post {
        id: id.clone(),
        message: bad_post(reason),
    };
    let Some(Value::Object(request)) = object.get("request") else {
        return Err(refuse(
            "request: required for post, an object {\"type\",\"payload\"}",
        ));
    };
    let kind = match request.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        _ => return Err(refuse("request.type: required (info or action)")),
    };
    let payload = request
        .get("payload")
        .cloned()
        .ok_or_else(|| refuse("request.payload: required"))?;
    Ok(ClientMessage::Post { id, kind, payload })
}

/// A `subscription` object (or an Info request of the same fields),
/// checked field by field; the error names the field.
pub fn subscription(fields: &Map<String, Value>) -> Result<Subscription, String> {
    let kind = channel::string(fields, "type")?;
    if kind == ACTIVE_ASSET_CTX {
        return Ok(Subscription::ActiveAssetCtx {
            coin: channel::string(fields, "coin")?,
        });
    }
    let Some(channel) = views::ws_channel(&kind) else {
        return Err(format!(
            "type: unknown subscription type {}; l1gate serves {}",
            common::quoted(&kind),
            types().join(", ")
        ));
    };
    let parsed = (channel.ws_type().parse)(fields)?;
    Ok(Subscription::View { channel, parsed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(text: &str) -> Result<Subscription, Refusal> {
        match parse(text)? {
            ClientMessage::Subscribe { subscription, .. } => Ok(subscription),
            other => panic!("not a subscribe: {other:?}"),
        }
    }

    #[test]
    fn subscriptions_parse_in_the_exchange_spelling() {
        let l2 = sub(
            r#"{"method":"subscribe","subscription":{"type":"l2Book","coin":"BTC","nSigFigs":5,"mantissa":2}}"#,
        )
        .unwrap();
        let (key, channel) = l2.view().unwrap();
        assert_eq!(
            key,
            Key::L2Book(engine::views::l2book::L2BookKey {
                coin: "BTC".into(),
                n_levels: None,
                n_sig_figs: Some(5),
                mantissa: Some(2),
                strict: false,
            })
        );
        assert_eq!(
            (l2.kind(), channel.name(), l2.user()),
            ("l2Book", "l2Book", None)
        );
        let fills = sub(
            r#"{"method":"subscribe","subscription":{"type":"userFills","user":"0xABCDEF0123456789abcdef0123456789ABCDEF01"}}"#,
        )
        .unwrap();
        let user = "0xabcdef0123456789abcdef0123456789abcdef01";
        assert_eq!(fills.user(), Some(user));
        let opening: Value = serde_json::from_str(fills.opening().unwrap().as_str()).unwrap();
        assert_eq!(
            opening,
            serde_json::json!({"channel":"userFills","data":{"user":user,"fills":[],"isSnapshot":true}})
        );
        // An option that changes no frame still makes another subscription.
        let aggregated = sub(
            r#"{"method":"subscribe","subscription":{"type":"userFills","user":"0xABCDEF0123456789abcdef0123456789ABCDEF01","aggregateByTime":true}}"#,
        )
        .unwrap();
        assert_eq!(aggregated.view(), fills.view());
        assert_ne!(aggregated, fills);
        // Every type is found by its name; the unknown one lists them.
        for kind in types() {
            let fields = serde_json::json!({"type": kind});
            if let Err(why) = subscription(fields.as_object().unwrap()) {
                assert!(!why.starts_with("type:"), "{kind}: {why}");
            }
        }
        assert_eq!(
            sub(r#"{"method":"subscribe","subscription":{"type":"allMids"}}"#),
            sub(r#"{"method":"subscribe","subscription":{"type":"allMids","dex":null}}"#),
        );
        assert_eq!(parse(r#"{"method":"ping"}"#), Ok(ClientMessage::Ping));
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            ("not json", "Error parsing JSON"),
            ("[1]", "not an object"),
            (r#"{"method":"subscribe"}"#, "subscription: required"),
            (r#"{"method":"dance"}"#, "method: unknown method \"dance\""),
            (
                r#"{"method":"subscribe","subscription":{"type":"l3Book","coin":"BTC"}}"#,
                "type: unknown subscription type \"l3Book\"",
            ),
            (
                r#"{"method":"subscribe","subscription":{"type":"trades"}}"#,
                "coin: required",
            ),
            (
                r#"{"method":"subscribe","subscription":{"type":"l2Book","coin":"BTC","nSigFigs":7}}"#,
                "nSigFigs: must be 2, 3, 4, 5 or null",
            ),
            (
                r#"{"method":"subscribe","subscription":{"type":"candle","coin":"BTC","interval":"7m"}}"#,
                "interval: unknown interval \"7m\"",
            ),
            (
                r#"{"method":"subscribe","subscription":{"type":"userFills","user":"bob"}}"#,
                "user: \"bob\" is not an address",
            ),
            (
                r#"{"method":"subscribe","subscription":{"type":"l4Book","coin":"@107"}}"#,
                "l4Book serves perp books only",
            ),
            (r#"{"method":"post","id":-1}"#, "id: must be a non-negative"),
        ];
        for (text, wanted) in cases {
            let error = parse(text).expect_err(text).to_string();
            assert!(error.contains(wanted), "{text}: {error}");
        }
    }

    #[test]
    fn an_invalid_subscription_is_echoed_whole_and_its_reason_bounded() {
        let coin = "X".repeat(100_000);
        let text = format!(
            r#"{{"method":"subscribe","subscription":{{"type":"l3Book","coin":"{coin}"}}}}"#
        );
        let Err(Refusal::Echo { echo, reason, .. }) = parse(&text) else {
            panic!("not an echo");
        };
        let sent: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(echo, sent["subscription"]);
        assert!(reason.len() < 1_000, "{} bytes", reason.len());
    }

    #[test]
    fn a_post_with_an_id_is_refused_under_its_id() {
        let refused = parse(r#"{"method":"post","id":7,"request":{"payload":{}}}"#);
        assert_eq!(
            refused,
            Err(Refusal::Post {
                id: Value::from(7),
                message: "400 Bad Request: request.type: required (info or action)".into(),
            })
        );
        // Without a readable id there is nothing to answer under.
        assert!(matches!(
            parse(r#"{"method":"post","request":{}}"#),
            Err(Refusal::Text(_))
        ));
    }
}
