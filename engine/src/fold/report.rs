//! What a folded block hands back: its report, its changes, and what the
//! fold was asked for.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::block::BlockDecodeError;
use crate::book::l4::L4Error;
use crate::event::{OrderStatusEvent, Side};
use crate::num::{Px, Sz};
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
