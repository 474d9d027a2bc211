//! The node's L4 snapshots (`[height, [[coin, [bids, asks]]]]` with
//! `[user, order]` elements): parsing straight into [`Books`] without an
//! intermediate tree, and the per-coin comparison of a snapshot with folded
//! state that finds which coins diverged.

use std::collections::BTreeSet;
use std::fmt;

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
    parse_with(bytes, coins, None)
}

/// [`parse`], telling `release` every few MiB how many leading bytes of
/// `bytes` it is done with (it never reads them again), so that a caller
/// parsing a mapped file can let go of those pages as it goes: the
/// server's start then holds a window of the file, not the file and the
/// books at once.
///
/// # Errors
/// As [`parse`].
pub fn parse_releasing(bytes: &[u8], release: &dyn Fn(usize)) -> Result<L4Snapshot, SnapshotError> {
    let progress = Progress {
        start: bytes.as_ptr() as usize,
        len: bytes.len(),
        released: std::cell::Cell::new(0),
        release,
    };
    parse_with(bytes, None, Some(&progress))
}

/// How far a parse has read, told to a caller every [`RELEASE_STEP`].
struct Progress<'r> {
    /// Address and length of the bytes parsed.
    start: usize,
    len: usize,
    /// What the caller was told last.
    released: std::cell::Cell<usize>,
    release: &'r dyn Fn(usize),
}

/// Bytes read between two calls of a [`parse_releasing`] caller's release.
const RELEASE_STEP: usize = 4 << 20;

impl Progress<'_> {
    /// `text`, borrowed from the bytes parsed, was just read: every byte
    /// before it is done with. (A parse reads front to back, and strings
    /// without escapes are borrowed straight from the input, so the
    /// address says where the parse is.)
    fn reached(&self, text: &str) {
        let at = (text.as_ptr() as usize).wrapping_sub(self.start);
        if at <= self.len && at >= self.released.get() + RELEASE_STEP {
            self.released.set(at);
            (self.release)(at);
        }
    }
}

fn parse_with(
    bytes: &[u8],
    coins: Option<&BTreeSet<String>>,
    progress: Reach<'_>,
) -> Result<L4Snapshot, SnapshotError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let (height, coins) = SnapshotSeed(coins, progress)
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

/// Where a parse reports how far it read (`None`: nowhere).
type Reach<'p> = Option<&'p Progress<'p>>;

/// `[height, [[coin, [bids, asks]], …]]`.
struct SnapshotSeed<'s, 'p>(Scope<'s>, Reach<'p>);

impl<'de> DeserializeSeed<'de> for SnapshotSeed<'_, '_> {
    type Value = (u64, Vec<(String, L4Book, Option<u64>)>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct SnapshotVisitor<'s, 'p>(Scope<'s>, Reach<'p>);
        impl<'de> Visitor<'de> for SnapshotVisitor<'_, '_> {
            type Value = (u64, Vec<(String, L4Book, Option<u64>)>);
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("[height, [[coin, [bids, asks]], …]]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let height: u64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let coins = seq
                    .next_element_seed(CoinListSeed(self.0, self.1))?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok((height, coins))
            }
        }
        deserializer.deserialize_seq(SnapshotVisitor(self.0, self.1))
    }
}

/// `[[coin, [bids, asks]], …]`, each book in scope built while reading.
struct CoinListSeed<'s, 'p>(Scope<'s>, Reach<'p>);

impl<'de> DeserializeSeed<'de> for CoinListSeed<'_, '_> {
    type Value = Vec<(String, L4Book, Option<u64>)>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct CoinsVisitor<'s, 'p>(Scope<'s>, Reach<'p>);
        impl<'de> Visitor<'de> for CoinsVisitor<'_, '_> {
            type Value = Vec<(String, L4Book, Option<u64>)>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of [coin, [bids, asks]]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = seq.next_element_seed(CoinEntrySeed(self.0, self.1))? {
                    if let Some(entry) = entry {
                        out.push((entry.coin, entry.book, entry.misplaced));
                    }
                }
                Ok(out)
            }
        }
        deserializer.deserialize_seq(CoinsVisitor(self.0, self.1))
    }
}

/// `[coin, [bids, asks]]`; `None` for a coin out of scope.
struct CoinEntrySeed<'s, 'p>(Scope<'s>, Reach<'p>);

/// One coin's book as read.
struct CoinEntry {
    coin: String,
    book: L4Book,
    misplaced: Option<u64>,
}

impl<'de> DeserializeSeed<'de> for CoinEntrySeed<'_, '_> {
    type Value = Option<CoinEntry>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct EntryVisitor<'s, 'p>(Scope<'s>, Reach<'p>);
        impl<'de> Visitor<'de> for EntryVisitor<'_, '_> {
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
                let mut building = Building {
                    book: L4Book::new(),
                    misplaced: None,
                    reach: self.1,
                };
                seq.next_element_seed(SidesSeed(&mut building))?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let Building {
                    book, misplaced, ..
                } = building;
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
        deserializer.deserialize_seq(EntryVisitor(self.0, self.1))
    }
}

/// One coin's book as its orders are read: each goes straight into the
/// book (no list of a side's orders is held), unless it or an order before
/// it sits in the wrong side's list.
struct Building<'p> {
    book: L4Book,
    /// The first order found in the wrong side's list.
    misplaced: Option<u64>,
    reach: Reach<'p>,
}

impl Building<'_> {
    fn take(&mut self, order: RestingOrder, expected: Side) {
        if order.side != expected || self.misplaced.is_some() {
            self.misplaced.get_or_insert(order.oid);
            return;
        }
        self.book.insert(order);
    }
}

/// `[bids, asks]`, into a [`Building`].
struct SidesSeed<'b, 'p>(&'b mut Building<'p>);

impl<'de> DeserializeSeed<'de> for SidesSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        struct SidesVisitor<'b, 'p>(&'b mut Building<'p>);
        impl<'de> Visitor<'de> for SidesVisitor<'_, '_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("[bids, asks]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                for (at, side) in [Side::Bid, Side::Ask].into_iter().enumerate() {
                    seq.next_element_seed(OrderListSeed(&mut *self.0, side))?
                        .ok_or_else(|| de::Error::invalid_length(at, &self))?;
                }
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(())
            }
        }
        deserializer.deserialize_seq(SidesVisitor(self.0))
    }
}

/// `[[user, order], …]` of one side, converted element by element into a
/// [`Building`].
struct OrderListSeed<'b, 'p>(&'b mut Building<'p>, Side);

impl<'de> DeserializeSeed<'de> for OrderListSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        struct OrdersVisitor<'b, 'p>(&'b mut Building<'p>, Side);
        impl<'de> Visitor<'de> for OrdersVisitor<'_, '_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of [user, order]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while let Some((user, order)) = seq.next_element::<(&'de str, NodeOrder<'de>)>()? {
                    if let Some(reach) = self.0.reach {
                        reach.reached(user);
                    }
                    self.0.take(RestingOrder::from_node(user, &order), self.1);
                }
                Ok(())
            }
        }
        deserializer.deserialize_seq(OrdersVisitor(self.0, self.1))
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
        assert_eq!(book.get(8).unwrap().terms.tif, None);
        assert_eq!(book.get(7).unwrap().terms.tif.as_deref(), Some("Gtc"));
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
    fn a_releasing_parse_builds_the_same_books_and_tells_how_far_it_read() {
        // About 12 MB over three coins.
        let mut coins = Vec::new();
        for coin in ["A", "B", "C"] {
            let orders: Vec<String> = (0..12_000u64)
                .map(|n| {
                    let oid = n + 1_000_000 * u64::from(coin.as_bytes()[0]);
                    format!(
                        r#"["0x{n:040x}",{{"coin":"{coin}","side":"B","limitPx":"{}.5","sz":"2.0","oid":{oid},"timestamp":{n},"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"2.0","tif":"Gtc","cloid":null,"padding":"{}"}}]"#,
                        100 + n % 50,
                        "x".repeat(200)
                    )
                })
                .collect();
            coins.push(format!(r#"["{coin}",[[{}],[]]]"#, orders.join(",")));
        }
        let text = format!("[42,[{}]]", coins.join(","));
        let told = std::cell::RefCell::new(Vec::new());
        let parsed =
            parse_releasing(text.as_bytes(), &|below| told.borrow_mut().push(below)).unwrap();
        let told = told.into_inner();
        assert_eq!(parsed, parse(text.as_bytes()).unwrap());
        assert!(told.len() >= 2, "{told:?}");
        assert!(
            told.windows(2).all(|w| w[1] >= w[0] + RELEASE_STEP),
            "{told:?}"
        );
        assert!(*told.last().unwrap() < text.len());
        // Every byte told is behind an order already read: the parse never
        // goes back, so nothing before the last told offset is needed.
        let last = *told.last().unwrap();
        assert!(text[last..].starts_with("0x"), "told where a user starts");
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
