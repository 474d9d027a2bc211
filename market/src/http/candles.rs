//! The candle lookup route: `GET /{key}/v1/candles?market=…&interval=…&time=…`
//! (and `GET /v1/candles` with the `X-Api-Key` header) answers one `1s`,
//! `1m` or `5m` candle from [`Candles`] (the persistent store's closed
//! buckets, or the candle store thread's live state).
//!
//! # Requests
//!
//! - `market`: as the node spells the coin — a perp's base symbol (`BTC`),
//!   a spot pair's `@<index>` or a canonical pair's name (`PURR/USDC`), a
//!   builder perp's `<dex>:<asset>` (`xyz:NVDA`), an outcome's `#<n>`. A
//!   [`MarketResolver`](host::candles::MarketResolver) set with [`Candles::set_resolver`] may map other
//!   names (e.g. spot names from spotMeta) to the node's coin first.
//! - `interval`: `1s`, `1m` or `5m` (case-sensitive).
//! - `time`: the bucket's open, ISO-8601 with `Z` or a numeric offset
//!   (`2026-05-05T17:39:00Z`, fractions allowed when they are zero). A time
//!   inside a bucket is a 400 naming `time` and the bucket holding it.
//!
//! Query values are percent-decoded (`edge::percent::component`: `+` is
//! taken literally, it is an offset sign in times; a value that is not
//! UTF-8 once decoded is a 400 naming it). Other parameters are ignored.
//!
//! # Answers
//!
//! | Case | Status | `error` |
//! |---|---|---|
//! | candle found (closed; or the open bucket's state so far, `Cache-Control: no-store`) | 200 | |
//! | a parameter missing, repeated or malformed | 400 | `invalid_parameter` (with `parameter`) |
//! | bucket opens before the history start | 404 | `before_history_start` |
//! | bucket opens after the wall clock | 404 | `future_bucket` |
//! | bucket opens before the data the store was built from | 404 | `not_covered` |
//! | market never seen in the data and not resolvable | 404 | `unknown_market` |
//! | no trade in the bucket (complete, or so far) | 404 | `no_candle` |
//! | the writer stopped on a store error and the bucket is not stored, or the store cannot be read | 503 | `candles_unavailable` |
//!
//! A 200 body is `{"market","interval","bucket_start","open","high","low",
//! "close","volume","trades_count","vwap"}`; prices are printed as the node
//! wrote them, volume and VWAP in canonical decimal form (see
//! [`engine::market::candles`]).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use engine::market::candles::Interval;
use feeds::time::{format_iso8601_ms, parse_iso8601_ms, write_iso8601_ms};

use common::metrics::Metrics;
use edge::routes::{Route, Routed};
use host::candles::store::{INTERVALS, MAX_COIN_LEN};
use host::candles::{CandleValues, Candles, Miss};

/// State of the candle route.
#[derive(Debug, Clone)]
pub struct CandleRoute {
    candles: Arc<Candles>,
    metrics: Arc<Metrics>,
}

/// `GET /{key}/v1/candles`.
pub const CANDLES: Route = Route {
    method: "GET",
    path: "/v1/candles",
    keyed: true,
    what: "one OHLCV candle per request: ?market=…&interval=1s|1m|5m&time=ISO-8601",
};

/// The `/v1/candles` route (to be served behind
/// [`edge::http::authenticated`]).
pub fn routes(candles: Arc<Candles>, metrics: Arc<Metrics>) -> Routed {
    Routed::new()
        .route(CANDLES, get(candle))
        .map(|router| router.with_state(CandleRoute { candles, metrics }))
}

/// A rejected request parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParameter {
    /// `market`, `interval` or `time`.
    pub parameter: &'static str,
    /// What is wrong.
    pub message: String,
}

/// A validated candle request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandleQuery<'q> {
    /// The market as requested (percent-decoded).
    pub market: Cow<'q, str>,
    /// The interval.
    pub interval: Interval,
    /// The bucket open, Unix ms.
    pub open_time: i64,
}

/// Parses and validates `market`, `interval` and `time` from a raw query
/// string.
///
/// # Errors
/// [`BadParameter`] naming the first parameter that is missing, repeated
/// or malformed (checked in the order market, interval, time).
pub fn parse_query(query: &str) -> Result<CandleQuery<'_>, BadParameter> {
    const NAMES: [&str; 3] = ["market", "interval", "time"];
    let mut values: [Option<Cow<'_, str>>; 3] = [None, None, None];
    let mut repeated: Option<&'static str> = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let Ok(key) = edge::percent::component(key) else {
            continue;
        };
        let Some(slot) = NAMES.iter().position(|name| *name == key) else {
            continue;
        };
        if values[slot].is_some() {
            repeated.get_or_insert(NAMES[slot]);
        }
        let value = edge::percent::component(value).map_err(|error| BadParameter {
            parameter: NAMES[slot],
            message: format!("{}: {error}", NAMES[slot]),
        })?;
        values[slot] = Some(value);
    }
    let [market, interval, time] = values;
    let take = |name: &'static str, value| take_value(name, value, repeated);
    let market = take("market", market)?;
    check_market(&market)?;
    let interval_text = take("interval", interval)?;
    let interval = Interval::parse(&interval_text)
        .ok()
        .filter(|i| INTERVALS.contains(i))
        .ok_or_else(|| BadParameter {
            parameter: "interval",
            message: format!(
                "interval {} is not served; use one of 1s, 1m, 5m",
                common::quoted(&interval_text)
            ),
        })?;
    let time_text = take("time", time)?;
    let open_time = parse_iso8601_ms(&time_text).map_err(|message| BadParameter {
        parameter: "time",
        message: format!("time {message}"),
    })?;
    let bucket = interval.bucket_open(open_time);
    if bucket != open_time {
        return Err(BadParameter {
            parameter: "time",
            message: format!(
                "time {} is not the open of a {interval} bucket; the bucket holding it opens at {}",
                format_iso8601_ms(open_time),
                format_iso8601_ms(bucket)
            ),
        });
    }
    Ok(CandleQuery {
        market,
        interval,
        open_time,
    })
}

fn take_value<'q>(
    name: &'static str,
    value: Option<Cow<'q, str>>,
    repeated: Option<&'static str>,
) -> Result<Cow<'q, str>, BadParameter> {
    if repeated == Some(name) {
        return Err(BadParameter {
            parameter: name,
            message: format!("{name} is given more than once"),
        });
    }
    match value {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(BadParameter {
            parameter: name,
            message: format!("{name} is required"),
        }),
    }
}

/// Market names are printable ASCII without spaces, quotes or backslashes;
/// `@` must be followed by digits, and `dex:asset` / `BASE/QUOTE` need both
/// halves.
fn check_market(market: &str) -> Result<(), BadParameter> {
    let bad = |why: &str| BadParameter {
        parameter: "market",
        message: format!(
            "market {} is not a market name: {why}",
            common::quoted(market)
        ),
    };
    if market.len() > MAX_COIN_LEN {
        return Err(bad("too long"));
    }
    if !market
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        return Err(bad("only printable ASCII without spaces or quotes"));
    }
    if let Some(index) = market.strip_prefix('@')
        && (index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad("a spot index is @ and digits, like @107"));
    }
    if let Some(index) = market.strip_prefix('#')
        && (index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad("an outcome is # and digits, like #12"));
    }
    for separator in [':', '/'] {
        if market.contains(separator) {
            let mut parts = market.split(separator);
            let ok = parts.clone().count() == 2 && parts.all(|p| !p.is_empty());
            if !ok {
                return Err(bad(if separator == ':' {
                    "a builder perp is <dex>:<asset>, like xyz:NVDA"
                } else {
                    "a pair name is BASE/QUOTE, like PURR/USDC"
                }));
            }
        }
    }
    Ok(())
}

async fn candle(State(route): State<CandleRoute>, RawQuery(query): RawQuery) -> Response {
    let response = answer(&route.candles, query.as_deref().unwrap_or(""));
    route.metrics.candle_lookup(response.status().as_u16());
    response
}

/// The full answer to one candle request.
pub fn answer(candles: &Candles, query: &str) -> Response {
    let request = match parse_query(query) {
        Ok(request) => request,
        Err(bad) => {
            let body = serde_json::json!({
                "error": "invalid_parameter",
                "parameter": bad.parameter,
                "message": bad.message,
            });
            return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
        }
    };
    let now = common::unix_now_ms();
    match candles.lookup(&request.market, request.interval, request.open_time, now) {
        Ok(values) => {
            let body = candle_json(&request.market, request.interval, &values);
            let cache = if values.closed {
                HeaderValue::from_static("public, max-age=3600")
            } else {
                HeaderValue::from_static("no-store")
            };
            (
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    ),
                    (header::CACHE_CONTROL, cache),
                ],
                body,
            )
                .into_response()
        }
        Err(miss) => miss_response(&request, &miss),
    }
}

/// The 200 body, written without intermediate values.
pub fn candle_json(market: &str, interval: Interval, c: &CandleValues) -> String {
    let mut out = String::with_capacity(256);
    // `market` passed `check_market`: no character needs escaping.
    let _ = write!(
        out,
        r#"{{"market":"{market}","interval":"{interval}","bucket_start":""#
    );
    write_iso8601_ms(&mut out, c.open_time);
    let _ = write!(
        out,
        r#"","open":"{}","high":"{}","low":"{}","close":"{}","volume":"{}","trades_count":{},"vwap":"{}"}}"#,
        c.open, c.high, c.low, c.close, c.volume, c.trades_count, c.vwap
    );
    out
}

fn miss_response(request: &CandleQuery<'_>, miss: &Miss) -> Response {
    let what = format!(
        "{} {} bucket opening at {}",
        request.market,
        request.interval,
        format_iso8601_ms(request.open_time)
    );
    let (status, error, message) = match miss {
        Miss::BeforeHistory { start_ms } => (
            StatusCode::NOT_FOUND,
            "before_history_start",
            format!(
                "the {what} is before the candle history start {}",
                format_iso8601_ms(*start_ms)
            ),
        ),
        Miss::Future { now_ms } => (
            StatusCode::NOT_FOUND,
            "future_bucket",
            format!(
                "the {what} has not opened yet (now is {})",
                format_iso8601_ms(*now_ms)
            ),
        ),
        Miss::UnknownMarket => (
            StatusCode::NOT_FOUND,
            "unknown_market",
            format!(
                "market {} is unknown: it has no trades in the data served and no resolver knows it",
                request.market
            ),
        ),
        Miss::NotCovered { spans } => (
            StatusCode::NOT_FOUND,
            "not_covered",
            if spans.is_empty() {
                format!("the {what} is outside the data this server holds: it holds none yet")
            } else {
                let held: Vec<String> = spans
                    .iter()
                    .take(4)
                    .map(|s| {
                        format!(
                            "{} to {}",
                            format_iso8601_ms(s.from_ms),
                            format_iso8601_ms(s.to_ms)
                        )
                    })
                    .collect();
                format!(
                    "the {what} is outside the data this server holds ({}{}); `l1gate candles import` backfills history",
                    held.join(", "),
                    if spans.len() > 4 { ", …" } else { "" }
                )
            },
        ),
        Miss::Gap(gap) => (
            StatusCode::NOT_FOUND,
            "gap",
            format!(
                "the {what} lies in a known gap of the data (from {} to {}): {}; its trades may be missing, so no candle is served",
                format_iso8601_ms(gap.from_ms),
                format_iso8601_ms(gap.to_ms),
                gap.reason
            ),
        ),
        Miss::Damaged { from_ms, to_ms } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "damaged",
            format!(
                "the stored candles holding the {what} (from {} to {}) are damaged and not rebuilt yet; an import of those hours, or a restart while the node's files reach them, rebuilds them",
                format_iso8601_ms(*from_ms),
                format_iso8601_ms(*to_ms)
            ),
        ),
        Miss::NoTrades { complete: true, .. } => (
            StatusCode::NOT_FOUND,
            "no_candle",
            format!(
                "no trades in the {what}: candles are sparse, an interval without trades has none"
            ),
        ),
        Miss::NoTrades {
            complete: false,
            processed_ms,
        } => (
            StatusCode::NOT_FOUND,
            "no_candle",
            format!(
                "no trades so far in the {what}; data processed up to {}",
                format_iso8601_ms(*processed_ms)
            ),
        ),
        Miss::Unavailable(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "candles_unavailable",
            format!("the candle store is unavailable: {reason}"),
        ),
    };
    let body = serde_json::json!({ "error": error, "message": message });
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::market::candles::Amount;
    use engine::num::Px;

    #[test]
    fn queries_are_checked_in_order_and_name_the_parameter() {
        let ok =
            parse_query("market=PURR%2FUSDC&interval=5m&time=2026-05-05T17:40:00Z&x=1").unwrap();
        assert_eq!(ok.market, "PURR/USDC");
        assert_eq!(ok.interval, Interval::Minute5);
        assert_eq!(format_iso8601_ms(ok.open_time), "2026-05-05T17:40:00Z");
        for (query, parameter) in [
            ("", "market"),
            ("market=%23&interval=1m&time=x", "market"),
            ("market=a:b:c&interval=1m", "market"),
            ("market=%2FUSDC&interval=1m", "market"),
            ("market=BTC&market=ETH&interval=1m", "market"),
            ("market=BTC&interval=3m", "interval"),
            ("market=BTC&interval=1m&time=2026-05-05T17:40:01Z", "time"),
            ("market=BTC&interval=5m&time=2026-05-05T17:41:00Z", "time"),
            ("market=BTC&interval=%FF1m", "interval"),
        ] {
            assert_eq!(
                parse_query(query).unwrap_err().parameter,
                parameter,
                "{query}"
            );
        }
        assert!(parse_query("market=%2312&interval=1s&time=2026-05-05T17:40:01Z").is_ok());
    }

    #[test]
    fn the_body_has_the_spec_shape() {
        let px = |t: &str| Px::parse(t).unwrap();
        let values = CandleValues {
            open_time: 1_778_002_800_000,
            open: px("81307.0"),
            high: px("81310.5"),
            low: px("81300.0"),
            close: px("81301.0"),
            volume: Amount::new(352_411, 5),
            vwap: Amount::new(8_130_271_935, 5),
            trades_count: 41,
            closed: true,
        };
        let body: serde_json::Value =
            serde_json::from_str(&candle_json("BTC", Interval::Minute1, &values)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "market": "BTC", "interval": "1m", "bucket_start": "2026-05-05T17:40:00Z",
                "open": "81307.0", "high": "81310.5", "low": "81300.0", "close": "81301.0",
                "volume": "3.52411", "trades_count": 41, "vwap": "81302.71935",
            })
        );
    }
}
