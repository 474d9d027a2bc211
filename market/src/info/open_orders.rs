//! The JSON text of Info `openOrders` and `frontendOpenOrders` answers.
//!
//! A market maker rests tens of thousands of orders, and the answer is made
//! once per block for every client asking about the account, so it is
//! written by hand into one buffer: the orders borrowed from the books'
//! shared maps in the order the WebSocket view sends them
//! ([`newest_first_borrowed`]; none copied or counted), each market's name
//! escaped once, numbers without a formatter. The bytes are exactly
//! those `serde_json` writes for the exchange's entry shapes (the tests hold
//! the two side by side): fields in alphabetical order, strings escaped as
//! `serde_json` escapes them.
//!
//! - `openOrders`: `{cloid?, coin, limitPx, oid, origSz, side, sz,
//!   timestamp}`, `cloid` only when the order has one;
//! - `frontendOpenOrders`: `{children, cloid, coin, isPositionTpsl,
//!   isTrigger, limitPx, oid, orderType, origSz, reduceOnly, side, sz, tif,
//!   timestamp, triggerCondition, triggerPx}`, `cloid` and `tif` `null`
//!   when unset, `children` always empty (the books keep no brackets).

use bytes::Bytes;
use engine::book::l4::{CLOID_TEXT_LEN, Cloid, RestingOrder, UserOrders};
use engine::num::Decimal;
use engine::text::Short;
use engine::views::open_orders::newest_first_borrowed;

/// Bytes an `openOrders` entry takes at most in the usual case (a client
/// order id, a market name of a few letters): room reserved per order.
const PLAIN_ENTRY: usize = 160;
/// The same for a `frontendOpenOrders` entry.
const FRONTEND_ENTRY: usize = 340;

/// The answer for `orders` (an account's orders by market, as the books
/// hand them out), newest first (placement time, then order id):
/// `frontendOpenOrders` entries when `frontend`, else `openOrders` ones.
pub fn render(orders: &[(Short, UserOrders)], frontend: bool) -> Bytes {
    // Each market's name as a JSON string, once.
    let coins: Vec<Vec<u8>> = orders
        .iter()
        .map(|(coin, _)| {
            let mut text = Vec::with_capacity(coin.len() + 2);
            push_string(&mut text, coin);
            text
        })
        .collect();
    let all = newest_first_borrowed(orders);
    let entry = if frontend {
        FRONTEND_ENTRY
    } else {
        PLAIN_ENTRY
    };
    let mut out = Vec::with_capacity(all.len() * entry + 2);
    out.push(b'[');
    for (at, &(market, order)) in all.iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        // Each place is one of `orders`' own, as `coins` has them.
        let coin = &coins[market];
        if frontend {
            push_frontend(&mut out, coin, order);
        } else {
            push_plain(&mut out, coin, order);
        }
    }
    out.push(b']');
    Bytes::from(out)
}

/// One `openOrders` entry.
fn push_plain(out: &mut Vec<u8>, coin: &[u8], order: &RestingOrder) {
    out.push(b'{');
    if let Some(cloid) = &order.cloid {
        out.extend_from_slice(b"\"cloid\":");
        push_cloid(out, cloid);
        out.push(b',');
    }
    out.extend_from_slice(b"\"coin\":");
    out.extend_from_slice(coin);
    push_decimal(out, b",\"limitPx\":", order.limit_px);
    push_integer(out, b",\"oid\":", order.oid);
    push_decimal(out, b",\"origSz\":", order.orig_sz);
    push_side(out, order);
    push_decimal(out, b",\"sz\":", order.sz);
    push_integer(out, b",\"timestamp\":", order.timestamp);
    out.push(b'}');
}

/// One `frontendOpenOrders` entry.
fn push_frontend(out: &mut Vec<u8>, coin: &[u8], order: &RestingOrder) {
    let terms = &order.terms;
    out.extend_from_slice(b"{\"children\":[],\"cloid\":");
    match &order.cloid {
        Some(cloid) => push_cloid(out, cloid),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"coin\":");
    out.extend_from_slice(coin);
    push_bool(out, b",\"isPositionTpsl\":", terms.is_position_tpsl);
    push_bool(out, b",\"isTrigger\":", terms.is_trigger);
    push_decimal(out, b",\"limitPx\":", order.limit_px);
    push_integer(out, b",\"oid\":", order.oid);
    out.extend_from_slice(b",\"orderType\":");
    push_string(out, &terms.order_type);
    push_decimal(out, b",\"origSz\":", order.orig_sz);
    push_bool(out, b",\"reduceOnly\":", terms.reduce_only);
    push_side(out, order);
    push_decimal(out, b",\"sz\":", order.sz);
    out.extend_from_slice(b",\"tif\":");
    match &terms.tif {
        Some(tif) => push_string(out, tif),
        None => out.extend_from_slice(b"null"),
    }
    push_integer(out, b",\"timestamp\":", order.timestamp);
    out.extend_from_slice(b",\"triggerCondition\":");
    push_string(out, &terms.trigger_condition);
    push_decimal(out, b",\"triggerPx\":", terms.trigger_px);
    out.push(b'}');
}

fn push_decimal(out: &mut Vec<u8>, key: &[u8], value: Decimal) {
    out.extend_from_slice(key);
    out.push(b'"');
    value.push_text(out);
    out.push(b'"');
}

fn push_integer(out: &mut Vec<u8>, key: &[u8], value: impl itoa::Integer) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn push_bool(out: &mut Vec<u8>, key: &[u8], value: bool) {
    out.extend_from_slice(key);
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

fn push_side(out: &mut Vec<u8>, order: &RestingOrder) {
    out.extend_from_slice(b",\"side\":\"");
    out.extend_from_slice(order.side.as_str().as_bytes());
    out.push(b'"');
}

fn push_cloid(out: &mut Vec<u8>, cloid: &Cloid) {
    push_string(out, cloid.as_str(&mut [0; CLOID_TEXT_LEN]));
}

/// `text` as a JSON string: as is between quotes when nothing in it needs
/// escaping (the usual case: names, types, hex ids), else as `serde_json`
/// escapes it.
fn push_string(out: &mut Vec<u8>, text: &str) {
    if text
        .bytes()
        .all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\')
    {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string to a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *out, text);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use engine::book::l4::Terms;
    use engine::event::Side;
    use engine::num::{Px, Sz};
    use engine::views::open_orders::newest_first;
    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;

    /// The `openOrders` entry as `serde_json` writes it: the reference the
    /// hand-written text is held to.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct PlainOrder<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        cloid: Option<&'a Cloid>,
        coin: &'a str,
        limit_px: &'a Px,
        oid: u64,
        orig_sz: &'a Sz,
        side: Side,
        sz: &'a Sz,
        timestamp: i64,
    }

    /// The answer through `serde_json`: the `frontendOpenOrders` entries
    /// are the WebSocket view's own serialisation.
    fn reference(orders: &[(Short, UserOrders)], frontend: bool) -> Vec<u8> {
        let all = newest_first(orders);
        if frontend {
            serde_json::to_vec(&all).unwrap()
        } else {
            let rows: Vec<PlainOrder<'_>> = all
                .iter()
                .map(|open| PlainOrder {
                    cloid: open.order.cloid.as_ref(),
                    coin: &open.coin,
                    limit_px: &open.order.limit_px,
                    oid: open.order.oid,
                    orig_sz: &open.order.orig_sz,
                    side: open.order.side,
                    sz: &open.order.sz,
                    timestamp: open.order.timestamp,
                })
                .collect();
            serde_json::to_vec(&rows).unwrap()
        }
    }

    fn decimal(units: i64, scale: u8) -> Decimal {
        Decimal::new(units, scale).unwrap()
    }

    /// Text of any length from any characters, control and quoting ones
    /// included.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[A-Za-z0-9 :@/-]{1,30}",
            any::<String>(),
            proptest::collection::vec(
                proptest::sample::select(vec![
                    '"', '\\', '\0', '\n', '\u{1f}', '\u{7f}', 'é', '✓', 'a'
                ]),
                1..8,
            )
            .prop_map(String::from_iter),
        ]
    }

    prop_compose! {
        fn order()(
            oid: u64,
            timestamp: i64,
            bid: bool,
            (px, px_scale) in (any::<i64>(), 0u8..=18),
            (sz, sz_scale) in (0..i64::MAX, 0u8..=18),
            (orig, orig_scale) in (0..i64::MAX, 0u8..=18),
            cloid in prop_oneof![
                Just(None),
                any::<[u8; 16]>().prop_map(|bytes| Some(Cloid::from_bytes(bytes))),
                text().prop_map(|text| Some(Cloid::new(&text))),
            ],
            trigger_condition in text(),
            order_type in text(),
            tif in proptest::option::of(text()),
            (is_trigger, is_position_tpsl, reduce_only) in any::<(bool, bool, bool)>(),
            (trigger, trigger_scale) in (any::<i64>(), 0u8..=18),
        ) -> RestingOrder {
            RestingOrder {
                user: "0x0000000000000000000000000000000000000001".into(),
                oid,
                side: if bid { Side::Bid } else { Side::Ask },
                limit_px: decimal(px, px_scale),
                sz: decimal(sz, sz_scale),
                timestamp,
                orig_sz: decimal(orig, orig_scale),
                cloid,
                terms: Arc::new(Terms {
                    trigger_condition: trigger_condition.as_str().into(),
                    is_trigger,
                    trigger_px: decimal(trigger, trigger_scale),
                    is_position_tpsl,
                    reduce_only,
                    order_type: order_type.as_str().into(),
                    tif: tif.map(|tif| tif.as_str().into()),
                }),
            }
        }
    }

    /// An account's orders in up to four markets (names of any characters),
    /// order ids distinct as an account's are.
    fn account() -> impl Strategy<Value = Vec<(Short, UserOrders)>> {
        proptest::collection::vec((text(), proptest::collection::vec(order(), 0..12)), 0..4)
            .prop_map(|markets| {
                let mut next_oid = 0u64;
                markets
                    .into_iter()
                    .map(|(coin, orders)| {
                        let kept: UserOrders = orders
                            .into_iter()
                            .map(|mut order| {
                                // Distinct, in no particular order.
                                next_oid += 1;
                                order.oid = order.oid.wrapping_mul(1 << 12) | next_oid;
                                (order.oid, Arc::new(order))
                            })
                            .collect();
                        (coin.as_str().into(), kept)
                    })
                    .collect()
            })
    }

    proptest! {
        /// Both answers are byte for byte what `serde_json` writes of the
        /// same orders in the same order.
        #[test]
        fn the_text_is_serde_jsons(orders in account()) {
            for frontend in [false, true] {
                let (written, expected) = (render(&orders, frontend), reference(&orders, frontend));
                prop_assert_eq!(String::from_utf8_lossy(&written), String::from_utf8_lossy(&expected));
            }
        }
    }

    #[test]
    fn an_account_without_orders_is_an_empty_list() {
        assert_eq!(&render(&[], false)[..], b"[]");
        let empty: Vec<(Short, UserOrders)> = vec![("BTC".into(), UserOrders::new())];
        assert_eq!(&render(&empty, true)[..], b"[]");
    }

    #[test]
    fn the_newest_order_comes_first_and_ties_go_to_the_higher_id() {
        let at = |oid: u64, timestamp: i64| {
            let mut order = RestingOrder::bare(
                "0x0000000000000000000000000000000000000001",
                oid,
                Side::Bid,
                decimal(10, 0),
                decimal(1, 1),
                timestamp,
            );
            order.cloid = (oid == 7).then(|| Cloid::from_bytes([0xab; 16]));
            (oid, Arc::new(order))
        };
        let orders: Vec<(Short, UserOrders)> = vec![
            ("BTC".into(), [at(5, 100), at(7, 300)].into_iter().collect()),
            ("ETH".into(), [at(6, 300), at(9, 200)].into_iter().collect()),
        ];
        let answer: serde_json::Value = serde_json::from_slice(&render(&orders, false)).unwrap();
        let oids: Vec<u64> = answer
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["oid"].as_u64().unwrap())
            .collect();
        assert_eq!(oids, [7, 6, 9, 5]);
        assert_eq!(answer[0]["cloid"], format!("0x{}", "ab".repeat(16)));
        assert_eq!(answer[0]["coin"], "BTC");
        assert_eq!(answer[1].get("cloid"), None);
    }
}
