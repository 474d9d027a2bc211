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

use std::collections::BTreeSet;

use engine::book::l2::{L2Error, L2Params};
use engine::market::candles::Interval;
use engine::views::bbo::BboKey;
use engine::views::candles::CandleKey;
use engine::views::fills::{FillsFilter, FillsKey};
use engine::views::l2book::L2BookKey;
use engine::views::l4book::L4BookKey;
use engine::views::mids::MidsKey;
use engine::views::open_orders::OpenOrdersKey;
use engine::views::registry::Key;
use engine::views::statuses::StatusesKey;
use engine::views::trades::TradesKey;
use serde_json::{Map, Value};

use crate::views::channel::Channel;

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

/// A subscription, normalised.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subscription {
    /// `l2Book`: aggregated book of one coin.
    L2Book {
        /// Market.
        coin: String,
        /// `nSigFigs` (2..=5).
        n_sig_figs: Option<u32>,
        /// `mantissa` (1, 2 or 5, with `nSigFigs` 5).
        mantissa: Option<u64>,
        /// `nLevels` (the node servers' extension; default 20).
        n_levels: Option<u32>,
    },
    /// `bbo`: best bid and offer of one coin.
    Bbo {
        /// Market.
        coin: String,
    },
    /// `trades`: one coin's trades.
    Trades {
        /// Market.
        coin: String,
    },
    /// `candle`: one coin's candles of one interval.
    Candle {
        /// Market.
        coin: String,
        /// Interval.
        interval: Interval,
    },
    /// `allMids`: the mid of every coin of one exchange.
    AllMids {
        /// `dex`: a builder-deployed exchange's name; absent or empty for
        /// the default exchange.
        dex: String,
    },
    /// `activeAssetCtx` (perps) / `activeSpotAssetCtx` (spot answers).
    ActiveAssetCtx {
        /// Market.
        coin: String,
    },
    /// `userFills`: one account's fills, an `isSnapshot` message first.
    UserFills {
        /// Account, lowercased.
        user: String,
        /// `aggregateByTime` (accepted; fills are sent as the node wrote
        /// them).
        aggregate_by_time: bool,
    },
    /// `userEvents`: one account's fills as `{"fills":[…]}` events.
    UserEvents {
        /// Account, lowercased.
        user: String,
    },
    /// `userTwapSliceFills`: one account's TWAP slice fills.
    UserTwapSliceFills {
        /// Account, lowercased.
        user: String,
    },
    /// `orderUpdates`: one account's order status changes.
    OrderUpdates {
        /// Account, lowercased.
        user: String,
    },
    /// `l4Book`: the node servers' order-level book, snapshot then
    /// per-block updates.
    L4Book {
        /// Market.
        coin: String,
    },
    /// `openOrders`: one account's open orders on one exchange, whole,
    /// then again after each change.
    OpenOrders {
        /// Account, lowercased.
        user: String,
        /// `dex`: absent or empty for the default exchange.
        dex: String,
    },
}

/// Every subscription type, as the exchange spells them.
pub const TYPES: [&str; 12] = [
    "l2Book",
    "bbo",
    "trades",
    "candle",
    "allMids",
    "activeAssetCtx",
    "userFills",
    "userEvents",
    "userTwapSliceFills",
    "orderUpdates",
    "l4Book",
    "openOrders",
];

impl Subscription {
    /// The subscription type, as the exchange spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Subscription::L2Book { .. } => "l2Book",
            Subscription::Bbo { .. } => "bbo",
            Subscription::Trades { .. } => "trades",
            Subscription::Candle { .. } => "candle",
            Subscription::AllMids { .. } => "allMids",
            Subscription::ActiveAssetCtx { .. } => "activeAssetCtx",
            Subscription::UserFills { .. } => "userFills",
            Subscription::UserEvents { .. } => "userEvents",
            Subscription::UserTwapSliceFills { .. } => "userTwapSliceFills",
            Subscription::OrderUpdates { .. } => "orderUpdates",
            Subscription::L4Book { .. } => "l4Book",
            Subscription::OpenOrders { .. } => "openOrders",
        }
    }

    /// The account a user subscription names (counted against the
    /// distinct-users limit).
    pub fn user(&self) -> Option<&str> {
        match self {
            Subscription::UserFills { user, .. }
            | Subscription::UserEvents { user }
            | Subscription::UserTwapSliceFills { user }
            | Subscription::OrderUpdates { user }
            | Subscription::OpenOrders { user, .. } => Some(user),
            _ => None,
        }
    }

    /// The view key the subscription reads and the channel its frames are
    /// rendered for (`None`: served from the Info source, not the engine).
    pub fn view(&self) -> Option<(Key, Channel)> {
        let channel = match self {
            Subscription::L2Book { .. } => Channel::L2Book,
            Subscription::Bbo { .. } => Channel::Bbo,
            Subscription::Trades { .. } => Channel::Trades,
            Subscription::Candle { .. } => Channel::Candle,
            Subscription::AllMids { .. } => Channel::AllMids,
            Subscription::ActiveAssetCtx { .. } => return None,
            Subscription::UserFills { .. } => Channel::UserFills,
            Subscription::UserEvents { .. } => Channel::UserEvents,
            Subscription::UserTwapSliceFills { .. } => Channel::UserTwapSliceFills,
            Subscription::OrderUpdates { .. } => Channel::OrderUpdates,
            Subscription::L4Book { .. } => Channel::L4Book,
            Subscription::OpenOrders { .. } => Channel::OpenOrders,
        };
        Some((self.key()?, channel))
    }

    /// The view key the subscription reads (`None`: served from the Info
    /// source, not the engine).
    fn key(&self) -> Option<Key> {
        let one = |coin: &str| BTreeSet::from([coin.to_owned()]);
        let user_fills = |user: &str| {
            Key::Fills(FillsKey {
                filter: FillsFilter::User(user.to_owned()),
                coins: BTreeSet::new(),
            })
        };
        Some(match self {
            Subscription::L2Book {
                coin,
                n_sig_figs,
                mantissa,
                n_levels,
            } => Key::L2Book(L2BookKey {
                coin: coin.clone(),
                n_levels: *n_levels,
                n_sig_figs: *n_sig_figs,
                mantissa: *mantissa,
                strict: false,
            }),
            Subscription::Bbo { coin } => Key::Bbo(BboKey { coins: one(coin) }),
            Subscription::Trades { coin } => Key::Trades(TradesKey { coins: one(coin) }),
            Subscription::Candle { coin, interval } => Key::Candles(CandleKey {
                coin: coin.clone(),
                interval: *interval,
            }),
            Subscription::AllMids { dex } => Key::Mids(MidsKey {
                coins: BTreeSet::new(),
                perps_only: false,
                dex: Some(dex.clone()),
            }),
            Subscription::ActiveAssetCtx { .. } => return None,
            Subscription::UserFills { user, .. }
            | Subscription::UserEvents { user }
            | Subscription::UserTwapSliceFills { user } => user_fills(user),
            Subscription::OrderUpdates { user } => Key::Statuses(StatusesKey {
                users: BTreeSet::from([user.clone()]),
            }),
            Subscription::L4Book { coin } => Key::L4Book(L4BookKey::new(coin.clone(), None)),
            Subscription::OpenOrders { user, dex } => {
                Key::OpenOrders(OpenOrdersKey::new(user, dex))
            }
        })
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

/// A required non-blank string field.
fn string(fields: &Map<String, Value>, name: &str) -> Result<String, String> {
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

/// An optional unsigned integer field (`null` = absent).
fn uint(fields: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
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

/// An optional string field (`null` or absent: empty).
fn optional_string(fields: &Map<String, Value>, name: &str) -> Result<String, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(value)) => Ok(value.clone()),
        Some(other) => Err(format!(
            "{name}: must be a string, got {}",
            common::clipped(&other.to_string())
        )),
    }
}

fn user(fields: &Map<String, Value>) -> Result<String, String> {
    let user = string(fields, "user")?;
    common::address("user", &user)
}

/// A `subscription` object (or an Info request of the same fields),
/// checked field by field; the error names the field.
pub fn subscription(fields: &Map<String, Value>) -> Result<Subscription, String> {
    let kind = string(fields, "type")?;
    Ok(match kind.as_str() {
        "l2Book" => {
            let n_sig_figs = uint(fields, "nSigFigs")?;
            let mantissa = uint(fields, "mantissa")?;
            let n_levels = uint(fields, "nLevels")?;
            // The view's own rules, in the exchange's field names.
            let figs = n_sig_figs.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            L2Params::new(None, figs, mantissa).map_err(|error| match error {
                L2Error::SigFigs(figs) => {
                    format!("nSigFigs: must be 2, 3, 4, 5 or null, got {figs}")
                }
                L2Error::Mantissa { mantissa } => {
                    format!("mantissa: must be 1, 2 or 5 and needs nSigFigs 5, got {mantissa}")
                }
                other @ L2Error::SizeOverflow { .. } => other.to_string(),
            })?;
            if let Some(levels) = n_levels
                && !(1..=100).contains(&levels)
            {
                return Err(format!("nLevels: must be 1 to 100, got {levels}"));
            }
            Subscription::L2Book {
                coin: string(fields, "coin")?,
                n_sig_figs: figs,
                mantissa,
                n_levels: n_levels.map(|n| n as u32),
            }
        }
        "bbo" => Subscription::Bbo {
            coin: string(fields, "coin")?,
        },
        "trades" => Subscription::Trades {
            coin: string(fields, "coin")?,
        },
        "candle" => {
            let coin = string(fields, "coin")?;
            let interval = string(fields, "interval").map_err(|why| {
                format!(
                    "{why}; one of {}",
                    Interval::ALL.map(Interval::as_str).join(" ")
                )
            })?;
            let interval = Interval::parse(&interval).map_err(|_| {
                format!(
                    "interval: unknown interval {}; one of {}",
                    common::quoted(&interval),
                    Interval::ALL.map(Interval::as_str).join(" ")
                )
            })?;
            Subscription::Candle { coin, interval }
        }
        "allMids" => Subscription::AllMids {
            dex: optional_string(fields, "dex")?,
        },
        "activeAssetCtx" => Subscription::ActiveAssetCtx {
            coin: string(fields, "coin")?,
        },
        "userFills" => Subscription::UserFills {
            user: user(fields)?,
            aggregate_by_time: match fields.get("aggregateByTime") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(flag)) => *flag,
                Some(other) => {
                    return Err(format!(
                        "aggregateByTime: must be a boolean, got {}",
                        common::clipped(&other.to_string())
                    ));
                }
            },
        },
        "userEvents" => Subscription::UserEvents {
            user: user(fields)?,
        },
        "userTwapSliceFills" => Subscription::UserTwapSliceFills {
            user: user(fields)?,
        },
        "orderUpdates" => Subscription::OrderUpdates {
            user: user(fields)?,
        },
        "l4Book" => {
            let coin = string(fields, "coin")?;
            if coin.starts_with('@') || coin.contains('/') {
                return Err(format!(
                    "coin: l4Book serves perp books only, got the spot coin {}",
                    common::quoted(&coin)
                ));
            }
            Subscription::L4Book { coin }
        }
        "openOrders" => Subscription::OpenOrders {
            user: user(fields)?,
            dex: crate::views::open_orders::dex(&optional_string(fields, "dex")?)?.to_owned(),
        },
        other => {
            return Err(format!(
                "type: unknown subscription type {}; l1gate serves {}",
                common::quoted(other),
                TYPES.join(", ")
            ));
        }
    })
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
        assert_eq!(
            sub(
                r#"{"method":"subscribe","subscription":{"type":"l2Book","coin":"BTC","nSigFigs":5,"mantissa":2}}"#
            ),
            Ok(Subscription::L2Book {
                coin: "BTC".into(),
                n_sig_figs: Some(5),
                mantissa: Some(2),
                n_levels: None
            })
        );
        assert_eq!(
            sub(
                r#"{"method":"subscribe","subscription":{"type":"userFills","user":"0xABCDEF0123456789abcdef0123456789ABCDEF01"}}"#
            ),
            Ok(Subscription::UserFills {
                user: "0xabcdef0123456789abcdef0123456789abcdef01".into(),
                aggregate_by_time: false
            })
        );
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
