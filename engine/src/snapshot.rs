//! The node's L4 snapshots (`[height, [[coin, [bids, asks]]]]` with
//! `[user, order]` elements): parsing straight into [`Books`] without an
//! intermediate tree, and the per-coin comparison of a snapshot with folded
//! state that finds which coins diverged.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};
use thiserror::Error;

use crate::book::l4::{Books, L4Book, Level, RestingOrder};
use crate::event::{NodeOrder, Side};

/// A snapshot that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotError {
    /// The bytes are not a node L4 snapshot.
    #[error("snapshot: not an L4 snapshot: {reason}")]
    Malformed {
        /// serde's message.
        reason: String,
    },
    /// An order sits in the wrong side array.
    #[error("snapshot: order {oid} of {coin} listed under the wrong side at height {height}")]
    Misplaced {
        /// Coin whose array holds the order.
        coin: String,
        /// Order id.
        oid: u64,
        /// Snapshot height.
        height: u64,
    },
    /// The snapshot is not at the folded height, so they cannot be compared.
    #[error("snapshot: height {snapshot} does not match folded height {folded:?}")]
    HeightMismatch {
        /// Snapshot height.
        snapshot: u64,
        /// Height of the folded state.
        folded: Option<u64>,
    },
}

/// A parsed node L4 snapshot: every resting order at `height` (the last
/// block it includes).
#[derive(Debug, Clone, PartialEq)]
pub struct L4Snapshot {
    /// The last block folded into the snapshot.
    pub height: u64,
    /// Books by coin, in the snapshot's time priority.
    pub books: Books,
}

/// Parses a node L4 snapshot file's bytes. Orders are converted as they are
/// read (no intermediate JSON tree), so a 19 MB BTC snapshot costs one pass.
///
/// # Errors
/// [`SnapshotError::Malformed`] when the bytes are not of the snapshot shape,
/// [`SnapshotError::Misplaced`] when an order's side disagrees with the
/// array that lists it.
pub fn parse(bytes: &[u8]) -> Result<L4Snapshot, SnapshotError> {
    parse_coins(bytes, None)
}

/// [`parse`], building the books of `coins` only (all with `None`): the
/// other coins' orders are checked for well-formed JSON and passed over
/// without being converted, which is what makes a one-coin replay start
/// fast from a snapshot of every book.
///
/// # Errors
/// As [`parse`].
pub fn parse_coins(
    bytes: &[u8],
    coins: Option<&BTreeSet<String>>,
) -> Result<L4Snapshot, SnapshotError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let (height, coins) = SnapshotSeed(coins)
        .deserialize(&mut deserializer)
        .and_then(|parsed| deserializer.end().map(|()| parsed))
        .map_err(|e| SnapshotError::Malformed {
            reason: e.to_string(),
        })?;
    let mut books = Books::new();
    for (coin, book, misplaced) in coins {
        if let Some(oid) = misplaced {
            return Err(SnapshotError::Misplaced { coin, oid, height });
        }
        books.replace(&coin, book);
    }
    Ok(L4Snapshot { height, books })
}

/// The coins whose books are built (`None`: all).
type Scope<'s> = Option<&'s BTreeSet<String>>;

/// `[height, [[coin, [bids, asks]], …]]`.
struct SnapshotSeed<'s>(Scope<'s>);

impl<'de> DeserializeSeed<'de> for SnapshotSeed<'_> {
    type Value = (u64, Vec<(String, L4Book, Option<u64>)>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct SnapshotVisitor<'s>(Scope<'s>);
        impl<'de> Visitor<'de> for SnapshotVisitor<'_> {
            type Value = (u64, Vec<(String, L4Book, Option<u64>)>);
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("[height, [[coin, [bids, asks]], …]]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let height: u64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let coins = seq
                    .next_element_seed(CoinListSeed(self.0))?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok((height, coins))
            }
        }
        deserializer.deserialize_seq(SnapshotVisitor(self.0))
    }
}

/// `[[coin, [bids, asks]], …]`, each book in scope built while reading.
struct CoinListSeed<'s>(Scope<'s>);

impl<'de> DeserializeSeed<'de> for CoinListSeed<'_> {
    type Value = Vec<(String, L4Book, Option<u64>)>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct CoinsVisitor<'s>(Scope<'s>);
        impl<'de> Visitor<'de> for CoinsVisitor<'_> {
            type Value = Vec<(String, L4Book, Option<u64>)>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of [coin, [bids, asks]]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = seq.next_element_seed(CoinEntrySeed(self.0))? {
                    if let Some(entry) = entry {
                        out.push((entry.coin, entry.book, entry.misplaced));
                    }
                }
                Ok(out)
            }
        }
        deserializer.deserialize_seq(CoinsVisitor(self.0))
    }
}

/// `[coin, [bids, asks]]`; `None` for a coin out of scope.
struct CoinEntrySeed<'s>(Scope<'s>);

/// One coin's book as read.
struct CoinEntry {
    coin: String,
    book: L4Book,
    misplaced: Option<u64>,
}

impl<'de> DeserializeSeed<'de> for CoinEntrySeed<'_> {
    type Value = Option<CoinEntry>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct EntryVisitor<'s>(Scope<'s>);
        impl<'de> Visitor<'de> for EntryVisitor<'_> {
            type Value = Option<CoinEntry>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("[coin, [bids, asks]]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let coin: std::borrow::Cow<'de, str> = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                if self.0.is_some_and(|scope| !scope.contains(coin.as_ref())) {
                    seq.next_element::<de::IgnoredAny>()?
                        .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                    if seq.next_element::<de::IgnoredAny>()?.is_some() {
                        return Err(de::Error::invalid_length(3, &self));
                    }
                    return Ok(None);
                }
                let sides: Sides = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let mut book = L4Book::new();
                let mut misplaced = None;
                for (expected, orders) in [(Side::Bid, sides.bids), (Side::Ask, sides.asks)] {
                    for order in orders {
                        if order.side != expected || misplaced.is_some() {
                            misplaced.get_or_insert(order.oid);
                            continue;
                        }
                        book.insert(order);
                    }
                }
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(Some(CoinEntry {
                    coin: coin.into_owned(),
                    book,
                    misplaced,
                }))
            }
        }
        deserializer.deserialize_seq(EntryVisitor(self.0))
    }
}

/// `[bids, asks]`.
struct Sides {
    bids: Vec<RestingOrder>,
    asks: Vec<RestingOrder>,
}

impl<'de> Deserialize<'de> for Sides {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (bids, asks): (OrderList, OrderList) = Deserialize::deserialize(deserializer)?;
        Ok(Sides {
            bids: bids.0,
            asks: asks.0,
        })
    }
}

/// `[[user, order], …]`, converted element by element.
struct OrderList(Vec<RestingOrder>);

impl<'de> Deserialize<'de> for OrderList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrdersVisitor;
        impl<'de> Visitor<'de> for OrdersVisitor {
            type Value = OrderList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of [user, order]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OrderList, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some((user, order)) = seq.next_element::<(&'de str, NodeOrder<'de>)>()? {
                    out.push(RestingOrder::from_node(user, &order));
                }
                Ok(OrderList(out))
            }
        }
        deserializer.deserialize_seq(OrdersVisitor)
    }
}

/// How one coin's folded book differs from the snapshot's (first difference
/// found, in book order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Market.
    pub coin: String,
    /// What differs, e.g. `"bid 3: oid 12 vs 15"`.
    pub detail: String,
}

/// Compares `folded` with `snapshot` coin by coin: same orders (oid, user,
/// side, price, size) in the same price-time order. Coins missing on one side
/// count as empty books. Returns the diverged coins, sorted.
pub fn compare(folded: &Books, snapshot: &Books) -> Vec<Divergence> {
    let empty = L4Book::new();
    let mut coins: Vec<&str> = folded.iter().map(|(coin, _)| coin).collect();
    coins.extend(snapshot.iter().map(|(coin, _)| coin));
    coins.sort_unstable();
    coins.dedup();
    coins
        .into_iter()
        .filter_map(|coin| {
            let ours = folded.get(coin).unwrap_or(&empty);
            let theirs = snapshot.get(coin).unwrap_or(&empty);
            first_difference(ours, theirs).map(|detail| Divergence {
                coin: coin.to_owned(),
                detail,
            })
        })
        .collect()
}

fn first_difference(ours: &L4Book, theirs: &L4Book) -> Option<String> {
    for side in [Side::Bid, Side::Ask] {
        let mut a = ours.side(side).flat_map(Level::orders);
        let mut b = theirs.side(side).flat_map(Level::orders);
        let mut position = 0usize;
        loop {
            match (a.next(), b.next()) {
                (None, None) => break,
                (Some(x), None) => {
                    return Some(format!(
                        "{} {position}: extra folded oid {}",
                        side.as_str(),
                        x.oid
                    ));
                }
                (None, Some(y)) => {
                    return Some(format!(
                        "{} {position}: missing snapshot oid {}",
                        side.as_str(),
                        y.oid
                    ));
                }
                (Some(x), Some(y)) => {
                    if x.oid != y.oid
                        || x.user != y.user
                        || x.limit_px != y.limit_px
                        || x.sz != y.sz
                    {
                        return Some(format!(
                            "{} {position}: folded oid {} {}@{} vs snapshot oid {} {}@{}",
                            side.as_str(),
                            x.oid,
                            x.sz,
                            x.limit_px,
                            y.oid,
                            y.sz,
                            y.limit_px
                        ));
                    }
                }
            }
            position += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_ORDERS: &str = r#"[42,[["@1",[[["0x01",{"coin":"@1","side":"B","limitPx":"1.5","sz":"2.0","oid":7,"timestamp":1,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"2.0","tif":"Gtc","cloid":null}]],[["0x02",{"coin":"@1","side":"A","limitPx":"1.6","sz":"3.0","oid":8,"timestamp":2,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"3.0","tif":null,"cloid":null}]]]]]]"#;

    #[test]
    fn parses_height_coins_sides_and_metadata() {
        let snapshot = parse(TWO_ORDERS.as_bytes()).unwrap();
        assert_eq!(snapshot.height, 42);
        let book = snapshot.books.get("@1").unwrap();
        assert_eq!(book.best_bid().unwrap().px().to_string(), "1.5");
        assert_eq!(book.best_ask().unwrap().px().to_string(), "1.6");
        assert_eq!(book.get(8).unwrap().tif, None);
        assert_eq!(book.get(7).unwrap().tif.as_deref(), Some("Gtc"));
    }

    #[test]
    fn rejects_an_order_on_the_wrong_side() {
        let swapped = TWO_ORDERS.replacen(r#""side":"B""#, r#""side":"A""#, 1);
        assert_eq!(
            parse(swapped.as_bytes()),
            Err(SnapshotError::Misplaced {
                coin: "@1".into(),
                oid: 7,
                height: 42
            })
        );
        assert!(matches!(
            parse(b"[1,{}]"),
            Err(SnapshotError::Malformed { .. })
        ));
    }

    #[test]
    fn a_scoped_parse_builds_only_the_coins_asked_for() {
        let two_coins = TWO_ORDERS.replacen(
            "[42,[",
            r#"[42,[["BTC",[[["0x03",{"coin":"BTC","side":"B","limitPx":"9.0","sz":"1.0","oid":9,"timestamp":3,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"1.0","tif":"Gtc","cloid":null}]],[]]],"#,
            1,
        );
        let all = parse(two_coins.as_bytes()).unwrap();
        assert_eq!(all.books.len(), 2);
        let only: BTreeSet<String> = ["@1".to_owned()].into();
        let scoped = parse_coins(two_coins.as_bytes(), Some(&only)).unwrap();
        assert_eq!(scoped.height, 42);
        assert_eq!(scoped.books.len(), 1);
        assert_eq!(scoped.books.get("@1"), all.books.get("@1"));
        // What is passed over must still be well-formed.
        let broken = two_coins.replacen(r#""sz":"1.0""#, r#""sz":"1.0"#, 1);
        assert!(matches!(
            parse_coins(broken.as_bytes(), Some(&only)),
            Err(SnapshotError::Malformed { .. })
        ));
        let extra = format!("{},7]", &two_coins[..two_coins.len() - 1]);
        assert!(
            parse_coins(extra.as_bytes(), Some(&only)).is_err(),
            "a third element"
        );
    }

    #[test]
    fn compare_finds_only_the_diverged_coin() {
        let snapshot = parse(TWO_ORDERS.as_bytes()).unwrap();
        let mut folded = snapshot.books.clone();
        assert!(compare(&folded, &snapshot.books).is_empty());
        folded.get_mut("@1").unwrap().remove(8);
        folded.get_or_create("BTC");
        let diverged = compare(&folded, &snapshot.books);
        assert_eq!(diverged.len(), 1);
        assert_eq!(diverged[0].coin, "@1");
        assert!(diverged[0].detail.contains("missing snapshot oid 8"));
    }
}
