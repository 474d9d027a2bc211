//! Views: what a subscriber sees of the market. Each view is one module
//! implementing [`View`]: how a subscription opens (its opening frames, the
//! state right after the last folded block), which frames a folded block
//! gives it, and the frame itself — shaped like the market-streaming message
//! (proto field names, prices and sizes as the node's exact strings, unset
//! optional fields omitted), so `l1gate replay` prints it as JSON and the
//! gRPC edge renders it as protobuf from the same value.
//!
//! Views read the [`Market`]; they hold no market state of their own beyond
//! what their subscription needs (coin filters, coalescing windows). A view
//! is found by name, and opened from a normalised request (its `Key`),
//! through the [`registry`], which is made from the one list of views,
//! [`for_each_view!`](crate::for_each_view). The edges' side of a view is
//! the server's (`server::views`).
//!
//! Frames carry no per-subscriber numbering: `sequence` and the L2 diffs'
//! `seq` / `prev_seq` are given by [`numbering`], per subscriber, in one
//! place for every consumer.

pub mod bbo;
pub mod candles;
pub mod coalesce;
pub mod fills;
pub mod l2book;
pub mod l2diff;
pub mod l4book;
pub mod l4updates;
pub mod mids;
pub mod numbering;
pub mod open_orders;
pub mod registry;
pub mod statuses;
pub mod tpsl;
pub mod trades;

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use thiserror::Error;

use crate::book::l2::L2Error;
use crate::market::candles::CandleError;
use crate::market::{Market, Needs};
use crate::table::{RowSink, Table};

/// A subscription request outside a view's contract. Not
/// `#[non_exhaustive]`: each edge maps every kind to its own status, and a
/// new kind must make their matches fail to compile, not fall into a
/// catch-all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    /// A required coin list is empty or too long (after deduplication).
    #[error("view: {view} needs 1 to 20 coins, got {count}")]
    CoinCount {
        /// The view.
        view: &'static str,
        /// Distinct coins asked for.
        count: usize,
    },
    /// A required coin is empty.
    #[error("view: {view} needs a coin")]
    MissingCoin {
        /// The view.
        view: &'static str,
    },
    /// Invalid L2 parameters.
    #[error("view: {0}")]
    L2(#[from] L2Error),
    /// User fills without a user.
    #[error("fills: user fills need a user")]
    MissingUser,
    /// Builder fills without a builder.
    #[error("fills: builder fills need a builder")]
    MissingBuilder,
    /// User fills asked for several users at once; a user-fills
    /// subscription follows exactly one account.
    #[error("fills: user fills follow one user, got {count}")]
    UserCount {
        /// Users given.
        count: usize,
    },
    /// A view that follows named accounts got none or too many.
    #[error("view: {view} follows 1 to 20 distinct accounts, got {count}")]
    AccountCount {
        /// The view.
        view: &'static str,
        /// Distinct accounts given.
        count: usize,
    },
    /// A candle request outside its contract.
    #[error("{0}")]
    Candle(#[from] CandleError),
    /// A TP/SL coin that is spot or an outcome market.
    #[error("tpsl: {coin} is not a perp coin")]
    NotPerp {
        /// The coin.
        coin: String,
    },
    /// The view is switched off on this server.
    #[error("view: {view} is disabled on this server")]
    Disabled {
        /// The view.
        view: &'static str,
    },
    /// The server follows as many accounts' open orders as it takes.
    #[error(
        "view: {view}: the open orders of {limit} accounts are followed already; try again when \
         fewer are"
    )]
    AccountsFollowed {
        /// The view.
        view: &'static str,
        /// Accounts followed at once at most.
        limit: usize,
    },
}

/// Maximum coins in a required coin list.
pub const MAX_REQUIRED_COINS: usize = 20;

/// Deduplicates a required coin list (1–20 entries).
///
/// # Errors
/// [`ViewError::CoinCount`] when it is empty or longer than 20.
pub fn required_coins(view: &'static str, coins: &[String]) -> Result<BTreeSet<String>, ViewError> {
    let set: BTreeSet<String> = coins.iter().cloned().collect();
    if set.is_empty() || set.len() > MAX_REQUIRED_COINS {
        return Err(ViewError::CoinCount {
            view,
            count: set.len(),
        });
    }
    Ok(set)
}

/// Coin filter of scope lists: empty = every coin.
pub(crate) fn in_scope(scope: &BTreeSet<String>, coin: &str) -> bool {
    scope.is_empty() || scope.contains(coin)
}

/// Addresses lowercased (they match case-insensitively), duplicates merged.
pub(crate) fn lowercased(users: &[String]) -> BTreeSet<String> {
    users.iter().map(|u| u.to_ascii_lowercase()).collect()
}

/// Coins in the order given, without repeats.
pub(crate) fn distinct(coins: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for coin in coins {
        if !out.contains(coin) {
            out.push(coin.clone());
        }
    }
    out
}

/// What a subscriber's lag means for its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLag {
    /// Incremental view: frames only make sense as an unbroken chain, so the
    /// stream ends (gRPC `ABORTED`).
    Abort,
    /// Snapshot view: the newest state supersedes what was dropped, so the
    /// stream skips to it and carries on.
    SkipToNewest,
}

/// How a server runs its views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewSettings {
    /// L2 book / L2 diff coalescing window in block time, ms (0 = every
    /// block).
    pub l2_coalesce_ms: i64,
    /// Minimum block time between two frames of one live candle, ms.
    pub candle_throttle_ms: i64,
    /// Whether candles are served at all.
    pub candles: bool,
}

impl Default for ViewSettings {
    fn default() -> Self {
        Self {
            l2_coalesce_ms: 0,
            candle_throttle_ms: crate::market::candles::DEFAULT_THROTTLE_MS,
            candles: true,
        }
    }
}

/// The selectors of a request as `l1gate replay` takes them, common to
/// every view; each view reads the ones it has and turns them into its
/// keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Coins (a required or a scope list, per view).
    pub coins: Vec<String>,
    /// Users (views with a user filter).
    pub users: Vec<String>,
    /// Builder address (builder fills).
    pub builder: Option<String>,
    /// Liquidation fills (of the liquidated `users`, if any).
    pub liquidations: bool,
    /// L2 levels per side (0 = full depth).
    pub n_levels: Option<u32>,
    /// L2 significant figures.
    pub n_sig_figs: Option<u32>,
    /// L2 mantissa.
    pub mantissa: Option<u64>,
    /// L2 book: suppress unchanged frames.
    pub strict: bool,
    /// Candle interval.
    pub interval: Option<String>,
}

/// Per-subscriber numbers of a frame (see [`numbering`]).
pub use numbering::{Numbering, Numbers};

/// One view. See the module docs.
pub trait View: Sized + Send + 'static {
    /// The normalised request: subscribers asking the same thing share one
    /// key, whose frames are built once per block.
    type Key: Clone + Ord + fmt::Debug + Send + Sync + 'static;
    /// One frame.
    type Frame: Serialize + Clone + fmt::Debug + Send + Sync + 'static;

    /// The view's name (`bbo`, `l2book`, …), as `l1gate replay` takes it.
    const NAME: &'static str;
    /// What a lag does to a subscriber.
    const ON_LAG: OnLag;
    /// What the market must fold for this view.
    const NEEDS: Needs;
    /// A live-only view has no opening state: a replay prints the frames of
    /// the block it opens at instead.
    const LIVE_ONLY: bool = false;
    /// The view reads only the price levels of its key's coins, whose books
    /// it has folded first ([`Market::fold_first`]): its frames are final at
    /// [`crate::market::Step::FirstBooks`].
    const FIRST: bool = false;

    /// The keys `l1gate replay` opens for `selection` (one per coin for the
    /// single-coin views), in output order.
    ///
    /// # Errors
    /// [`ViewError`] when the selection is outside the view's contract.
    fn keys(selection: &Selection) -> Result<Vec<Self::Key>, ViewError>;

    /// Coins named by `key` that must be known to the market (a server
    /// refuses a subscription to a coin it has never seen).
    fn listed_coins(_key: &Self::Key) -> Vec<&str> {
        Vec::new()
    }

    /// The only coins whose books `key` reads, when it reads the books of
    /// named coins alone (`None`: any book, or none). A replay of such a
    /// key keeps only those books.
    fn book_coins(_key: &Self::Key) -> Option<Vec<&str>> {
        None
    }

    /// Opens a subscription on the market as it stands: the subscription
    /// and its opening frames.
    ///
    /// # Errors
    /// [`ViewError`] when the key is outside the view's contract.
    fn open(
        market: &mut Market,
        key: &Self::Key,
        settings: &ViewSettings,
    ) -> Result<(Self, Vec<Self::Frame>), ViewError>;

    /// The frames of the block the market just folded.
    fn on_block(&mut self, market: &Market) -> Vec<Self::Frame>;

    /// Releases what the subscription holds in the market (tracked L2
    /// books, watched coins, watched tops of book).
    fn close(self, _market: &mut Market) {}

    /// This subscriber's numbers for `frame` (none for most views).
    fn numbers(_frame: &Self::Frame, _numbering: &mut Numbering) -> Numbers {
        Numbers::None
    }

    /// Writes `numbers` into `frame`.
    fn stamp(_frame: &mut Self::Frame, _numbers: &Numbers) {}
}

/// A view's frames as rows of a typed table (see [`crate::table`]): what
/// `l1gate replay` writes as Parquet or CSV. Every view has one, in its
/// module beside its frame.
pub trait Tabular: View {
    /// Its columns and what a row is.
    const TABLE: Table;

    /// The frame's block: number and time (Unix ms).
    fn block(frame: &Self::Frame) -> (u64, i64);

    /// The frame's rows, in order.
    ///
    /// # Errors
    /// What `out` refuses, and a frame whose values do not fit the table.
    fn rows<S: RowSink>(frame: &Self::Frame, out: &mut S) -> Result<(), S::Error>;
}
