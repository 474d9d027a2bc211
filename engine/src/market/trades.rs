//! Trades: a block's fills paired into executions by `(coin, tid)` and
//! batched per (block, coin) as `TradesUpdate` frames.
//!
//! # Pairing
//!
//! Fills are grouped by `(coin, tid)` within one block — never by adjacency in
//! the file. A group becomes one [`Trade`] when it holds exactly two fills of
//! opposite sides with equal `px` and `sz`. Anything else is a malformed group,
//! reported as a [`PairingIssue`] and counted per coin in [`CoinCounts`]; it is
//! never fatal and produces no trade:
//!
//! - two fills on the same side ([`PairingIssue::SameSide`]);
//! - opposite sides whose `px` or `sz` differ ([`PairingIssue::Mismatch`]);
//! - a lone fill whose `tid` has no partner in the block
//!   ([`PairingIssue::Unmatched`]);
//! - more than two fills under one `tid` ([`PairingIssue::Crowded`]): the
//!   engine does not guess which two belong together.
//!
//! # One-sided fills
//!
//! Some executions have no counterparty fill and are not trades. They are
//! recognised before grouping and counted separately:
//!
//! - `dir: "Spot Dust Conversion"` (the node's periodic dust sweep; `tid` 0,
//!   all-zero hash, every fill on the ask side);
//! - `dir: "Split Outcome"` / `"Merge Outcome"`: outcome-market complete-set
//!   operations, one fill per leg under the sibling coins `#n` and `#n^1`;
//! - any other fill with `tid` 0 (no trade id was assigned).
//!
//! After grouping, a lone fill on an outcome coin (`#n`) is also counted as a
//! complete-set leg rather than as an unmatched pair.
//!
//! # Taker side
//!
//! `side` is the side of the fill with `crossed: true`. When both or neither
//! fill crossed, the side is `"A"` if the ask fill crossed and `"B"` otherwise
//! (the rule the node's reference server applies), and the trade is counted in
//! [`CoinCounts::ambiguous_taker`]. `hash` and `time` come from the taker's
//! fill (the ask fill when ambiguous); both fills carry the same values in
//! real data. `users` is `[buyer, seller]`.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use thiserror::Error;

use crate::block::DecodedBlock;
use crate::coin;
use crate::event::{Fill, FillEvent, Side, TradeLine};
use crate::num::{Px, Sz};

/// `dir` of the node's spot dust sweep.
pub const DIR_SPOT_DUST_CONVERSION: &str = "Spot Dust Conversion";
/// `dir` of an outcome-market complete-set split.
pub const DIR_SPLIT_OUTCOME: &str = "Split Outcome";
/// `dir` of an outcome-market complete-set merge.
pub const DIR_MERGE_OUTCOME: &str = "Merge Outcome";

/// `Trade`: one matched pair of fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trade {
    /// Market.
    pub coin: String,
    /// Taker side.
    pub side: Side,
    /// Execution price.
    pub px: Px,
    /// Execution size.
    pub sz: Sz,
    /// Fill time, Unix ms.
    pub time: i64,
    /// Taker's transaction hash (all zeros for TWAP slices). Empty, like
    /// `users`, in a market that folds for candles alone (`Needs::candles`
    /// without `Needs::trades`): no reader of it wants either.
    pub hash: String,
    /// Trade id shared by both fills.
    pub tid: u64,
    /// `[buyer, seller]`.
    pub users: [String; 2],
}

/// `TradesUpdate`: one block's trades of one coin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TradesUpdate {
    /// Market.
    pub coin: String,
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Trades in the order of their first fill in the block.
    pub trades: Vec<Trade>,
}

/// A trade written whole by the node's older `node_trades` format (see
/// `feeds::legacy`), with what identifies it among a block's trades.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeTrade {
    /// The trade: `side` is the line's taker side, `users` its
    /// `side_info` order (buyer, seller), `tid` 0 (the format has none).
    pub trade: Trade,
    /// The buyer's and the seller's order ids.
    pub oids: [u64; 2],
}

impl WholeTrade {
    /// The trade of one `node_trades` line; `None` when its time is not
    /// the node's time text.
    pub fn of_line(line: &TradeLine<'_>) -> Option<WholeTrade> {
        let time = feeds::time::parse_node_time_ms(line.time.as_bytes()).ok()?;
        let [buyer, seller] = &line.side_info;
        Some(WholeTrade {
            trade: Trade {
                coin: line.coin.to_owned(),
                side: line.side,
                px: line.px,
                sz: line.sz,
                time,
                hash: line.hash.to_owned(),
                tid: 0,
                users: [buyer.user.to_owned(), seller.user.to_owned()],
            },
            oids: [buyer.oid, seller.oid],
        })
    }
}

/// A group of fills under one `(coin, tid)` that is not a trade.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PairingIssue {
    /// Both fills are on the same side.
    #[error("trades: tid {tid} for {coin} at block {block} has two {side} fills")]
    SameSide {
        /// Market.
        coin: String,
        /// Trade id.
        tid: u64,
        /// Block number.
        block: u64,
        /// `"B"` or `"A"`.
        side: &'static str,
    },
    /// Opposite sides, but prices or sizes differ.
    #[error(
        "trades: tid {tid} for {coin} at block {block} pairs {bid_sz}@{bid_px} with {ask_sz}@{ask_px}"
    )]
    Mismatch {
        /// Market.
        coin: String,
        /// Trade id.
        tid: u64,
        /// Block number.
        block: u64,
        /// Bid fill's price.
        bid_px: Px,
        /// Bid fill's size.
        bid_sz: Sz,
        /// Ask fill's price.
        ask_px: Px,
        /// Ask fill's size.
        ask_sz: Sz,
    },
    /// A fill whose `tid` has no partner in the block.
    #[error("trades: tid {tid} for {coin} at block {block} has no partner fill (oid {oid})")]
    Unmatched {
        /// Market.
        coin: String,
        /// Trade id.
        tid: u64,
        /// Block number.
        block: u64,
        /// The lone fill's order id.
        oid: u64,
    },
    /// More than two fills share the `tid`.
    #[error("trades: tid {tid} for {coin} at block {block} has {fills} fills")]
    Crowded {
        /// Market.
        coin: String,
        /// Trade id.
        tid: u64,
        /// Block number.
        block: u64,
        /// How many fills.
        fills: usize,
    },
}

/// Why a fill is one-sided (not part of any trade).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OneSided {
    /// `dir: "Spot Dust Conversion"`.
    SpotDustConversion,
    /// An outcome-market complete-set leg.
    OutcomeCompleteSet,
    /// Any other fill with `tid` 0.
    NoTradeId,
}

/// Classifies a fill that cannot be half of a trade, before pairing.
pub fn one_sided(fill: &Fill<'_>) -> Option<OneSided> {
    match fill.dir {
        DIR_SPOT_DUST_CONVERSION => Some(OneSided::SpotDustConversion),
        DIR_SPLIT_OUTCOME | DIR_MERGE_OUTCOME => Some(OneSided::OutcomeCompleteSet),
        _ if fill.tid == 0 => Some(OneSided::NoTradeId),
        _ => None,
    }
}

/// Running totals for one coin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoinCounts {
    /// Trades emitted.
    pub trades: u64,
    /// Trades whose taker was decided by the fallback rule.
    pub ambiguous_taker: u64,
    /// [`PairingIssue::SameSide`] groups.
    pub same_side: u64,
    /// [`PairingIssue::Mismatch`] groups.
    pub mismatch: u64,
    /// [`PairingIssue::Unmatched`] fills.
    pub unmatched: u64,
    /// [`PairingIssue::Crowded`] groups.
    pub crowded: u64,
    /// Spot dust-conversion fills.
    pub spot_dust_conversion: u64,
    /// Outcome complete-set fills.
    pub outcome_complete_set: u64,
    /// Other fills with `tid` 0.
    pub no_trade_id: u64,
}

impl CoinCounts {
    /// Malformed groups and fills (the four [`PairingIssue`] kinds).
    pub fn malformed(&self) -> u64 {
        self.same_side + self.mismatch + self.unmatched + self.crowded
    }

    /// One-sided fills of every kind.
    pub fn one_sided(&self) -> u64 {
        self.spot_dust_conversion + self.outcome_complete_set + self.no_trade_id
    }

    fn count_one_sided(&mut self, kind: OneSided) {
        match kind {
            OneSided::SpotDustConversion => self.spot_dust_conversion += 1,
            OneSided::OutcomeCompleteSet => self.outcome_complete_set += 1,
            OneSided::NoTradeId => self.no_trade_id += 1,
        }
    }

    fn count_issue(&mut self, issue: &PairingIssue) {
        match issue {
            PairingIssue::SameSide { .. } => self.same_side += 1,
            PairingIssue::Mismatch { .. } => self.mismatch += 1,
            PairingIssue::Unmatched { .. } => self.unmatched += 1,
            PairingIssue::Crowded { .. } => self.crowded += 1,
        }
    }
}

/// What pairing one block's fills produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairedBlock {
    /// One frame per coin with trades, in order of the coin's first trade.
    pub frames: Vec<TradesUpdate>,
    /// Malformed groups, in order of their first fill.
    pub issues: Vec<PairingIssue>,
    /// One-sided fills: `(coin, kind)` in file order.
    pub one_sided: Vec<(String, OneSided)>,
    /// Trades decided by the fallback taker rule: `(coin, tid)`.
    pub ambiguous_taker: Vec<(String, u64)>,
}

impl PairedBlock {
    /// Every trade of the block, frame by frame.
    pub fn trades(&self) -> impl Iterator<Item = &Trade> {
        self.frames.iter().flat_map(|frame| frame.trades.iter())
    }
}

/// Pairs one block's fills into trades. Pure: the same fills always give
/// the same frames.
pub fn pair_fills<'e, 'a: 'e>(
    block_number: u64,
    time: i64,
    fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
) -> PairedBlock {
    pair_fills_with(block_number, time, fills, Parties::Kept)
}

/// Whether paired trades carry their parties: the taker's `hash` and the
/// two `users`. Candles read neither: a market folding for candles alone
/// leaves them empty and spares three copies a trade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parties {
    Kept,
    Left,
}

/// [`pair_fills`], the trades' parties kept or left empty.
fn pair_fills_with<'e, 'a: 'e>(
    block_number: u64,
    time: i64,
    fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
    parties: Parties,
) -> PairedBlock {
    let mut out = PairedBlock::default();
    // The fills of each (coin, tid) in file order: the first two and how
    // many (a trade has two; more is an error reported with the first).
    // A trade is two fills: room for half of them spares the list's growth
    // copies (a busy block's fills are hundreds).
    let fills = fills.into_iter();
    let mut groups: Vec<(&'e FillEvent<'a>, Option<&'e FillEvent<'a>>, usize)> =
        Vec::with_capacity(fills.size_hint().0.div_ceil(2));
    let mut group_of = Positions::default();
    for event in fills {
        let fill = event.fill();
        if let Some(kind) = one_sided(fill) {
            out.one_sided.push((fill.coin.to_owned(), kind));
            continue;
        }
        // Each group's (tid, coin), as its first fill says them.
        let key_of = |first: &FillEvent<'a>| (first.fill().tid, first.fill().coin);
        let key = key_of(event);
        if let Some(at) = group_of.find(groups.len(), key, |at| key_of(groups[at].0)) {
            let group = &mut groups[at];
            group.1.get_or_insert(event);
            group.2 += 1;
        } else {
            groups.push((event, None, 1));
            group_of.added(groups.len(), key, |at| key_of(groups[at].0));
        }
    }
    // Each frame's market, as the fills name it.
    let mut frame_coins: Vec<&'a str> = Vec::new();
    let mut frame_of = Positions::default();
    for &group in &groups {
        match group {
            (lone, None, _) if coin::is_outcome(lone.fill().coin) => {
                out.one_sided
                    .push((lone.fill().coin.to_owned(), OneSided::OutcomeCompleteSet));
            }
            (lone, None, _) => {
                let fill = lone.fill();
                out.issues.push(PairingIssue::Unmatched {
                    coin: fill.coin.to_owned(),
                    tid: fill.tid,
                    block: block_number,
                    oid: fill.oid,
                });
            }
            (first, Some(second), 2) => match trade_of(block_number, first, second, parties) {
                Ok((trade, ambiguous)) => {
                    if ambiguous {
                        out.ambiguous_taker.push((trade.coin.clone(), trade.tid));
                    }
                    let coin = first.fill().coin;
                    let at = if let Some(at) =
                        frame_of.find(frame_coins.len(), coin, |at| frame_coins[at])
                    {
                        at
                    } else {
                        out.frames.push(TradesUpdate {
                            coin: coin.to_owned(),
                            time,
                            block_number,
                            trades: Vec::new(),
                        });
                        frame_coins.push(coin);
                        frame_of.added(frame_coins.len(), coin, |at| frame_coins[at]);
                        frame_coins.len() - 1
                    };
                    out.frames[at].trades.push(trade);
                }
                Err(issue) => out.issues.push(issue),
            },
            (first, Some(_), fills) => {
                out.issues.push(PairingIssue::Crowded {
                    coin: first.fill().coin.to_owned(),
                    tid: first.fill().tid,
                    block: block_number,
                    fills,
                });
            }
        }
    }
    out
}

/// Entries a [`Positions`] finds by a scan before it makes a table.
const SCANNED: usize = 16;

/// Where keys sit in a list that only grows (a block's trade groups, its
/// frames): found by a scan while the list is short — most blocks have a
/// few trades, and making a hash table for them cost more than their
/// pairing — and through a table once it is longer.
struct Positions<K> {
    table: Option<HashMap<K, usize, foldhash::fast::RandomState>>,
}

impl<K> Default for Positions<K> {
    fn default() -> Self {
        Self { table: None }
    }
}

impl<K: std::hash::Hash + Eq + Copy> Positions<K> {
    /// The position of `key` in a list of `len` entries whose keys
    /// `key_at` gives.
    fn find(&self, len: usize, key: K, key_at: impl Fn(usize) -> K) -> Option<usize> {
        match &self.table {
            Some(table) => table.get(&key).copied(),
            None => (0..len).find(|&at| key_at(at) == key),
        }
    }

    /// `key` was added at the end of the list, now `len` entries long.
    fn added(&mut self, len: usize, key: K, key_at: impl Fn(usize) -> K) {
        match &mut self.table {
            Some(table) => {
                table.insert(key, len - 1);
            }
            None if len > SCANNED => {
                self.table = Some((0..len).map(|at| (key_at(at), at)).collect());
            }
            None => {}
        }
    }
}

/// A block's trades: its fills paired ([`pair_fills`]), then its whole
/// trades (the older trade format) added, each once.
pub(crate) fn pair_block<'e, 'a: 'e>(
    block_number: u64,
    time: i64,
    fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
    whole: &[WholeTrade],
    parties: Parties,
) -> PairedBlock {
    let mut paired = pair_fills_with(block_number, time, fills, parties);
    add_whole_trades(&mut paired, block_number, time, whole);
    paired
}

/// Appends a block's whole trades to its frames, each once.
fn add_whole_trades(paired: &mut PairedBlock, block_number: u64, time: i64, whole: &[WholeTrade]) {
    let mut seen: Vec<(&str, Px, Sz, i64, [u64; 2])> = Vec::new();
    let mut kept: Vec<Trade> = Vec::with_capacity(whole.len());
    for item in whole {
        let t = &item.trade;
        let key = (t.coin.as_str(), t.px, t.sz, t.time, item.oids);
        if !seen.contains(&key) {
            seen.push(key);
            kept.push(t.clone());
        }
    }
    for trade in kept {
        let at = if let Some(at) = paired.frames.iter().position(|f| f.coin == trade.coin) {
            at
        } else {
            paired.frames.push(TradesUpdate {
                coin: trade.coin.clone(),
                time,
                block_number,
                trades: Vec::new(),
            });
            paired.frames.len() - 1
        };
        paired.frames[at].trades.push(trade);
    }
}

/// Builds the trade of two fills sharing `(coin, tid)`; the flag is true
/// when the taker came from the fallback rule.
fn trade_of(
    block: u64,
    first: &FillEvent<'_>,
    second: &FillEvent<'_>,
    parties: Parties,
) -> Result<(Trade, bool), PairingIssue> {
    let (bid, ask) = match (first.fill().side, second.fill().side) {
        (Side::Bid, Side::Ask) => (first, second),
        (Side::Ask, Side::Bid) => (second, first),
        (side, _) => {
            return Err(PairingIssue::SameSide {
                coin: first.fill().coin.to_owned(),
                tid: first.fill().tid,
                block,
                side: side.as_str(),
            });
        }
    };
    let (b, a) = (bid.fill(), ask.fill());
    if b.px != a.px || b.sz != a.sz {
        return Err(PairingIssue::Mismatch {
            coin: b.coin.to_owned(),
            tid: b.tid,
            block,
            bid_px: b.px,
            bid_sz: b.sz,
            ask_px: a.px,
            ask_sz: a.sz,
        });
    }
    let (side, taker, ambiguous) = match (b.crossed, a.crossed) {
        (true, false) => (Side::Bid, b, false),
        (false, true) => (Side::Ask, a, false),
        (_, ask_crossed) => (if ask_crossed { Side::Ask } else { Side::Bid }, a, true),
    };
    let (hash, users) = match parties {
        Parties::Kept => (
            taker.hash.to_owned(),
            [bid.user().to_owned(), ask.user().to_owned()],
        ),
        Parties::Left => (String::new(), [String::new(), String::new()]),
    };
    let trade = Trade {
        coin: b.coin.to_owned(),
        side,
        px: taker.px,
        sz: taker.sz,
        time: taker.time,
        hash,
        tid: taker.tid,
        users,
    };
    Ok((trade, ambiguous))
}

/// Shared state: the last block's trade frames and running per-coin counts.
/// Updated once per block by the engine thread; subscriptions only read it.
#[derive(Debug, Clone, Default)]
pub struct TradesView {
    block_number: u64,
    time: i64,
    last: PairedBlock,
    counts: BTreeMap<String, CoinCounts>,
}

impl TradesView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// A view as a checkpoint left it: its position and running counts
    /// (the last block's trades are not carried: the next block replaces
    /// them, and no subscription opens on them).
    pub(crate) fn restored(
        block_number: u64,
        time: i64,
        counts: BTreeMap<String, CoinCounts>,
    ) -> Self {
        Self {
            block_number,
            time,
            last: PairedBlock::default(),
            counts,
        }
    }

    /// Folds one decoded block.
    pub fn apply(&mut self, block: &DecodedBlock<'_>) {
        self.apply_fills(
            block.number,
            block.time_ms,
            block.fills.iter().map(|spanned| &spanned.event),
        );
    }

    /// Folds one block given as its fills.
    pub fn apply_fills<'e, 'a: 'e>(
        &mut self,
        block_number: u64,
        time: i64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
    ) {
        self.apply_fills_and_trades(block_number, time, fills, &[]);
    }

    /// Folds one block given as its fills and its whole trades (the older
    /// `node_trades` format). A whole trade the block holds twice (the same
    /// coin, price, size, time and order ids: a file listing each trade
    /// once per party) counts once; the first copy's taker side is kept.
    /// Whole trades come after the paired ones in their coin's frame.
    pub fn apply_fills_and_trades<'e, 'a: 'e>(
        &mut self,
        block_number: u64,
        time: i64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
        whole: &[WholeTrade],
    ) {
        self.apply_fills_and_trades_with(block_number, time, fills, whole, Parties::Kept);
    }

    /// [`TradesView::apply_fills_and_trades`], the paired trades' parties
    /// kept or left empty ([`Parties`]).
    pub(crate) fn apply_fills_and_trades_with<'e, 'a: 'e>(
        &mut self,
        block_number: u64,
        time: i64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
        whole: &[WholeTrade],
        parties: Parties,
    ) {
        let paired = pair_block(block_number, time, fills, whole, parties);
        for frame in &paired.frames {
            let trades = frame.trades.len() as u64;
            self.count(&frame.coin, |counts| counts.trades += trades);
        }
        for issue in &paired.issues {
            let coin = match issue {
                PairingIssue::SameSide { coin, .. }
                | PairingIssue::Mismatch { coin, .. }
                | PairingIssue::Unmatched { coin, .. }
                | PairingIssue::Crowded { coin, .. } => coin,
            };
            self.count(coin, |counts| counts.count_issue(issue));
        }
        for (coin, kind) in &paired.one_sided {
            self.count(coin, |counts| counts.count_one_sided(*kind));
        }
        for (coin, _) in &paired.ambiguous_taker {
            self.count(coin, |counts| counts.ambiguous_taker += 1);
        }
        self.block_number = block_number;
        self.time = time;
        self.last = paired;
    }

    /// Adds to `coin`'s running counts, made on its first trade (the name
    /// copied only then, not once a block).
    fn count(&mut self, coin: &str, add: impl FnOnce(&mut CoinCounts)) {
        match self.counts.get_mut(coin) {
            Some(counts) => add(counts),
            None => add(self.counts.entry(coin.to_owned()).or_default()),
        }
    }

    /// The last folded block: `(block_number, time)`.
    pub fn position(&self) -> (u64, i64) {
        (self.block_number, self.time)
    }

    /// The last block's pairing result.
    pub fn last(&self) -> &PairedBlock {
        &self.last
    }

    /// The last block's frames, one per coin with trades.
    pub fn frames(&self) -> &[TradesUpdate] {
        &self.last.frames
    }

    /// The last block's frame for `coin`.
    pub fn frame(&self, coin: &str) -> Option<&TradesUpdate> {
        self.last.frames.iter().find(|frame| frame.coin == coin)
    }

    /// Running counts per coin since the view was created.
    pub fn counts(&self) -> &BTreeMap<String, CoinCounts> {
        &self.counts
    }

    /// The running counts summed over every coin.
    pub fn totals(&self) -> CoinCounts {
        self.counts
            .values()
            .fold(CoinCounts::default(), |mut sum, c| {
                sum.trades += c.trades;
                sum.ambiguous_taker += c.ambiguous_taker;
                sum.same_side += c.same_side;
                sum.mismatch += c.mismatch;
                sum.unmatched += c.unmatched;
                sum.crowded += c.crowded;
                sum.spot_dust_conversion += c.spot_dust_conversion;
                sum.outcome_complete_set += c.outcome_complete_set;
                sum.no_trade_id += c.no_trade_id;
                sum
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode_fill;
    use rstest::rstest;

    fn fill_json(
        user: &str,
        coin: &str,
        side: &str,
        px: &str,
        sz: &str,
        tid: u64,
        crossed: bool,
    ) -> String {
        format!(
            r#"["{user}",{{"coin":"{coin}","px":"{px}","sz":"{sz}","side":"{side}","time":1000,"startPosition":"0.0","dir":"Open Long","closedPnl":"0.0","hash":"0xabc","oid":7,"crossed":{crossed},"fee":"0.0","tid":{tid},"feeToken":"USDC","twapId":null}}]"#
        )
    }

    fn pair_texts(texts: &[String]) -> PairedBlock {
        let events: Vec<FillEvent<'_>> = texts
            .iter()
            .map(|t| decode_fill(t.as_bytes()).unwrap())
            .collect();
        pair_fills(5, 1_000, &events)
    }

    /// Many trades in one block, each fill's partner far from it: the
    /// groups and frames are found by a scan at first and through a table
    /// past a few (`SCANNED`), the same either way.
    #[test]
    fn a_block_of_many_trades_pairs_like_a_block_of_few() {
        for trades in [3u64, 40] {
            let coin = |k: u64| format!("C{}", k % 25);
            let mut texts = Vec::new();
            for k in 0..trades {
                texts.push(fill_json("0xb", &coin(k), "B", "1.0", "2.0", 100 + k, true));
            }
            // The same tid in another market is another trade.
            texts.push(fill_json("0xb", "OTHER", "B", "1.0", "2.0", 100, true));
            for k in (0..trades).rev() {
                texts.push(fill_json(
                    "0xa",
                    &coin(k),
                    "A",
                    "1.0",
                    "2.0",
                    100 + k,
                    false,
                ));
            }
            texts.push(fill_json("0xa", "OTHER", "A", "1.0", "2.0", 100, false));
            // A third fill of the first trade: crowded.
            texts.push(fill_json("0xc", &coin(0), "A", "1.0", "2.0", 100, false));
            let paired = pair_texts(&texts);
            let tids: Vec<(String, u64)> =
                paired.trades().map(|t| (t.coin.clone(), t.tid)).collect();
            // Frame by frame, a market's frame where its first trade is (the
            // first group, crowded, makes none), in order within each.
            let mut frames: Vec<(String, Vec<u64>)> = Vec::new();
            let groups = (1..trades).map(|k| (coin(k), 100 + k));
            for (market, tid) in groups.chain([("OTHER".to_owned(), 100)]) {
                match frames.iter_mut().find(|(m, _)| *m == market) {
                    Some((_, tids)) => tids.push(tid),
                    None => frames.push((market, vec![tid])),
                }
            }
            let expected: Vec<(String, u64)> = frames
                .iter()
                .flat_map(|(m, tids)| tids.iter().map(|t| (m.clone(), *t)))
                .collect();
            assert_eq!(tids, expected, "{trades} trades");
            let markets: Vec<&str> = frames.iter().map(|(m, _)| m.as_str()).collect();
            let paired_markets: Vec<&str> = paired.frames.iter().map(|f| f.coin.as_str()).collect();
            assert_eq!(paired_markets, markets);
            assert!(
                matches!(
                    &paired.issues[..],
                    [PairingIssue::Crowded {
                        tid: 100,
                        fills: 3,
                        ..
                    }]
                ),
                "{:?}",
                paired.issues
            );
        }
    }

    #[rstest]
    #[case::ask_taker(false, true, Side::Ask, false)]
    #[case::bid_taker(true, false, Side::Bid, false)]
    #[case::both_crossed_falls_back_to_ask(true, true, Side::Ask, true)]
    #[case::neither_crossed_falls_back_to_bid(false, false, Side::Bid, true)]
    fn taker_side_follows_crossed(
        #[case] bid_crossed: bool,
        #[case] ask_crossed: bool,
        #[case] side: Side,
        #[case] ambiguous: bool,
    ) {
        let paired = pair_texts(&[
            fill_json("0xseller", "BTC", "A", "10.0", "1.5", 9, ask_crossed),
            fill_json("0xbuyer", "BTC", "B", "10.0", "1.5", 9, bid_crossed),
        ]);
        let trade = paired.trades().next().unwrap();
        assert_eq!(trade.side, side);
        assert_eq!(trade.users, ["0xbuyer".to_owned(), "0xseller".to_owned()]);
        assert_eq!(paired.ambiguous_taker.len(), usize::from(ambiguous));
    }

    #[test]
    fn trades_without_parties_differ_only_by_them() {
        let texts = [
            fill_json("0xseller", "BTC", "A", "10.0", "1.5", 9, true),
            fill_json("0xbuyer", "BTC", "B", "10.0", "1.5", 9, false),
        ];
        let events: Vec<FillEvent<'_>> = texts
            .iter()
            .map(|t| decode_fill(t.as_bytes()).unwrap())
            .collect();
        let full = pair_fills(5, 1_000, &events);
        let light = pair_fills_with(5, 1_000, &events, Parties::Left);
        let mut want = full.frames.clone();
        for trade in &mut want[0].trades {
            assert_eq!(trade.hash, "0xabc");
            trade.hash.clear();
            trade.users = [String::new(), String::new()];
        }
        assert_eq!(light.frames, want);
    }

    #[test]
    fn a_lone_fill_is_unmatched_and_a_third_crowds_its_trade() {
        let paired = pair_texts(&[
            fill_json("0xb1", "BTC", "B", "10.0", "1.0", 1, true),
            fill_json("0xs1", "BTC", "A", "10.0", "1.0", 1, false),
            fill_json("0xb2", "ETH", "B", "3.0", "1.0", 2, true),
            fill_json("0xs1", "BTC", "A", "10.0", "1.0", 1, false),
            fill_json("0xb3", "BTC", "B", "12.0", "1.0", 3, true),
            fill_json("0xs3", "BTC", "A", "12.0", "1.0", 3, false),
        ]);
        let tids: Vec<u64> = paired.trades().map(|t| t.tid).collect();
        assert_eq!(tids, [3], "a crowded tid makes no trade");
        assert_eq!(
            paired.issues,
            [
                PairingIssue::Crowded {
                    coin: "BTC".to_owned(),
                    tid: 1,
                    block: 5,
                    fills: 3,
                },
                PairingIssue::Unmatched {
                    coin: "ETH".to_owned(),
                    tid: 2,
                    block: 5,
                    oid: 7,
                },
            ]
        );
    }

    #[test]
    fn pairs_by_tid_not_by_adjacency() {
        let paired = pair_texts(&[
            fill_json("0xb1", "BTC", "B", "10.0", "1.0", 1, true),
            fill_json("0xb2", "BTC", "B", "11.0", "2.0", 2, false),
            fill_json("0xs2", "BTC", "A", "11.0", "2.0", 2, true),
            fill_json("0xs1", "BTC", "A", "10.0", "1.0", 1, false),
        ]);
        let tids: Vec<u64> = paired.trades().map(|t| t.tid).collect();
        assert_eq!(tids, [1, 2]);
        assert_eq!(paired.trades().next().unwrap().users[1], "0xs1");
        assert!(paired.issues.is_empty());
    }

    #[test]
    fn same_tid_on_two_coins_is_two_trades() {
        let paired = pair_texts(&[
            fill_json("0xb", "BTC", "B", "10.0", "1.0", 3, true),
            fill_json("0xb", "ETH", "B", "2.0", "1.0", 3, true),
            fill_json("0xs", "ETH", "A", "2.0", "1.0", 3, false),
            fill_json("0xs", "BTC", "A", "10.0", "1.0", 3, false),
        ]);
        let coins: Vec<&str> = paired.frames.iter().map(|f| f.coin.as_str()).collect();
        assert_eq!(coins, ["BTC", "ETH"]);
    }

    #[test]
    fn malformed_groups_are_reported_with_names() {
        let paired = pair_texts(&[
            fill_json("0xa", "BTC", "B", "10.0", "1.0", 1, true),
            fill_json("0xb", "BTC", "B", "10.0", "1.0", 1, false),
            fill_json("0xa", "BTC", "B", "10.0", "1.0", 2, true),
            fill_json("0xb", "BTC", "A", "10.5", "1.0", 2, false),
            fill_json("0xa", "BTC", "B", "10.0", "1.0", 3, true),
        ]);
        assert!(paired.frames.is_empty());
        assert_eq!(
            paired.issues[0].to_string(),
            "trades: tid 1 for BTC at block 5 has two B fills"
        );
        assert_eq!(
            paired.issues[1].to_string(),
            "trades: tid 2 for BTC at block 5 pairs 1.0@10.0 with 1.0@10.5"
        );
        assert_eq!(
            paired.issues[2],
            PairingIssue::Unmatched {
                coin: "BTC".into(),
                tid: 3,
                block: 5,
                oid: 7
            }
        );
    }

    #[test]
    fn lone_outcome_leg_is_one_sided_not_malformed() {
        let paired = pair_texts(&[fill_json("0xa", "#1890", "B", "0.4", "1.0", 77, true)]);
        assert!(paired.issues.is_empty());
        assert_eq!(
            paired.one_sided,
            [("#1890".to_owned(), OneSided::OutcomeCompleteSet)]
        );
    }
}
