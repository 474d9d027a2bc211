//! The market state machine: one [`Market`] folds each aligned [`Block`]
//! once — one scan or decode of each line — into everything the views read:
//! the L4 books ([`crate::fold`]), top of book, aggregated L2 books, raw L4
//! events of watched coins, typed order changes, mids, trades, fills, TP/SL
//! trigger orders and candles. It is the single writer: one thread calls
//! [`Market::apply`], then lets each subscription read the result.
//!
//! # One pass per line
//!
//! Order statuses are scanned once, by the book fold, which also hands the
//! TP/SL tracker, decoded, the statuses it acts on (see
//! [`crate::fold::FoldWants::triggers`]). Raw book diffs are decoded once,
//! by the book fold. Fills are decoded once here and shared by trades (and
//! through them candles), fills and the TP/SL positions.
//!
//! # What is folded
//!
//! [`Needs`] says which parts run: the live server folds everything (a
//! subscription may come for any view at any block, and TP/SL and candles
//! need their history), `l1gate replay` only what its view reads. Parts
//! that are not needed keep their starting state.
//!
//! # Where it starts
//!
//! From a node snapshot ([`Market::from_snapshot`]) or from empty books.
//! Blocks at or below the books' height change no book; with
//! [`Market::with_candles_from`], the blocks from an earlier block up to
//! the books' height are folded into trades and candles only, so a candle
//! store can resume before the snapshot the books start from.

pub mod bbo;
pub mod candle_fold;
pub mod candles;
pub mod fills;
pub mod l2;
pub mod mids;
pub mod orders;
pub mod raw;
pub mod statuses;
pub mod tpsl;
pub mod trades;
mod triggers;

use std::collections::{BTreeMap, BTreeSet};

use feeds::Source;

use crate::block::{self, Block};
use crate::book::l4::Books;
use crate::event::FillEvent;
use crate::fold::{BlockReport, CoinReset, Engine, FoldWants, Gap, UnknownIds};
use crate::snapshot::{L4Snapshot, SnapshotError};

use self::bbo::BboView;
use self::candles::{CandlesView, Interval};
use self::fills::FillsView;
use self::l2::L2Tracker;
use self::mids::MidsView;
use self::orders::L4UpdatesView;
use self::raw::L4BookView;
use self::statuses::StatusesView;
use self::tpsl::TpslView;
use self::trades::{TradesView, WholeTrade};

/// Which parts of the market a [`Market`] folds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// The L4 books and what derives from them (top of book, L2, raw L4
    /// events, order changes, mids).
    pub books: bool,
    /// Trades (fills paired by trade id).
    pub trades: bool,
    /// Fills mapped into frame entries.
    pub fills: bool,
    /// TP/SL trigger orders and the positions they resolve against.
    pub tpsl: bool,
    /// Candles (from trades).
    pub candles: bool,
}

impl Needs {
    /// Every part: what a server folds.
    pub const ALL: Needs = Needs {
        books: true,
        trades: true,
        fills: true,
        tpsl: true,
        candles: true,
    };
    /// No part.
    pub const NONE: Needs = Needs {
        books: false,
        trades: false,
        fills: false,
        tpsl: false,
        candles: false,
    };
    /// The books only.
    pub const BOOKS: Needs = Needs {
        books: true,
        ..Needs::NONE
    };

    /// Both sets of parts.
    #[must_use]
    pub fn and(self, other: Needs) -> Needs {
        Needs {
            books: self.books || other.books,
            trades: self.trades || other.trades,
            fills: self.fills || other.fills,
            tpsl: self.tpsl || other.tpsl,
            candles: self.candles || other.candles,
        }
    }

    /// The node streams a fold with these parts reads: the order statuses
    /// and raw book diffs for the books and TP/SL, the fills for trades,
    /// fills, TP/SL positions and candles. Misc events and TWAP statuses
    /// feed no part, so no fold waits for them. Candles also read the book
    /// streams: they close on the block clock, and on a streaming node only
    /// those streams carry a line for (nearly) every block.
    pub fn sources(self) -> Vec<Source> {
        let mut sources = Vec::new();
        if self.books || self.tpsl || self.candles {
            sources.extend([Source::OrderStatuses, Source::RawBookDiffs]);
        }
        if self.decodes_fills() {
            sources.push(Source::Fills);
        }
        sources
    }

    /// Whether the block's fills are decoded at all.
    fn decodes_fills(self) -> bool {
        self.trades || self.fills || self.tpsl || self.candles
    }

    /// The step of a block's fold after which every part named here is
    /// folded: a driver can publish a view's frames then, before the rest
    /// of the block is folded.
    pub fn ready_after(self) -> Step {
        if self.tpsl {
            Step::Done
        } else if self.books {
            Step::Books
        } else {
            Step::Fills
        }
    }
}

/// The steps of one block's fold, in the order [`Market::apply_in_steps`]
/// takes them. The books of the coins whose price levels a subscription
/// reads ([`Market::fold_first`]) come first: their raw book diffs are a
/// small share of a block's and need no order status. The fills alone make
/// trades, fills and candles, so they come next and their frames need not
/// wait for the other books (the costliest part); TP/SL reads the fills and
/// the trigger statuses the book fold found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// The books of the coins folded first are final for the block, with
    /// their tops of book and tracked L2 books; the order statuses are not
    /// read yet.
    FirstBooks,
    /// The fills are decoded; trades, fills and candles are folded.
    Fills,
    /// The books are folded, with everything derived from them (top of
    /// book, mids, L2, raw L4 events, order changes, order statuses).
    Books,
    /// TP/SL is folded: the whole block is.
    Done,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 4] = [Step::FirstBooks, Step::Fills, Step::Books, Step::Done];
}

/// Where the market stands: the last folded block and its time (0 and 0
/// before the first). Every frame carries the position it was made at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// Sequential block height.
    pub block_number: u64,
    /// Block time, Unix ms.
    pub time: i64,
}

/// What a [`Market`] carries from block to block, to rebuild one from a
/// checkpoint.
#[derive(Debug)]
pub(crate) struct MarketParts {
    pub(crate) needs: Needs,
    pub(crate) fold: Engine,
    pub(crate) height: Option<u64>,
    pub(crate) time_ms: i64,
    pub(crate) trades: TradesView,
    pub(crate) fills: FillsView,
    pub(crate) tpsl: TpslView,
    pub(crate) candles: CandlesView,
    pub(crate) universe: BTreeSet<String>,
}

/// The single-writer market state. See the module docs.
#[derive(Debug)]
pub struct Market {
    needs: Needs,
    fold: Engine,
    /// The last block folded into anything.
    height: Option<u64>,
    time_ms: i64,
    /// Open subscriptions that read the tops of book (BBO, mids). While
    /// there are none, a block's fold leaves `bbo` and `mids` alone: they
    /// are rebuilt from the books when the first such subscription opens.
    tops_watchers: usize,
    /// Open fills subscriptions. While there are none, a block's fills are
    /// not mapped into frame entries (only the position moves): nothing
    /// would read them, and a busy block has thousands.
    fills_watchers: usize,
    /// Coins whose books are folded first ([`Step::FirstBooks`]), with how
    /// many open subscriptions asked for each.
    first: BTreeMap<String, usize>,
    bbo: BboView,
    l2: L2Tracker,
    raw: L4BookView,
    statuses: StatusesView,
    orders: L4UpdatesView,
    mids: MidsView,
    trades: TradesView,
    fills: FillsView,
    tpsl: TpslView,
    candles: CandlesView,
    /// Every coin seen: the books' coins and the coins traded since.
    universe: BTreeSet<String>,
    /// Books counted into `universe` so far (books are only ever added).
    universe_books: usize,
    /// Whether the last block added a coin to `universe`.
    universe_grew: bool,
    /// The fill list's room, kept between blocks.
    fill_room: block::FillRoom,
}

impl Market {
    /// Empty books; the first block is folded into them.
    pub fn new(needs: Needs) -> Self {
        Self::starting(Engine::new(), needs)
    }

    /// The books of a node snapshot: blocks at or below its height are
    /// skipped.
    pub fn from_snapshot(snapshot: L4Snapshot, needs: Needs) -> Self {
        Self::starting(Engine::from_snapshot(snapshot), needs)
    }

    fn starting(fold: Engine, needs: Needs) -> Self {
        Self::restored(MarketParts {
            needs,
            height: fold.height(),
            time_ms: 0,
            fold,
            trades: TradesView::new(),
            fills: FillsView::new(),
            tpsl: TpslView::new(),
            candles: CandlesView::new(),
            universe: BTreeSet::new(),
        })
    }

    /// A market as a checkpoint left it (see [`crate::checkpoint`]), or,
    /// from fresh parts, a starting one: no subscription watches anything
    /// yet, so the tops of book, mids and L2
    /// books are rebuilt from the books when one does, as after any start.
    pub(crate) fn restored(parts: MarketParts) -> Self {
        let mut market = Self {
            needs: parts.needs,
            height: parts.height,
            time_ms: parts.time_ms,
            fold: parts.fold,
            tops_watchers: 0,
            fills_watchers: 0,
            first: BTreeMap::new(),
            bbo: BboView::default(),
            l2: L2Tracker::default(),
            raw: L4BookView::default(),
            statuses: StatusesView::default(),
            orders: L4UpdatesView::default(),
            mids: MidsView::default(),
            trades: parts.trades,
            fills: parts.fills,
            tpsl: parts.tpsl,
            candles: parts.candles,
            universe: parts.universe,
            universe_books: 0,
            universe_grew: false,
            fill_room: block::FillRoom::default(),
        };
        market.follow_universe();
        market.universe_grew = false;
        market
    }

    /// Keeps the books of `coins` only (see [`Engine::keeping_books_of`]):
    /// for a run whose views read no other book.
    #[must_use]
    pub fn keeping_books_of(mut self, coins: BTreeSet<String>) -> Self {
        self.fold = self.fold.keeping_books_of(coins);
        self.universe_books = 0;
        self.universe.clear();
        self.follow_universe();
        self
    }

    /// Tracks the candles of `intervals` only (every interval by default):
    /// for a fold that keeps a few, a candle store or an import.
    #[must_use]
    pub fn with_candle_intervals(mut self, intervals: &[Interval]) -> Self {
        self.candles = CandlesView::with_intervals(intervals);
        self
    }

    /// Also folds trades and candles from `first_block` on (blocks below the
    /// books' start included), so a candle store that resumes before the
    /// snapshot the books start from misses nothing. Does nothing when the
    /// market already starts at or before it.
    #[must_use]
    pub fn with_candles_from(mut self, first_block: u64) -> Self {
        if self
            .height
            .is_some_and(|height| first_block <= height.saturating_add(1))
        {
            self.height = first_block.checked_sub(1);
        }
        self
    }

    /// What this market folds.
    pub fn needs(&self) -> Needs {
        self.needs
    }

    /// The position frames of the current state carry.
    pub fn position(&self) -> Position {
        Position {
            block_number: self.height.unwrap_or(0),
            time: self.time_ms,
        }
    }

    /// The last folded block (or the starting snapshot's height).
    pub fn height(&self) -> Option<u64> {
        self.height
    }

    /// The L4 books.
    pub fn books(&self) -> &Books {
        self.fold.books()
    }

    /// Every order `user` has resting, by coin, shared: the first question
    /// about a user walks every book, the next ones cost a look per book
    /// (see [`Books::orders_of`]).
    pub fn orders_of(
        &mut self,
        user: &str,
    ) -> Vec<(crate::text::Short, crate::book::l4::UserOrders)> {
        self.fold.orders_of(user)
    }

    /// Keeps the orders of `user` current in the books until
    /// [`Market::release_orders_of`] (see [`Books::hold_user`]): an open
    /// orders subscription reads them every block. False, holding nothing,
    /// when the books hold as many users as they take.
    pub fn hold_orders_of(&mut self, user: &str) -> bool {
        self.fold.hold_user(user)
    }

    /// Takes back one [`Market::hold_orders_of`].
    pub fn release_orders_of(&mut self, user: &str) {
        self.fold.release_user(user);
    }

    /// The book fold (position, counters).
    pub fn fold(&self) -> &Engine {
        &self.fold
    }

    /// Starts keeping the tops of book and the mids current (a BBO or mids
    /// subscription opens): the first watcher rebuilds them from the books.
    /// Pair every call with [`Market::unwatch_tops`].
    pub fn watch_tops(&mut self) {
        if self.tops_watchers == 0 {
            self.bbo.rebuild(self.fold.books());
            self.mids.rebuild(self.fold.books());
        }
        self.tops_watchers += 1;
    }

    /// A subscription that called [`Market::watch_tops`] closed; when none
    /// is left, blocks no longer update the tops and mids.
    pub fn unwatch_tops(&mut self) {
        self.tops_watchers = self.tops_watchers.saturating_sub(1);
    }

    /// Starts mapping each block's fills into frame entries (a fills
    /// subscription opens; it reads the next block's). Pair every call with
    /// [`Market::unwatch_fills`].
    pub fn watch_fills(&mut self) {
        self.fills_watchers += 1;
    }

    /// A subscription that called [`Market::watch_fills`] closed; when none
    /// is left, blocks no longer map their fills.
    pub fn unwatch_fills(&mut self) {
        self.fills_watchers = self.fills_watchers.saturating_sub(1);
    }

    /// Folds the books of `coins` first in every block, before the order
    /// statuses and the other books ([`Step::FirstBooks`]): for a
    /// subscription that reads only those coins' price levels. Pair every
    /// call with [`Market::unfold_first`] for the same coins.
    pub fn fold_first<'c>(&mut self, coins: impl IntoIterator<Item = &'c str>) {
        for coin in coins {
            *self.first.entry(coin.to_owned()).or_default() += 1;
        }
    }

    /// A subscription that called [`Market::fold_first`] closed.
    pub fn unfold_first<'c>(&mut self, coins: impl IntoIterator<Item = &'c str>) {
        for coin in coins {
            if let Some(count) = self.first.get_mut(coin) {
                *count -= 1;
                if *count == 0 {
                    self.first.remove(coin);
                }
            }
        }
    }

    /// Top of book per coin: current while a subscription watches it
    /// ([`Market::watch_tops`]), as of the last watched block otherwise.
    pub fn bbo(&self) -> &BboView {
        &self.bbo
    }

    /// Aggregated L2 books of the parameter sets subscribed to.
    pub fn l2(&self) -> &L2Tracker {
        &self.l2
    }

    /// Aggregated L2 books, to track or untrack one (with the books to
    /// compute it from).
    pub fn l2_mut(&mut self) -> (&mut L2Tracker, &Books) {
        (&mut self.l2, self.fold.books())
    }

    /// Raw L4 events of watched coins.
    pub fn raw(&self) -> &L4BookView {
        &self.raw
    }

    /// Raw L4 events, to watch or unwatch a coin.
    pub fn raw_mut(&mut self) -> &mut L4BookView {
        &mut self.raw
    }

    /// The last block's order statuses of watched accounts.
    pub fn statuses(&self) -> &StatusesView {
        &self.statuses
    }

    /// The watched accounts' statuses, to watch or unwatch an account.
    pub fn statuses_mut(&mut self) -> &mut StatusesView {
        &mut self.statuses
    }

    /// The last block's typed order changes.
    pub fn orders(&self) -> &L4UpdatesView {
        &self.orders
    }

    /// Mids per coin: current while a subscription watches the tops
    /// ([`Market::watch_tops`]).
    pub fn mids(&self) -> &MidsView {
        &self.mids
    }

    /// The last block's trades and running counts.
    pub fn trades(&self) -> &TradesView {
        &self.trades
    }

    /// The last block's fills: mapped while a fills subscription is open
    /// ([`Market::watch_fills`]), none otherwise.
    pub fn fills(&self) -> &FillsView {
        &self.fills
    }

    /// Tracked trigger orders and positions.
    pub fn tpsl(&self) -> &TpslView {
        &self.tpsl
    }

    /// Candles of every interval.
    pub fn candles(&self) -> &CandlesView {
        &self.candles
    }

    /// Every coin seen so far (the starting books' and every coin booked or
    /// traded since); it only grows.
    pub fn universe(&self) -> &BTreeSet<String> {
        &self.universe
    }

    /// Whether the last folded block added a coin to the universe.
    pub fn universe_grew(&self) -> bool {
        self.universe_grew
    }

    /// Unknown order ids per coin since the start.
    pub fn unknown_ids(&self) -> &BTreeMap<String, UnknownIds> {
        self.fold.unknown_ids()
    }

    /// Folds one block. Blocks at or below the market's height are skipped;
    /// a jump past `height + 1` is reported as a [`Gap`] and folded anyway.
    pub fn apply(&mut self, block: &Block) -> BlockReport {
        self.apply_in_steps(block, |_, _| {})
    }

    /// [`Market::apply`], calling `after` with the market at the end of
    /// each [`Step`] (every step, in order, unless the block is skipped).
    /// From the first step on, [`Market::position`] is the block's; a
    /// part is final for the block once the step it is
    /// [`ready after`](Needs::ready_after) has been passed to `after`.
    pub fn apply_in_steps(
        &mut self,
        block: &Block,
        mut after: impl FnMut(Step, &Market),
    ) -> BlockReport {
        let mut report = BlockReport {
            block: block.number,
            ..BlockReport::default()
        };
        if let Some(height) = self.height {
            if block.number <= height {
                report.skipped = true;
                return report;
            }
            if block.number > height + 1 {
                report.gap = Some(Gap {
                    expected: height + 1,
                    got: block.number,
                });
            }
        }
        let needs = self.needs;
        let books_due = self.fold.height().is_none_or(|h| block.number > h);
        self.statuses.clear();
        let (number, time) = (block.number, block.time_ms);
        self.height = Some(number);
        self.time_ms = time;
        let tpsl = &self.tpsl;
        let tracks = |oid: u64| tpsl.tracks(oid);
        let mut begun = None;
        if books_due && (needs.books || needs.tpsl) {
            let wants = FoldWants {
                books: needs.books,
                raw_coins: self.raw.coins(),
                raw_users: self.statuses.users(),
                triggers: needs.tpsl.then_some(&tracks as &dyn Fn(u64) -> bool),
                order_changes: self.orders.take_spare(),
            };
            let first = &self.first;
            let started = self
                .fold
                .begin(block, wants, |coin| first.contains_key(coin));
            if needs.books {
                let books = self.fold.books();
                if self.tops_watchers > 0 {
                    self.bbo.update(books, &started.first);
                }
                self.l2
                    .update(books, &started.first, |coin| first.contains_key(coin));
            }
            begun = Some(started);
        }
        after(Step::FirstBooks, self);
        let (fills, whole_trades) = if needs.decodes_fills() {
            decode_trades(block, &mut self.fill_room, &mut report)
        } else {
            (Vec::new(), Vec::new())
        };
        if needs.trades || needs.candles {
            // Candles alone read no trade's parties.
            let parties = if needs.trades {
                trades::Parties::Kept
            } else {
                trades::Parties::Left
            };
            self.trades
                .apply_fills_and_trades_with(number, time, &fills, &whole_trades, parties);
            if needs.candles {
                self.candles.apply_trades_view(&self.trades);
            }
        }
        if needs.fills && books_due {
            if self.fills_watchers > 0 {
                self.fills.apply_fills(number, time, &fills);
            } else {
                self.fills.apply_fills(number, time, []);
            }
        }
        after(Step::Fills, self);
        let mut triggers = None;
        if let Some(begun) = begun {
            let (folded_report, mut folded) = self.fold.finish(begun);
            merge(&mut report, folded_report);
            if needs.books {
                let books = self.fold.books();
                let first = &self.first;
                if self.tops_watchers > 0 {
                    self.bbo.update_rest(books, &folded.changes);
                    self.mids.update(books, &self.bbo);
                }
                self.l2
                    .update(books, &folded.changes, |coin| !first.contains_key(coin));
                self.raw.update(&folded.changes);
                self.statuses.update(&mut folded.changes);
                self.orders.update(&mut folded.changes);
            }
            triggers = needs.tpsl.then_some(folded);
        }
        after(Step::Books, self);
        if let Some(folded) = triggers {
            self.tpsl
                .apply_events(number, time, &fills, &folded.trigger_statuses);
        }
        self.fill_room.put_back(fills);
        self.follow_universe();
        after(Step::Done, self);
        report
    }

    /// Compares the books with a newer node snapshot at their height; see
    /// [`Engine::check_snapshot`]. Diverged coins are reset from it and
    /// surface, with fresh snapshots for their subscribers, in the next
    /// block.
    ///
    /// # Errors
    /// [`SnapshotError::HeightMismatch`] when the snapshot is not at the
    /// books' height.
    pub fn check_snapshot(
        &mut self,
        snapshot: &L4Snapshot,
    ) -> Result<Vec<CoinReset>, SnapshotError> {
        self.fold.check_snapshot(snapshot)
    }

    /// Adds the coins of new books and of the last block's trades to the
    /// universe.
    fn follow_universe(&mut self) {
        let before = self.universe.len();
        let books = self.fold.books();
        if books.len() != self.universe_books {
            self.universe_books = books.len();
            for (coin, _) in books.iter() {
                if !self.universe.contains(coin) {
                    self.universe.insert(coin.to_owned());
                }
            }
        }
        for frame in self.trades.frames() {
            if !self.universe.contains(&frame.coin) {
                self.universe.insert(frame.coin.clone());
            }
        }
        self.universe_grew = self.universe.len() != before;
    }
}

/// A block's fills (in `room`'s list: put it back after the block) and the
/// whole trades of the older trade format, in file order; what does not
/// decode is added to `report`'s errors, and both count as its events.
fn decode_trades<'b>(
    block: &'b Block,
    room: &mut block::FillRoom,
    report: &mut BlockReport,
) -> (Vec<FillEvent<'b>>, Vec<WholeTrade>) {
    let block::BlockFills {
        fills,
        trades: trade_lines,
    } = block::decode_fills(block, room.take(), &mut report.decode_errors);
    report.events += fills.len() + trade_lines.len();
    let mut whole_trades = Vec::with_capacity(trade_lines.len());
    for line in &trade_lines {
        match WholeTrade::of_line(line) {
            Some(trade) => whole_trades.push(trade),
            None => report.decode_errors.push(block::BlockDecodeError::Event {
                block: block.number,
                error: crate::event::EventError::unreadable_time("trades"),
            }),
        }
    }
    (fills, whole_trades)
}

/// Adds what the book fold reported to the market's report.
fn merge(report: &mut BlockReport, folded: BlockReport) {
    report.events += folded.events;
    report.issues.extend(folded.issues);
    report.decode_errors.extend(folded.decode_errors);
    report.resets.extend(folded.resets);
}
