//! The book fold: [`Engine`] owns every coin's L4 book, and
//! [`Engine::apply_with`] folds one aligned [`Block`] into them, returning a
//! [`BlockReport`] of what it could not apply and the block's
//! [`BlockChanges`] (touched coins, typed order changes, raw events of the
//! coins asked for). The market state machine ([`crate::market::Market`])
//! drives it once per block and hands the changes on to the book views.
//!
//! The same pass over the order statuses also serves the TP/SL tracker: with
//! a trigger watch ([`FoldWants::triggers`]) it hands back, decoded, every
//! status that opens a trigger order and every status of a watched order
//! id, so no status is decoded twice.
//!
//! Order statuses are scanned lazily: only statuses that can open a resting
//! order (`open`, `triggered`) are fully decoded — the rest (mostly
//! rejections, most of a block's bytes) change no book state; with a trigger
//! watch, their order id is read where it stands (`"oid":` after the status)
//! and only the watched ones are decoded — except `badAloPxRejected`, which
//! is never about a trigger order and is passed over unread. When no view wants raw statuses, a
//! status line is not even walked bracket by bracket: its `"status":"` keys
//! are found with `memmem` (which counts the events) and only the openings
//! are delimited, by decoding them. The statuses passed
//! over that way are not checked as JSON by the fold; a line that breaks the
//! node's layout where the scan looks is walked exactly instead. When a view
//! wants raw statuses (the L4 book view by coin, the order updates view by
//! account), every status is delimited and filed: with such a subscription
//! open, status lines take the exact walk instead of the `memmem` scan.
//!
//! Raw book diffs are delimited by their own decode: the compact decoder
//! reports how many bytes it read, so a diff is not walked before it is
//! decoded. A block's diffs are all decoded before any is applied, and each
//! coin's book is looked up once per run of that coin; then, while a diff is
//! applied, the book memory of the diffs a few places ahead is prefetched (a
//! mainnet book is far larger than the caches, and without that each diff
//! waited for its own trips to memory in turn).
//!
//! After the block, the touched coins are the books stamped with the block's
//! count, read off in coin order; the views then find those books by
//! position.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use bytes::Bytes;
use feeds::envelope;
use memchr::arch::all::packedpair::HeuristicFrequencyRank;
use memchr::memmem;

use crate::block::{Block, BlockDecodeError};
use crate::book::l4::{Books, L4Error, RestingOrder};
use crate::coin::is_perp;
use crate::event::{
    self, BookDiffEvent, OrderStatusEvent, RawBookDiff, Side, decode_book_diff,
    decode_book_diff_at, decode_order_status, decode_order_status_at, plain_string,
};
use crate::num::{Px, Sz};
use crate::snapshot::{self, L4Snapshot, SnapshotError};
use crate::text::{Address, Short};

/// Per-coin counts of diffs the book could not apply as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnknownIds {
    /// `update`/`remove` for an oid the book did not hold.
    pub unknown_oid: u64,
    /// `new` without an opening status in the same block.
    pub missing_status: u64,
}

impl UnknownIds {
    /// Both counts together.
    pub fn total(&self) -> u64 {
        self.unknown_oid + self.missing_status
    }
}

/// Blocks were skipped between the folded height and this block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The block that was expected next.
    pub expected: u64,
    /// The block that came instead.
    pub got: u64,
}

/// A coin whose folded book was replaced from a node snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoinReset {
    /// Market.
    pub coin: String,
    /// Snapshot height the book was replaced at.
    pub height: u64,
    /// The first difference found.
    pub detail: String,
}

/// What one [`Engine::apply`] did besides folding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockReport {
    /// Block number.
    pub block: u64,
    /// The block was at or below the folded height and was skipped.
    pub skipped: bool,
    /// Blocks missing before this one.
    pub gap: Option<Gap>,
    /// Events seen (statuses, diffs, fills).
    pub events: usize,
    /// Diffs that could not be applied as written.
    pub issues: Vec<L4Error>,
    /// Lines or events that did not decode.
    pub decode_errors: Vec<BlockDecodeError>,
    /// Coins replaced from a snapshot, surfaced with this block.
    pub resets: Vec<CoinReset>,
}

/// Kind of a typed L4 order change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderChangeKind {
    /// The order now rests.
    New,
    /// Its size changed.
    Update,
    /// It left the book.
    Remove,
}

/// One applied raw book diff, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderChange {
    /// What happened.
    pub kind: OrderChangeKind,
    /// Market.
    pub coin: Short,
    /// Order id.
    pub oid: u64,
    /// Owner.
    pub user: Address,
    /// Side.
    pub side: Side,
    /// Price.
    pub px: Px,
    /// Size after the change (`0.0` on remove).
    pub sz: Sz,
}

/// One coin's raw events of a block, exact bytes in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawCoinEvents {
    /// Order status events.
    pub order_statuses: Vec<Bytes>,
    /// Raw book diff events.
    pub book_diffs: Vec<Bytes>,
}

/// What a block changed, handed to every view's `update`.
#[derive(Debug, Clone, Default)]
pub struct BlockChanges {
    /// Block number.
    pub number: u64,
    /// Block time, Unix ms.
    pub time_ms: i64,
    /// Coins whose book was mutated or reset, sorted, each once.
    pub touched: Vec<Short>,
    /// Where each of `touched` sits among the engine's books (the views
    /// read the books by position, not by name).
    pub(crate) touched_at: Vec<usize>,
    /// Applied diffs, typed, in file order.
    pub order_changes: Vec<OrderChange>,
    /// Raw events of the coins asked for ([`FoldWants::raw_coins`]).
    pub raw: BTreeMap<String, RawCoinEvents>,
    /// Raw order statuses of the users asked for
    /// ([`FoldWants::raw_users`]) with their user, exact bytes in file
    /// order.
    pub raw_users: Vec<(String, Bytes)>,
    /// Coins reset from a snapshot.
    pub resets: BTreeSet<String>,
}

impl BlockChanges {
    /// Whether `coin`'s book was mutated or reset in this block.
    pub fn touched(&self, coin: &str) -> bool {
        self.touched
            .binary_search_by(|held| held.as_str().cmp(coin))
            .is_ok()
    }
}

/// What [`Engine::apply_with`] folds, beyond the books' position.
pub struct FoldWants<'w> {
    /// Apply the block's raw book diffs to the books. Off, the books stay as
    /// they are (their height still moves) and only the trigger watch runs.
    pub books: bool,
    /// Coins whose raw events are filed per coin in
    /// [`BlockChanges::raw`] (ignored when `books` is off).
    pub raw_coins: &'w BTreeSet<String>,
    /// Users (lowercase addresses) whose order statuses are filed per user
    /// in [`BlockChanges::raw_users`] (ignored when `books` is off).
    pub raw_users: &'w BTreeSet<String>,
    /// The TP/SL tracker's watch, answering whether an order id is a
    /// tracked trigger order: with it, [`Folded::trigger_statuses`] holds
    /// every status the tracker acts on.
    pub triggers: Option<&'w dyn Fn(u64) -> bool>,
    /// A list to fill with the block's typed order changes (emptied first;
    /// its memory is reused: a block has hundreds of changes).
    pub order_changes: Vec<OrderChange>,
}

impl std::fmt::Debug for FoldWants<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoldWants")
            .field("books", &self.books)
            .field("raw_coins", &self.raw_coins)
            .field("raw_users", &self.raw_users)
            .field("triggers", &self.triggers.is_some())
            .finish_non_exhaustive()
    }
}

/// What a folded block hands back besides its report.
#[derive(Debug)]
pub struct Folded<'a> {
    /// What the block changed in the books.
    pub changes: BlockChanges,
    /// With a trigger watch, in file order: every status opening a trigger
    /// order of a perp, and every status of a perp order the watch tracks
    /// (or that opened earlier in the block), decoded from the block's
    /// bytes.
    pub trigger_statuses: Vec<OrderStatusEvent<'a>>,
}

impl<'a> Folded<'a> {
    fn new(changes: BlockChanges, tap: Option<TriggerTap<'a, '_>>) -> Self {
        Self {
            changes,
            trigger_statuses: tap.map(|tap| tap.statuses).unwrap_or_default(),
        }
    }
}

impl std::fmt::Debug for Begun<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Begun")
            .field("block", &self.block.number)
            .field("first", &self.first.touched)
            .field("diffs", &self.diffs.len())
            .finish_non_exhaustive()
    }
}

/// The statuses the TP/SL tracker acts on, collected during the status scan.
struct TriggerTap<'a, 'w> {
    tracked: &'w dyn Fn(u64) -> bool,
    /// Trigger orders opened earlier in this block (not tracked yet).
    opened: Vec<u64>,
    statuses: Vec<OrderStatusEvent<'a>>,
}

impl<'a, 'w> TriggerTap<'a, 'w> {
    fn new(tracked: &'w dyn Fn(u64) -> bool) -> Self {
        Self {
            tracked,
            opened: Vec::new(),
            statuses: Vec::new(),
        }
    }

    /// Whether statuses of `oid` are wanted.
    fn wants(&self, oid: u64) -> bool {
        (self.tracked)(oid) || self.opened.contains(&oid)
    }

    /// Keeps `event` when the tracker acts on it.
    fn offer(&mut self, event: &OrderStatusEvent<'a>) {
        let order = &event.order;
        if !is_perp(order.coin) {
            return;
        }
        if event.status == "open" && order.is_trigger {
            self.opened.push(order.oid);
        } else if !self.wants(order.oid) {
            return;
        }
        self.statuses.push(event.clone());
    }

    /// Where the tap stands, to take back what a line added.
    fn mark(&self) -> (usize, usize) {
        (self.opened.len(), self.statuses.len())
    }

    fn rewind(&mut self, (opened, statuses): (usize, usize)) {
        self.opened.truncate(opened);
        self.statuses.truncate(statuses);
    }
}

/// The book fold: books, fold position, counters.
#[derive(Debug, Default)]
pub struct Engine {
    books: Books,
    height: Option<u64>,
    time_ms: i64,
    unknown: BTreeMap<String, UnknownIds>,
    pending_resets: Vec<CoinReset>,
    blocks: u64,
    events: u64,
    /// The openings table, empty between blocks; kept so that its memory is
    /// reused (see [`Openings::recycle`]).
    openings: Openings<'static>,
    /// The decoded-diffs list, empty between blocks, kept likewise (see
    /// [`emptied`]).
    diffs: Vec<Pending<'static>>,
    /// The coins whose books are kept (`None`: every coin).
    book_coins: Option<BTreeSet<String>>,
}

/// What an [`Engine`] carries from block to block, to rebuild one from a
/// checkpoint (the per-block scratch tables start empty).
#[derive(Debug, Default)]
pub(crate) struct EngineParts {
    pub(crate) books: Books,
    pub(crate) height: Option<u64>,
    pub(crate) time_ms: i64,
    pub(crate) unknown: BTreeMap<String, UnknownIds>,
    pub(crate) pending_resets: Vec<CoinReset>,
    pub(crate) blocks: u64,
    pub(crate) events: u64,
    pub(crate) book_coins: Option<BTreeSet<String>>,
}

/// How many diffs ahead of the one being applied the fold asks for book
/// memory: the index line of the diff this far ahead, the order and link
/// of the one half as far (whose index line has arrived by then), and the
/// level and neighbours' links of the one a quarter as far (named by the
/// link that has arrived by then). For a `new` diff: the price index line
/// of the one half as far, and the level and its last order's link of the
/// one a quarter as far. A deep book is far larger than the caches, and
/// each diff's lookups are trips to memory that would otherwise run one
/// after another.
const DIFF_LOOKAHEAD: usize = 8;

/// A decoded diff waiting to be applied, with its line and exact bytes (for
/// the views that want them raw).
#[derive(Debug)]
struct Pending<'a> {
    line: &'a Bytes,
    raw: &'a [u8],
    diff: BookDiffEvent<'a>,
    /// Its coin's [`Books::position`] before the block.
    book: Option<usize>,
    /// Its coin is folded first ([`Engine::begin`]).
    first: bool,
    /// What applying it did, when it was applied first.
    applied: Option<(OrderChangeKind, Sz)>,
}

/// A set of no coins or users, for what a fold without books files.
static NOBODY: BTreeSet<String> = BTreeSet::new();

/// A block [`Engine::begin`] started and [`Engine::finish`] completes.
pub struct Begun<'a, 'w> {
    block: &'a Block,
    report: BlockReport,
    changes: BlockChanges,
    /// The coins folded so far (the first coins, and coins reset from a
    /// snapshot), as the views' touched list: their books are final for the
    /// block.
    pub first: BlockChanges,
    tap: Option<TriggerTap<'a, 'w>>,
    books: bool,
    raw_coins: &'w BTreeSet<String>,
    raw_users: &'w BTreeSet<String>,
    diffs: Vec<Pending<'a>>,
}

/// `list` emptied, as a list of another item type — in practice the same
/// type borrowing something else, so that a list kept across blocks can hold
/// the next block's borrows. Collecting an emptied `Vec`'s own iterator into
/// a `Vec` of a same-sized type reuses its memory in place.
fn emptied<T, U>(mut list: Vec<T>) -> Vec<U> {
    list.clear();
    // `filter_map` to nothing, not `filter`: the item type changes.
    #[allow(clippy::unnecessary_filter_map)]
    list.into_iter().filter_map(|_| None).collect()
}

impl Engine {
    /// An engine with no books and no height: the first block is folded into
    /// empty books.
    pub fn new() -> Self {
        Self::default()
    }

    /// An engine starting from a node snapshot: blocks at or below its
    /// height are skipped.
    pub fn from_snapshot(snapshot: L4Snapshot) -> Self {
        Self {
            books: snapshot.books,
            height: Some(snapshot.height),
            ..Self::default()
        }
    }

    /// An engine as a checkpoint left it (see [`crate::checkpoint`]).
    pub(crate) fn restored(parts: EngineParts) -> Self {
        Self {
            books: parts.books,
            height: parts.height,
            time_ms: parts.time_ms,
            unknown: parts.unknown,
            pending_resets: parts.pending_resets,
            blocks: parts.blocks,
            events: parts.events,
            book_coins: parts.book_coins,
            ..Self::default()
        }
    }

    /// Resets found by [`Engine::check_snapshot`] that the next block
    /// surfaces.
    pub(crate) fn pending_resets(&self) -> &[CoinReset] {
        &self.pending_resets
    }

    /// The coins whose books are kept (`None`: every coin).
    pub(crate) fn book_coins(&self) -> Option<&BTreeSet<String>> {
        self.book_coins.as_ref()
    }

    /// Keeps the books of `coins` only, for a run that reads no other book
    /// (a one-coin replay): the other coins' diffs are counted and passed
    /// over, their opening statuses are not decoded (unless the trigger tap
    /// asks for them), and their books — if the start had any — are
    /// dropped. Start from a snapshot parsed for the same coins
    /// ([`crate::snapshot::parse_coins`]).
    #[must_use]
    pub fn keeping_books_of(mut self, coins: BTreeSet<String>) -> Self {
        let mut books = Books::new();
        for coin in &coins {
            if let Some(book) = self.books.get(coin) {
                books.replace(coin, book.clone());
            }
        }
        self.books = books;
        self.book_coins = Some(coins);
        self
    }

    /// The books.
    pub fn books(&self) -> &Books {
        &self.books
    }

    /// Every order `user` has resting, by coin (see [`Books::orders_of`]).
    pub fn orders_of(&mut self, user: &str) -> Vec<(Short, crate::book::l4::UserOrders)> {
        self.books.orders_of(user)
    }

    /// Height of the last folded block (or of the starting snapshot).
    pub fn height(&self) -> Option<u64> {
        self.height
    }

    /// Time of the last folded block, Unix ms (0 before the first block).
    pub fn time_ms(&self) -> i64 {
        self.time_ms
    }

    /// Unknown ids per coin since the start.
    pub fn unknown_ids(&self) -> &BTreeMap<String, UnknownIds> {
        &self.unknown
    }

    /// Blocks folded (not skipped).
    pub fn blocks_folded(&self) -> u64 {
        self.blocks
    }

    /// Events seen in folded blocks.
    pub fn events_seen(&self) -> u64 {
        self.events
    }

    /// Folds one block into the books, with no raw events filed and no
    /// trigger watch; the block's changes are dropped. Blocks at or below
    /// the current height are skipped; a jump past `height + 1` is reported
    /// as a [`Gap`] and folded anyway.
    pub fn apply(&mut self, block: &Block) -> BlockReport {
        let none = BTreeSet::new();
        let wants = FoldWants {
            books: true,
            raw_coins: &none,
            raw_users: &none,
            triggers: None,
            order_changes: Vec::new(),
        };
        self.apply_with(block, wants).0
    }

    /// Folds one block as `wants` says: into the books (unless
    /// [`FoldWants::books`] is off, when only the trigger watch runs and the
    /// books stay as they are), filing the raw events of the coins asked
    /// for and the statuses the trigger watch wants. Skips and gaps as
    /// [`Engine::apply`].
    pub fn apply_with<'a>(
        &mut self,
        block: &'a Block,
        wants: FoldWants<'_>,
    ) -> (BlockReport, Folded<'a>) {
        let begun = self.begin(block, wants, |_| false);
        self.finish(begun)
    }

    /// The first part of [`Engine::apply_with`]: the block's raw book diffs
    /// are decoded and those of the coins `first` names are applied — a
    /// `new` rests with what its diff says (price, side, size), its opening
    /// status's details (time, type, tif, cloid, …) are added by
    /// [`Engine::finish`] after the status scan. Those coins' books are then
    /// as the whole block leaves them, every price level final:
    /// [`Begun::first`] lists the ones touched, so the views of their levels
    /// can publish before the status scan and the other coins' diffs.
    pub fn begin<'a, 'w>(
        &mut self,
        block: &'a Block,
        wants: FoldWants<'w>,
        first: impl Fn(&str) -> bool,
    ) -> Begun<'a, 'w> {
        let mut begun = Begun {
            block,
            report: BlockReport {
                block: block.number,
                ..BlockReport::default()
            },
            changes: BlockChanges {
                number: block.number,
                time_ms: block.time_ms,
                order_changes: wants.order_changes,
                ..BlockChanges::default()
            },
            first: BlockChanges {
                number: block.number,
                time_ms: block.time_ms,
                ..BlockChanges::default()
            },
            tap: wants.triggers.map(TriggerTap::new),
            books: wants.books,
            raw_coins: if wants.books {
                wants.raw_coins
            } else {
                &NOBODY
            },
            raw_users: if wants.books {
                wants.raw_users
            } else {
                &NOBODY
            },
            diffs: emptied(std::mem::take(&mut self.diffs)),
        };
        begun.changes.order_changes.clear();
        if let Some(height) = self.height {
            if block.number <= height {
                begun.report.skipped = true;
                return begun;
            }
            if block.number > height + 1 {
                begun.report.gap = Some(Gap {
                    expected: height + 1,
                    got: block.number,
                });
            }
        }
        let epoch = self.blocks + 1;
        for reset in std::mem::take(&mut self.pending_resets) {
            // The book was replaced when the reset was found: it exists.
            *self.books.get_or_create_stamped(&reset.coin, None).1 = epoch;
            begun.changes.resets.insert(reset.coin.clone());
            begun.report.resets.push(reset);
        }
        let mut any_first = false;
        if begun.books {
            self.decode_diffs(block, &mut begun.diffs, &mut begun.report, first);
            for pending in &mut begun.diffs {
                if pending.first {
                    any_first = true;
                    pending.applied = self.change_book(&pending.diff, pending.book, None, block);
                }
            }
        }
        // Nothing stamped yet (the usual block with no subscription of
        // levels): no walk over the books for it.
        if any_first || !begun.changes.resets.is_empty() {
            begun.first.resets.clone_from(&begun.changes.resets);
            for (at, coin) in self.books.stamped(epoch) {
                begun.first.touched.push(Short::new(coin));
                begun.first.touched_at.push(at);
            }
        }
        begun
    }

    /// The rest of a block [`Engine::begin`] started: the status scan (raw
    /// statuses, openings, the trigger tap), the other coins' diffs, the
    /// details of the orders the first coins' `new` diffs rested; then the
    /// block's changes in file order, its report, and the fold position.
    pub fn finish<'a>(&mut self, begun: Begun<'a, '_>) -> (BlockReport, Folded<'a>) {
        let Begun {
            block,
            mut report,
            mut changes,
            mut tap,
            books,
            raw_coins,
            raw_users,
            diffs,
            ..
        } = begun;
        if report.skipped {
            self.diffs = emptied(diffs);
            return (report, Folded::new(changes, tap));
        }
        let epoch = self.blocks + 1;
        let mut openings: Openings<'_> = std::mem::take(&mut self.openings);
        let scan = StatusScan {
            raw_coins,
            raw_users,
            book_coins: self.book_coins.as_ref(),
            openings: books.then_some(&mut openings),
            tap: tap.as_mut(),
        };
        scan_statuses(block, scan, &mut changes, &mut report);
        if books {
            self.apply_diffs(
                block,
                &diffs,
                &openings,
                raw_coins,
                &mut changes,
                &mut report,
            );
        }
        self.diffs = emptied(diffs);
        self.openings = openings.recycle();
        // The coins whose stamp a reset or a diff set, in the books' (sorted)
        // order.
        for (at, coin) in self.books.stamped(epoch) {
            changes.touched.push(Short::new(coin));
            changes.touched_at.push(at);
        }
        for issue in &report.issues {
            let counts = self.unknown.entry(issue.coin().to_owned()).or_default();
            match issue {
                L4Error::UnknownOid { .. } => counts.unknown_oid += 1,
                L4Error::MissingOpeningStatus { .. } => counts.missing_status += 1,
            }
        }
        self.height = Some(block.number);
        self.time_ms = block.time_ms;
        self.blocks += 1;
        self.events += report.events as u64;
        (report, Folded::new(changes, tap))
    }

    /// Decodes every raw book diff of the block into `diffs`, in file order,
    /// each with its coin's book position and whether `first` names its
    /// coin.
    fn decode_diffs<'a>(
        &self,
        block: &'a Block,
        diffs: &mut Vec<Pending<'a>>,
        report: &mut BlockReport,
        first: impl Fn(&str) -> bool,
    ) {
        let book_coins = self.book_coins.as_ref();
        let keeps = |coin: &str| book_coins.is_none_or(|coins| coins.contains(coin));
        for line in &block.lines.raw_book_diffs {
            let fast = |rest| decode_book_diff_at(rest);
            for_each_event(line, block.number, report, fast, |raw, decoded, report| {
                report.events += 1;
                match decoded.map_or_else(|| decode_book_diff(raw), Ok) {
                    Ok(diff) if !keeps(diff.coin) => {}
                    Ok(diff) => diffs.push(Pending {
                        line,
                        raw,
                        diff,
                        book: None,
                        first: false,
                        applied: None,
                    }),
                    Err(error) => report.decode_errors.push(BlockDecodeError::Event {
                        block: block.number,
                        error,
                    }),
                }
            });
        }
        // Each diff's book, looked up once (diffs of a coin come in runs).
        let mut last: Option<(&str, Option<usize>, bool)> = None;
        for pending in diffs.iter_mut() {
            let coin = pending.diff.coin;
            let (book, is_first) = match last {
                Some((held, book, is_first)) if held == coin => (book, is_first),
                _ => (self.books.position(coin), first(coin)),
            };
            pending.book = book;
            pending.first = is_first;
            last = Some((coin, book, is_first));
        }
    }

    /// Applies the block's diffs (those [`Engine::begin`] applied already
    /// only completed with their opening statuses), in file order, recording
    /// each change or the reason it could not be applied.
    fn apply_diffs(
        &mut self,
        block: &Block,
        diffs: &[Pending<'_>],
        openings: &Openings<'_>,
        raw_coins: &BTreeSet<String>,
        changes: &mut BlockChanges,
        report: &mut BlockReport,
    ) {
        // The block's diffs were decoded first and are applied now, so that
        // while one is applied, the book memory of those a few places ahead
        // is already on its way (see `DIFF_LOOKAHEAD`).
        for (at, pending) in diffs.iter().enumerate() {
            if let Some(ahead) = diffs.get(at + DIFF_LOOKAHEAD) {
                self.books.prefetch_index(ahead.book, ahead.diff.oid);
            }
            if let Some(near) = diffs.get(at + DIFF_LOOKAHEAD / 2) {
                let diff = &near.diff;
                if matches!(diff.raw_book_diff, RawBookDiff::New { .. }) {
                    self.books.prefetch_price(near.book, diff.side, diff.px);
                } else {
                    self.books.prefetch_order(near.book, diff.oid);
                }
            }
            if let Some(next) = diffs.get(at + DIFF_LOOKAHEAD / 4) {
                let diff = &next.diff;
                if matches!(diff.raw_book_diff, RawBookDiff::New { .. }) {
                    self.books.prefetch_level(next.book, diff.side, diff.px);
                } else {
                    self.books.prefetch_neighbours(next.book, diff.oid);
                }
            }
            let diff = &pending.diff;
            if raw_coins.contains(diff.coin) {
                changes
                    .raw
                    .entry(diff.coin.to_owned())
                    .or_default()
                    .book_diffs
                    .push(pending.line.slice_ref(pending.raw));
            }
            let opening = match diff.raw_book_diff {
                RawBookDiff::New { sz } => {
                    let opening = openings.get(diff.oid);
                    if opening.is_none() {
                        report.issues.push(L4Error::MissingOpeningStatus {
                            coin: diff.coin.to_owned(),
                            oid: diff.oid,
                            block: block.number,
                        });
                    }
                    opening.map(|status| (status, sz))
                }
                _ => None,
            };
            let applied = if pending.first {
                if let Some((status, sz)) = opening {
                    let order =
                        RestingOrder::from_opening(diff.user, status, diff.px, sz, block.time_ms);
                    if let Some((book, _)) = self.books.get_mut_stamped(diff.coin, pending.book) {
                        book.complete(order);
                    }
                }
                pending.applied
            } else {
                self.change_book(diff, pending.book, opening.map(|(status, _)| status), block)
            };
            let Some((kind, sz)) = applied else {
                report.issues.push(L4Error::UnknownOid {
                    coin: diff.coin.to_owned(),
                    oid: diff.oid,
                    block: block.number,
                });
                continue;
            };
            changes.order_changes.push(OrderChange {
                kind,
                coin: diff.coin.into(),
                oid: diff.oid,
                user: diff.user.into(),
                side: diff.side,
                px: diff.px,
                sz,
            });
        }
    }

    /// Applies one diff to its coin's book and stamps the book with the
    /// block's count (from 1), which lists the coin as touched: a `new`
    /// rests with the details of `opening`, or with what the diff alone
    /// says. The change's kind and size after it, or `None` when the book
    /// does not hold the order an `update` or `remove` names.
    fn change_book(
        &mut self,
        diff: &BookDiffEvent<'_>,
        position: Option<usize>,
        opening: Option<&OrderStatusEvent<'_>>,
        block: &Block,
    ) -> Option<(OrderChangeKind, Sz)> {
        let epoch = self.blocks + 1;
        let (kind, sz, stamp) = match diff.raw_book_diff {
            RawBookDiff::New { sz } => {
                let order = match opening {
                    Some(status) => {
                        RestingOrder::from_opening(diff.user, status, diff.px, sz, block.time_ms)
                    }
                    None => RestingOrder::bare(
                        diff.user,
                        diff.oid,
                        diff.side,
                        diff.px,
                        sz,
                        block.time_ms,
                    ),
                };
                let (book, stamp) = self.books.get_or_create_stamped(diff.coin, position);
                book.insert(order);
                (OrderChangeKind::New, sz, stamp)
            }
            RawBookDiff::Update { new_sz, .. } => {
                let (book, stamp) = self.books.get_mut_stamped(diff.coin, position)?;
                book.set_sz(diff.oid, new_sz)?;
                (OrderChangeKind::Update, new_sz, stamp)
            }
            RawBookDiff::Remove => {
                let (book, stamp) = self.books.get_mut_stamped(diff.coin, position)?;
                if !book.discard(diff.oid) {
                    return None;
                }
                (OrderChangeKind::Remove, Sz::ZERO, stamp)
            }
        };
        *stamp = epoch;
        Some((kind, sz))
    }

    /// Compares the folded state with a newer node snapshot at the same
    /// height, coin by coin. Each diverged coin's book is replaced from the
    /// snapshot; the resets are returned now and surface again, with fresh
    /// snapshots for that coin's subscribers, in the next block's report.
    ///
    /// # Errors
    /// [`SnapshotError::HeightMismatch`] when the snapshot is not at the
    /// folded height.
    pub fn check_snapshot(
        &mut self,
        snapshot: &L4Snapshot,
    ) -> Result<Vec<CoinReset>, SnapshotError> {
        if self.height != Some(snapshot.height) {
            return Err(SnapshotError::HeightMismatch {
                snapshot: snapshot.height,
                folded: self.height,
            });
        }
        let diverged = snapshot::compare(&self.books, &snapshot.books);
        let mut resets = Vec::with_capacity(diverged.len());
        for divergence in diverged {
            let book = snapshot
                .books
                .get(&divergence.coin)
                .cloned()
                .unwrap_or_default();
            self.books.replace(&divergence.coin, book);
            resets.push(CoinReset {
                coin: divergence.coin,
                height: snapshot.height,
                detail: divergence.detail,
            });
        }
        self.pending_resets.extend(resets.iter().cloned());
        Ok(resets)
    }
}

/// A block's opening statuses by oid (a later one for the same oid replaces
/// the earlier). The engine keeps one between blocks, emptied: the table and
/// the list are allocated once, not per block.
#[derive(Debug, Default)]
struct Openings<'a> {
    index: HashMap<u64, usize, foldhash::fast::RandomState>,
    events: Vec<OrderStatusEvent<'a>>,
}

impl<'a> Openings<'a> {
    fn insert(&mut self, event: OrderStatusEvent<'a>) {
        match self.index.entry(event.order.oid) {
            Entry::Occupied(held) => {
                if let Some(slot) = self.events.get_mut(*held.get()) {
                    *slot = event;
                }
            }
            Entry::Vacant(vacant) => {
                vacant.insert(self.events.len());
                self.events.push(event);
            }
        }
    }

    fn get(&self, oid: u64) -> Option<&OrderStatusEvent<'a>> {
        self.events.get(*self.index.get(&oid)?)
    }

    /// Empties the table for the next block, whose statuses borrow other
    /// lines; both allocations carry over (see [`emptied`]).
    fn recycle(mut self) -> Openings<'static> {
        self.index.clear();
        Openings {
            index: self.index,
            events: emptied(self.events),
        }
    }
}

/// What one block's status scan serves besides counting: the raw events of
/// some coins, the book's openings (absent when the books are not folded),
/// the trigger tap (absent without a trigger watch).
struct StatusScan<'s, 'a, 'w> {
    raw_coins: &'s BTreeSet<String>,
    raw_users: &'s BTreeSet<String>,
    /// The coins whose books are kept (`None`: all): openings of others are
    /// not wanted.
    book_coins: Option<&'s BTreeSet<String>>,
    openings: Option<&'s mut Openings<'a>>,
    tap: Option<&'s mut TriggerTap<'a, 'w>>,
}

impl<'a> StatusScan<'_, 'a, '_> {
    /// Hands a decoded status to the openings and the tap.
    fn take(&mut self, event: OrderStatusEvent<'a>) {
        if let Some(tap) = self.tap.as_deref_mut() {
            tap.offer(&event);
        }
        if event.opens_resting_order()
            && self.keeps(event.order.coin.as_bytes())
            && let Some(openings) = self.openings.as_deref_mut()
        {
            openings.insert(event);
        }
    }

    /// Whether an opening of `coin` is wanted by the books.
    fn keeps(&self, coin: &[u8]) -> bool {
        self.book_coins
            .is_none_or(|coins| std::str::from_utf8(coin).is_ok_and(|coin| coins.contains(coin)))
    }

    /// Whether an opening whose order's coin is `coin` (`None`: not read
    /// from the bytes) can be passed over undecoded: its book is not kept
    /// and no trigger tap looks at openings.
    fn passes_over(&self, coin: Option<&[u8]>) -> bool {
        self.tap.is_none() && coin.is_some_and(|coin| !self.keeps(coin))
    }

    /// Whether a status that opens nothing must be decoded: the tap
    /// watches its order.
    fn wants(&self, oid: Option<u64>) -> bool {
        self.tap
            .as_deref()
            .is_some_and(|tap| oid.is_some_and(|oid| tap.wants(oid)))
    }
}

/// Walks every status: counts it, files its bytes for coins a view wants raw,
/// and fully decodes only the statuses that can open a resting order (into
/// the openings) or that the trigger tap wants.
fn scan_statuses<'a>(
    block: &'a Block,
    mut scan: StatusScan<'_, 'a, '_>,
    changes: &mut BlockChanges,
    report: &mut BlockReport,
) {
    let raw_wanted = !scan.raw_coins.is_empty() || !scan.raw_users.is_empty();
    if scan.openings.is_none() && scan.tap.is_none() && !raw_wanted {
        report.events += count_events(&block.lines.order_statuses, block.number, report);
        return;
    }
    for line in &block.lines.order_statuses {
        if !raw_wanted && let Some(events) = scan_openings(line, &mut scan) {
            report.events += events;
            continue;
        }
        for_each_span(line, block.number, report, |raw, report| {
            report.events += 1;
            if !scan.raw_users.is_empty()
                && let Some(user) = status_user(raw)
            {
                // The node writes addresses lowercase; matched as such.
                let user = if user.bytes().any(|b| b.is_ascii_uppercase()) {
                    std::borrow::Cow::Owned(user.to_ascii_lowercase())
                } else {
                    std::borrow::Cow::Borrowed(user)
                };
                if scan.raw_users.contains(user.as_ref()) {
                    changes
                        .raw_users
                        .push((user.into_owned(), line.slice_ref(raw)));
                }
            }
            let scanned = scan_status(raw);
            if let Some((_, coin)) = scanned
                && scan.raw_coins.contains(coin)
            {
                changes
                    .raw
                    .entry(coin.to_owned())
                    .or_default()
                    .order_statuses
                    .push(line.slice_ref(raw));
            }
            if let Some((status, coin)) = scanned
                && (status == b"open" || status == b"triggered")
                && scan.passes_over(Some(coin.as_bytes()))
            {
                return;
            }
            if let Some((status, _)) = scanned
                && status != b"open"
                && status != b"triggered"
                && (scan.tap.is_none()
                    || status == NEVER_A_TRIGGER
                    || status_oid(raw).is_some_and(|oid| !scan.wants(Some(oid))))
            {
                return;
            }
            match decode_order_status(raw) {
                Ok(event) => {
                    if scanned.is_none() && scan.raw_coins.contains(event.order.coin) {
                        changes
                            .raw
                            .entry(event.order.coin.to_owned())
                            .or_default()
                            .order_statuses
                            .push(line.slice_ref(raw));
                    }
                    scan.take(event);
                }
                Err(error) => report.decode_errors.push(BlockDecodeError::Event {
                    block: block.number,
                    error,
                }),
            }
        });
    }
}

/// The fast walk of one status line when no view wants raw statuses: the
/// events are counted by their `"status":"` keys and only the openings
/// (`open`, `triggered`) and the statuses the trigger tap watches are
/// delimited and decoded, so the rejections that make up most of the bytes
/// are passed over at `memmem` speed instead of being walked bracket by
/// bracket (with a tap, each one's order id is read where it stands).
///
/// It leans on the node's layout, checked as it goes: each event is an object
/// whose first key is `"time"` and which holds one `"status"` key (order
/// objects have none), followed by its order with its `"oid"`. A key
/// sequence can only occur outside strings in valid JSON, so every status key
/// is seen. A status value is compared with `open"` and `triggered"` where it
/// starts; any other value (a rejection) is passed over unread. Anything
/// unexpected — a backslash where an escape could spell an opening, no
/// `{"time":` between a decoded status and the previous event's status, no
/// order id after a status the tap asks about, a status that does not decode
/// or does not span its own status key — answers `None` before anything is
/// counted or reported, and the caller walks the line exactly instead (which
/// reports what is wrong). Openings inserted before such a line is abandoned
/// are inserted again, identically, by the exact walk; what the tap took from
/// the line is taken back first.
fn scan_openings<'a>(line: &'a Bytes, scan: &mut StatusScan<'_, 'a, '_>) -> Option<usize> {
    let mark = scan.tap.as_deref().map(TriggerTap::mark);
    let counted = scan_line(line, scan);
    if counted.is_none()
        && let (Some(tap), Some(mark)) = (scan.tap.as_deref_mut(), mark)
    {
        tap.rewind(mark);
    }
    counted
}

fn scan_line<'a>(line: &'a Bytes, scan: &mut StatusScan<'_, 'a, '_>) -> Option<usize> {
    let line: &'a [u8] = line;
    let env = envelope::decode(line).ok()?;
    let body = env.events.start + 1..env.events.end - 1;
    let mut events = 0;
    // Where the previous event's status value starts: the next event starts
    // after it.
    let mut floor = body.start;
    for hit in STATUS_KEY.find_iter(&line[body.clone()]) {
        let key = body.start + hit;
        let value_at = key + STATUS_KEY.needle().len();
        events += 1;
        // Only an opening's value is read through; a rejection's is passed
        // over by the next key search. A value could spell `open` with
        // escapes only by having a backslash among its first nine bytes
        // (`triggered` is nine letters): such a line is walked exactly.
        let value = &line[value_at..body.end];
        if backslash_in_first_nine(value) {
            return None;
        }
        let opening = (value.starts_with(b"open\"") || value.starts_with(b"triggered\""))
            && !scan.passes_over(order_coin(value));
        let tapped = || -> Option<bool> {
            Some(
                scan.tap.is_some()
                    && !never_a_trigger(value)
                    && scan.wants(Some(order_oid(value)?)),
            )
        };
        if opening || tapped()? {
            let start = floor + EVENT_START.find(&line[floor..key])?;
            let rest = &line[start..body.end];
            let (event, len) = if let Some(decoded) = decode_order_status_at(rest) {
                decoded
            } else {
                let end = envelope::skip_value(rest, 0).ok()?;
                (decode_order_status(&rest[..end]).ok()?, end)
            };
            if start + len <= key {
                return None;
            }
            scan.take(event);
        }
        floor = value_at;
    }
    Some(events)
}

/// Whether one of the first nine bytes of `value` is a backslash: a word
/// test on the first eight (a `memchr` call costs more than the test).
fn backslash_in_first_nine(value: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let mut head = [0u8; 9];
    let len = value.len().min(9);
    head[..len].copy_from_slice(&value[..len]);
    let (first, ninth) = head.split_at(8);
    let first = first.try_into().map_or(0, u64::from_le_bytes);
    let word = first ^ (ONES * u64::from(b'\\'));
    // A byte of `word` is zero exactly where `value` has a backslash.
    word.wrapping_sub(ONES) & !word & (ONES << 7) != 0 || ninth == [b'\\']
}

/// The `status` value and the order's `coin` read straight from the bytes,
/// or `None` when either is not a plain string (then the event is decoded).
/// The first `"status":"` is the event's own key (order objects have none),
/// and the first `"coin":"` belongs to the order (its children share it).
fn scan_status(raw: &[u8]) -> Option<(&[u8], &str)> {
    let status = string_after(raw, &STATUS_KEY)?;
    let coin = string_after(raw, &COIN_KEY)?;
    Some((status, std::str::from_utf8(coin).ok()?))
}

/// The owner of a status where the node writes it, near the start of the
/// event (`{"time":"…","user":"0x…",`), if it is a plain lowercase-able
/// string there.
fn status_user(raw: &[u8]) -> Option<&str> {
    let head = &raw[..raw.len().min(96)];
    std::str::from_utf8(string_after(head, &USER_KEY)?).ok()
}

/// The status most of a block's bytes are (an add-liquidity-only order whose
/// price would have crossed). It is never about a trigger order — trigger
/// orders carry no time in force, and only ALO orders are refused for their
/// price — so the trigger tap passes it over without reading its order id.
const NEVER_A_TRIGGER: &[u8] = b"badAloPxRejected";

/// Whether the status value that starts `value` (after its opening quote)
/// is [`NEVER_A_TRIGGER`].
fn never_a_trigger(value: &[u8]) -> bool {
    value
        .get(..NEVER_A_TRIGGER.len() + 1)
        .is_some_and(|head| head.starts_with(NEVER_A_TRIGGER) && head.ends_with(b"\""))
}

/// The order id of a status read where the node writes it: `value` starts
/// with the status value (after its opening quote), which the order object
/// follows (`","order":{…"oid":N`). `None` when the bytes are laid out any
/// other way (an escape in the status, another key after it).
fn order_oid(value: &[u8]) -> Option<u64> {
    let len = plain_string(value)?.len();
    let order = value.get(len + 1..)?.strip_prefix(b",\"order\":{")?;
    let at = OID_KEY.find(order)? + OID_KEY.needle().len();
    event::leading_unsigned(&order[at..]).map(|(oid, _)| oid)
}

/// The order's coin of a status read where the node writes it (see
/// [`order_oid`]: `","order":{"coin":"…"`), or `None` when the bytes are
/// laid out any other way.
fn order_coin(value: &[u8]) -> Option<&[u8]> {
    let len = plain_string(value)?.len();
    let order = value
        .get(len + 1..)?
        .strip_prefix(b",\"order\":{\"coin\":\"")?;
    plain_string(order)
}

/// The order id of one status event's bytes, read as [`order_oid`] does.
fn status_oid(raw: &[u8]) -> Option<u64> {
    let at = STATUS_KEY.find(raw)? + STATUS_KEY.needle().len();
    order_oid(&raw[at..])
}

/// Searchers for the keys [`scan_status`] and [`scan_openings`] look for,
/// built once: building a searcher costs more than running it over one
/// status.
static STATUS_KEY: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
    memmem::FinderBuilder::new().build_forward_with_ranker(NodeJsonRank, b"\"status\":\"")
});
static EVENT_START: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
    memmem::FinderBuilder::new().build_forward_with_ranker(NodeJsonRank, b"{\"time\":")
});
static COIN_KEY: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"coin\":\""));
static USER_KEY: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"user\":\""));
static OID_KEY: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"oid\":"));

/// Byte frequencies of node lines for `memmem`'s candidate filter, which
/// looks for the needle's two rarest bytes first. Its default ranking (from
/// text and source code) counts quotes and colons as rare; in node JSON they
/// are the commonest bytes, and hex digits fill addresses, hashes and
/// numbers. Ranking them as frequent makes the filter pick the needle's
/// letters, so it stops at a handful of places per event instead of at every
/// key.
#[derive(Debug, Clone, Copy)]
struct NodeJsonRank;

impl HeuristicFrequencyRank for NodeJsonRank {
    fn rank(&self, byte: u8) -> u8 {
        match byte {
            b'"' | b':' | b',' => 255,
            b'0'..=b'9' | b'a'..=b'f' => 250,
            b'{' | b'}' | b'.' | b'x' => 245,
            b'g'..=b'z' => 150,
            b'A'..=b'Z' => 100,
            _ => 50,
        }
    }
}

fn string_after<'a>(raw: &'a [u8], key: &memmem::Finder<'_>) -> Option<&'a [u8]> {
    let start = key.find(raw)? + key.needle().len();
    plain_string(&raw[start..])
}

fn for_each_span<'a>(
    line: &'a Bytes,
    block: u64,
    report: &mut BlockReport,
    mut visit: impl FnMut(&'a [u8], &mut BlockReport),
) {
    for_each_event(
        line,
        block,
        report,
        |_| None::<((), usize)>,
        |raw, _, report| visit(raw, report),
    );
}

/// Visits each event of a line with its exact bytes. `fast` is tried at
/// each event's start first — a decoder of the node's compact layout that
/// says how many bytes it read — so an event it decodes is delimited by that
/// decode and handed over decoded (`Some`); any other event is delimited by
/// the bracket walk and handed over undecoded (`None`). Envelope errors are
/// reported and end the line.
fn for_each_event<'a, T>(
    line: &'a Bytes,
    block: u64,
    report: &mut BlockReport,
    fast: impl Fn(&'a [u8]) -> Option<(T, usize)>,
    mut visit: impl FnMut(&'a [u8], Option<T>, &mut BlockReport),
) {
    let line_bytes: &'a [u8] = line;
    let env = match envelope::decode(line_bytes) {
        Ok(env) => env,
        Err(error) => {
            report
                .decode_errors
                .push(BlockDecodeError::Envelope { block, error });
            return;
        }
    };
    let mut spans = env.events();
    loop {
        let mut decoded = None;
        let next = spans.next_measured(|rest| {
            let (event, len) = fast(rest)?;
            decoded = Some(event);
            Some(len)
        });
        match next {
            None => return,
            Some(Ok(span)) => visit(&line_bytes[span], decoded, report),
            Some(Err(error)) => {
                report
                    .decode_errors
                    .push(BlockDecodeError::Envelope { block, error });
                return;
            }
        }
    }
}

fn count_events(lines: &[Bytes], block: u64, report: &mut BlockReport) -> usize {
    let mut count = 0;
    for line in lines {
        for_each_span(line, block, report, |_, _| count += 1);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: &str = r#"{"time":"2026-04-30T20:46:43.304461819","user":"0xca1d","hash":"0x985e","builder":null,"status":"open","order":{"coin":"BTC","side":"B","limitPx":"76450.0","sz":"0.5","oid":7,"timestamp":1777582003304,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"0.5","tif":"Alo","cloid":null}}"#;
    const REJECTED: &str = r#"{"time":"2026-04-30T20:46:43.304461819","user":"0xee","hash":null,"builder":null,"status":"badAloPxRejected","order":{"coin":"ETH","side":"A","limitPx":"1.0","sz":"0.5","oid":8,"timestamp":1777582003304,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"0.5","tif":"Alo","cloid":null}}"#;

    fn status_line(events: &[&str]) -> Bytes {
        Bytes::from(format!(
            r#"{{"local_time":"2026-04-30T20:46:43.5","block_time":"2026-04-30T20:46:43.304461819","block_number":1,"events":[{}]}}"#,
            events.join(",")
        ))
    }

    fn fast_scan(events: &[&str]) -> Option<(usize, Vec<u64>)> {
        let line = status_line(events);
        let mut openings = Openings::default();
        let no_coins = BTreeSet::new();
        let mut scan = StatusScan {
            raw_coins: &no_coins,
            raw_users: &no_coins,
            book_coins: None,
            openings: Some(&mut openings),
            tap: None,
        };
        let count = scan_openings(&line, &mut scan)?;
        let mut oids: Vec<u64> = openings.index.keys().copied().collect();
        oids.sort_unstable();
        Some((count, oids))
    }

    /// The fast scan with a trigger tap tracking `tracked`: the count and
    /// the `(oid, status)` of the statuses tapped, or `None` when the line
    /// goes to the exact walk (the tap is then left as it was).
    fn tapped(events: &[&str], tracked: &[u64]) -> (Option<usize>, Vec<(u64, String)>) {
        let line = status_line(events);
        let no_coins = BTreeSet::new();
        let watch = |oid: u64| tracked.contains(&oid);
        let mut tap = TriggerTap::new(&watch);
        let mut scan = StatusScan {
            raw_coins: &no_coins,
            raw_users: &no_coins,
            book_coins: None,
            openings: None,
            tap: Some(&mut tap),
        };
        let count = scan_openings(&line, &mut scan);
        let statuses = tap
            .statuses
            .iter()
            .map(|s| (s.order.oid, s.status.to_owned()))
            .collect();
        (count, statuses)
    }

    fn trigger(oid: u64, status: &str) -> String {
        OPEN.replace(r#""oid":7"#, &format!(r#""oid":{oid}"#))
            .replace(r#""status":"open""#, &format!(r#""status":"{status}""#))
            .replace(r#""isTrigger":false"#, r#""isTrigger":true"#)
    }

    #[test]
    fn the_trigger_tap_takes_trigger_openings_and_statuses_of_watched_orders() {
        let placed = trigger(40, "open");
        let canceled = trigger(40, "canceled");
        let watched = trigger(41, "reduceOnlyCanceled");
        let unwatched = trigger(42, "canceled");
        let (count, statuses) = tapped(
            &[REJECTED, &placed, &unwatched, &canceled, &watched, OPEN],
            &[41],
        );
        assert_eq!(count, Some(6));
        assert_eq!(
            statuses,
            [
                (40, "open".to_owned()),
                (40, "canceled".to_owned()),
                (41, "reduceOnlyCanceled".to_owned()),
            ],
            "opened earlier in the block, or tracked; never the others"
        );
        // An ALO price rejection is never about a trigger order: passed
        // over unread, even for a watched oid.
        let alo = REJECTED.replace(r#""oid":8"#, r#""oid":41"#);
        assert_eq!(tapped(&[&alo], &[41]), (Some(1), Vec::new()));
        assert!(never_a_trigger(b"badAloPxRejected\",\"order\""));
        assert!(!never_a_trigger(b"badAloPxRejectedX\""));
        // A spot trigger is none of the tracker's business.
        let spot = placed.replace(r#""coin":"BTC""#, r#""coin":"@107""#);
        assert_eq!(tapped(&[&spot], &[]).1, []);
        // A line abandoned to the exact walk leaves the tap as it was.
        let escaped = REJECTED.replace("badAloPxRejected", r#"bad\"Rejected"#);
        assert_eq!(tapped(&[&placed, &escaped], &[]), (None, Vec::new()));
    }

    #[test]
    fn a_status_laid_out_otherwise_still_reaches_the_trigger_tap() {
        // Keys sorted (the order object before the status): the fast scan
        // cannot read the order id where the node writes it and gives the
        // line to the exact walk, which decodes the status and taps it.
        let value: serde_json::Value = serde_json::from_str(&trigger(41, "canceled")).unwrap();
        let sorted = serde_json::to_string(&value).unwrap();
        assert!(sorted.find("\"order\"") < sorted.find("\"status\""));
        let (count, _) = tapped(&[&sorted, REJECTED], &[41]);
        assert_eq!(count, None);
        let mut block = Block::new(1, 0);
        block
            .lines
            .order_statuses
            .push(status_line(&[&sorted, REJECTED]));
        let watch = |oid: u64| oid == 41;
        let mut tap = TriggerTap::new(&watch);
        let no_coins = BTreeSet::new();
        let scan = StatusScan {
            raw_coins: &no_coins,
            raw_users: &no_coins,
            book_coins: None,
            openings: None,
            tap: Some(&mut tap),
        };
        let mut report = BlockReport::default();
        scan_statuses(&block, scan, &mut BlockChanges::default(), &mut report);
        assert_eq!(report.events, 2);
        let oids: Vec<u64> = tap.statuses.iter().map(|s| s.order.oid).collect();
        assert_eq!(oids, [41]);
    }

    #[test]
    fn the_fast_status_scan_counts_every_event_and_decodes_only_openings() {
        assert_eq!(fast_scan(&[REJECTED, OPEN, REJECTED]), Some((3, vec![7])));
        assert_eq!(fast_scan(&[]), Some((0, vec![])));
        // An opening outside the compact layout is delimited by the bracket
        // walk and decoded generically.
        let children = OPEN.replace(r#""children":[]"#, r#""children":[{"coin":"BTC"}]"#);
        assert_eq!(fast_scan(&[REJECTED, &children]), Some((2, vec![7])));
        // A resting trigger (untriggered) is counted, not an opening.
        let trigger = OPEN.replace(r#""isTrigger":false"#, r#""isTrigger":true"#);
        assert_eq!(fast_scan(&[&trigger]), Some((1, vec![])));
    }

    /// Both status walks with the books of `kept` only: the events counted
    /// and the openings taken, by each.
    fn scoped_scans(events: &[&str], kept: &[&str]) -> [(usize, Vec<u64>); 2] {
        let line = status_line(events);
        let kept: BTreeSet<String> = kept.iter().map(|&c| c.to_owned()).collect();
        let no_coins = BTreeSet::new();
        let mut fast = Openings::default();
        let mut scan = StatusScan {
            raw_coins: &no_coins,
            raw_users: &no_coins,
            book_coins: Some(&kept),
            openings: Some(&mut fast),
            tap: None,
        };
        let counted = scan_openings(&line, &mut scan).unwrap();
        // The exact walk runs when raw statuses are filed.
        let raw = ["SOL".to_owned()].into();
        let nobody = BTreeSet::new();
        let mut exact = Openings::default();
        let scan = StatusScan {
            raw_coins: &raw,
            raw_users: &nobody,
            book_coins: Some(&kept),
            openings: Some(&mut exact),
            tap: None,
        };
        let mut block = Block::new(1, 0);
        block.lines.order_statuses.push(line.clone());
        let mut report = BlockReport::default();
        scan_statuses(&block, scan, &mut BlockChanges::default(), &mut report);
        let sorted = |openings: &Openings<'_>| {
            let mut oids: Vec<u64> = openings.index.keys().copied().collect();
            oids.sort_unstable();
            oids
        };
        [(counted, sorted(&fast)), (report.events, sorted(&exact))]
    }

    #[test]
    fn openings_of_books_not_kept_are_counted_and_passed_over() {
        let eth = OPEN
            .replace(r#""coin":"BTC""#, r#""coin":"ETH""#)
            .replace(r#""oid":7"#, r#""oid":9"#);
        let events = [OPEN, REJECTED, eth.as_str()];
        for walk in scoped_scans(&events, &["ETH"]) {
            assert_eq!(walk, (3, vec![9]));
        }
        for walk in scoped_scans(&events, &["BTC", "ETH"]) {
            assert_eq!(walk, (3, vec![7, 9]));
        }
        for walk in scoped_scans(&events, &[]) {
            assert_eq!(walk, (3, vec![]));
        }
    }

    #[test]
    fn the_fast_status_scan_gives_way_to_the_exact_walk_on_anything_unexpected() {
        // An escaped status value.
        let escaped = REJECTED.replace("badAloPxRejected", r#"bad\"Rejected"#);
        assert_eq!(fast_scan(&[OPEN, &escaped]), None);
        // An opening spelled with an escape (`open`).
        let spelled = OPEN.replace(r#""status":"open""#, r#""status":"op\u0065n""#);
        assert_ne!(spelled, OPEN);
        assert_eq!(fast_scan(&[REJECTED, &spelled]), None);
        // A rejection whose value has a backslash only past the ninth byte
        // cannot be an opening: it is counted and passed over.
        let late = REJECTED.replace("badAloPxRejected", r#"badAloPxRe\"jected"#);
        assert_eq!(fast_scan(&[OPEN, &late]), Some((2, vec![7])));
        // An opening whose event does not start with its time.
        let reordered = OPEN.replacen(
            r#"{"time":"2026-04-30T20:46:43.304461819","user":"0xca1d""#,
            r#"{"user":"0xca1d","time":"2026-04-30T20:46:43.304461819""#,
            1,
        );
        assert_eq!(fast_scan(&[&reordered]), None);
        // An opening that does not decode.
        let broken = OPEN.replace(r#""oid":7"#, r#""oid":"seven""#);
        assert_eq!(fast_scan(&[REJECTED, &broken]), None);
    }

    #[test]
    fn a_backslash_is_seen_in_each_of_the_first_nine_bytes_only() {
        for len in 0..12 {
            for at in 0..len {
                let mut value = vec![b'a'; len];
                value[at] = b'\\';
                assert_eq!(backslash_in_first_nine(&value), at < 9, "{len} {at}");
                // Neighbours of the backslash that borrow in the word test.
                value[at] = b'\\' + 1;
                assert!(!backslash_in_first_nine(&value), "{len} {at}");
            }
        }
        assert!(!backslash_in_first_nine(b""));
    }

    #[test]
    fn scan_reads_status_and_coin_without_decoding() {
        let raw = br#"{"time":"t","user":"0xa","hash":null,"builder":null,"status":"badAloPxRejected","order":{"coin":"xyz:NVDA","side":"B"}}"#;
        let (status, coin) = scan_status(raw).unwrap();
        assert_eq!(status, b"badAloPxRejected");
        assert_eq!(coin, "xyz:NVDA");
        assert_eq!(scan_status(br#"{"status":"op\"en"}"#), None);
    }
}
