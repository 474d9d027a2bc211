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
//!
//! What a folded block hands back is in `report`; the byte-level status scan
//! (and the trigger tap it feeds) in `statuses`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::block::{Block, BlockDecodeError};
use crate::book::l4::{Books, L4Error, RestingOrder};
use crate::event::{
    BookDiffEvent, OrderStatusEvent, RawBookDiff, decode_book_diff, decode_book_diff_at,
};
use crate::num::Sz;
use crate::snapshot::{self, L4Snapshot, SnapshotError};
use crate::text::Short;

mod report;
mod statuses;

pub use report::{
    BlockChanges, BlockReport, CoinReset, FoldWants, Folded, Gap, OrderChange, OrderChangeKind,
    RawCoinEvents, UnknownIds,
};
use statuses::{Openings, StatusScan, TriggerTap, emptied, for_each_event, scan_statuses};

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
    /// Where the first coins' diffs are in that list, kept likewise.
    firsts: Vec<usize>,
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

    /// Keeps the orders of `user` (see [`Books::hold_user`]); false when
    /// too many users are held.
    pub fn hold_user(&mut self, user: &str) -> bool {
        self.books.hold_user(user)
    }

    /// Takes back one [`Engine::hold_user`] (see [`Books::release_user`]).
    pub fn release_user(&mut self, user: &str) {
        self.books.release_user(user);
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
            // Only the first coins' diffs are applied here: their book
            // memory is asked for ahead the same way as in `apply_diffs`.
            let mut firsts = std::mem::take(&mut self.firsts);
            firsts.clear();
            firsts.extend((0..begun.diffs.len()).filter(|&at| begun.diffs[at].first));
            any_first = !firsts.is_empty();
            for (nth, &at) in firsts.iter().enumerate() {
                let diffs = &begun.diffs;
                self.prefetch_ahead(|k| firsts.get(nth + 1 + k).map(|&ahead| &diffs[ahead]));
                let pending = &begun.diffs[at];
                let applied = self.change_book(&pending.diff, pending.book, None, block);
                begun.diffs[at].applied = applied;
            }
            self.firsts = firsts;
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
            self.prefetch_ahead(|k| diffs.get(at + 1 + k));
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

    /// Asks for the book memory of the diffs to be applied next (`ahead(k)`:
    /// the one `k + 1` places on), each stage as far ahead as
    /// [`DIFF_LOOKAHEAD`] says.
    fn prefetch_ahead<'p, 'a: 'p>(&self, ahead: impl Fn(usize) -> Option<&'p Pending<'a>>) {
        if let Some(far) = ahead(DIFF_LOOKAHEAD - 1) {
            self.books.prefetch_index(far.book, far.diff.oid);
        }
        if let Some(near) = ahead(DIFF_LOOKAHEAD / 2 - 1) {
            let diff = &near.diff;
            if matches!(diff.raw_book_diff, RawBookDiff::New { .. }) {
                self.books.prefetch_price(near.book, diff.side, diff.px);
            } else {
                self.books.prefetch_order(near.book, diff.oid);
            }
        }
        if let Some(next) = ahead(DIFF_LOOKAHEAD / 4 - 1) {
            let diff = &next.diff;
            if matches!(diff.raw_book_diff, RawBookDiff::New { .. }) {
                self.books.prefetch_level(next.book, diff.side, diff.px);
            } else {
                self.books.prefetch_neighbours(next.book, diff.oid);
            }
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

#[cfg(test)]
mod tests {
    use super::statuses::{backslash_in_first_nine, never_a_trigger, scan_openings, scan_status};
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
