//! Open orders of one account: every order it has resting on one exchange,
//! whole, when the subscription opens and again after each block that
//! changed them (the exchange's `openOrders` WebSocket subscription is
//! rendered from these).
//!
//! The books keep the orders of a held account as they change, so a block
//! costs the subscription one counter read while the account's orders stay
//! as they were, and a walk of the books' per-account maps (not of their
//! orders) when they changed (see [`Books::hold_user`]).
//!
//! [`Books::hold_user`]: crate::book::l4::Books::hold_user

use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::book::l4::{CLOID_TEXT_LEN, Cloid, MAX_HELD_USERS, RestingOrder, UserOrders};
use crate::coin::on_dex;
use crate::event::Side;
use crate::market::{Market, Needs};
use crate::num::{Px, Sz};
use crate::table::order::STATUS;
use crate::table::{
    BLOCK, Cell, Column, Kind, RowSink, SEQUENCE, Table, block_cells, empty_frame_row,
};
use crate::text::Short;
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{
    MAX_REQUIRED_COINS, OnLag, Selection, Tabular, View, ViewError, ViewSettings, lowercased,
};

/// `OpenOrdersUpdate`: every open order of one account on one exchange.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenOrdersUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// The block after which the orders are these.
    pub block_number: u64,
    /// The account (lowercase).
    pub user: String,
    /// The exchange: `""` for the default one, else a builder-deployed
    /// exchange's name.
    pub dex: String,
    /// The orders, newest first (by placement time, then order id).
    pub orders: Vec<OpenOrder>,
    /// 1 on the subscription's first frame, +1 per frame (0 until
    /// numbered).
    pub sequence: u64,
}

/// One open order and its market, shared with the books' copy; serialised
/// as the exchange's `frontendOpenOrders` entry ([`FrontendOrder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOrder {
    /// Market.
    pub coin: Short,
    /// The order.
    pub order: Arc<RestingOrder>,
}

impl Serialize for OpenOrder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FrontendOrder::of(&self.coin, &self.order).serialize(serializer)
    }
}

/// One order as the exchange's `frontendOpenOrders` answer and `openOrders`
/// subscription write it: fields in alphabetical order, `cloid` and `tif`
/// `null` when unset, `children` always empty (the book keeps no
/// brackets).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendOrder<'a> {
    children: [(); 0],
    cloid: Option<&'a Cloid>,
    coin: &'a str,
    is_position_tpsl: bool,
    is_trigger: bool,
    limit_px: &'a Px,
    oid: u64,
    order_type: &'a str,
    orig_sz: &'a Sz,
    reduce_only: bool,
    side: Side,
    sz: &'a Sz,
    tif: Option<&'a str>,
    timestamp: i64,
    trigger_condition: &'a str,
    trigger_px: &'a Px,
}

impl<'a> FrontendOrder<'a> {
    /// `order`, resting in `coin`'s book.
    pub fn of(coin: &'a str, order: &'a RestingOrder) -> Self {
        Self {
            children: [],
            cloid: order.cloid.as_ref(),
            coin,
            is_position_tpsl: order.terms.is_position_tpsl,
            is_trigger: order.terms.is_trigger,
            limit_px: &order.limit_px,
            oid: order.oid,
            order_type: order.terms.order_type.as_str(),
            orig_sz: &order.orig_sz,
            reduce_only: order.terms.reduce_only,
            side: order.side,
            sz: &order.sz,
            tif: order.terms.tif.as_deref(),
            timestamp: order.timestamp,
            trigger_condition: order.terms.trigger_condition.as_str(),
            trigger_px: &order.terms.trigger_px,
        }
    }
}

/// The orders of `books` (by coin, shared, as the books hand them out), one
/// list, newest first.
pub fn newest_first(books: &[(Short, UserOrders)]) -> Vec<OpenOrder> {
    newest_first_borrowed(books)
        .into_iter()
        // Each place is one of `books`' own.
        .map(|(market, order)| OpenOrder {
            coin: books[market].0.clone(),
            order: Arc::clone(order),
        })
        .collect()
}

/// [`newest_first`] without a copy: each order borrowed from `books` with
/// its market's place there (an Info answer writes tens of thousands
/// straight from them). Newest first is placement time, then order id, both
/// descending.
pub fn newest_first_borrowed(books: &[(Short, UserOrders)]) -> Vec<(usize, &Arc<RestingOrder>)> {
    // Sorted on keys kept beside the orders rather than read through each
    // order's pointer at every comparison: a market maker rests tens of
    // thousands. An account's oids differ, so the order is total.
    let mut keyed: Vec<_> = books
        .iter()
        .enumerate()
        .flat_map(|(market, (_, orders))| {
            orders.values().map(move |order| {
                (
                    std::cmp::Reverse((order.timestamp, order.oid)),
                    market,
                    order,
                )
            })
        })
        .collect();
    keyed.sort_unstable_by_key(|(newest, ..)| *newest);
    keyed
        .into_iter()
        .map(|(_, market, order)| (market, order))
        .collect()
}

/// An open orders request, normalised.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpenOrdersKey {
    /// The account (lowercase address).
    pub user: String,
    /// The exchange (`""`: the default one).
    pub dex: String,
}

impl OpenOrdersKey {
    /// The key of `user` (any case) on exchange `dex`.
    pub fn new(user: &str, dex: &str) -> Self {
        Self {
            user: user.to_ascii_lowercase(),
            dex: dex.to_owned(),
        }
    }
}

/// One open orders subscription: its account held in the books, and what
/// it last sent.
#[derive(Debug, Clone)]
pub struct OpenOrdersSubscription {
    key: OpenOrdersKey,
    /// The books' count of the account's changes when last read.
    changes: Option<u64>,
    /// The orders last sent.
    sent: Vec<OpenOrder>,
}

impl OpenOrdersSubscription {
    /// The account's orders on the key's exchange as the books hold them.
    fn orders(&self, market: &Market) -> Vec<OpenOrder> {
        let books: Vec<(Short, UserOrders)> = market
            .books()
            .watched_orders_of(&self.key.user)
            .into_iter()
            .filter(|(coin, _)| on_dex(coin, &self.key.dex))
            .collect();
        newest_first(&books)
    }

    fn frame(&self, market: &Market) -> OpenOrdersUpdate {
        let at = market.position();
        OpenOrdersUpdate {
            time: at.time,
            block_number: at.block_number,
            user: self.key.user.clone(),
            dex: self.key.dex.clone(),
            orders: self.sent.clone(),
            sequence: 0,
        }
    }
}

impl View for OpenOrdersSubscription {
    type Key = OpenOrdersKey;
    type Frame = OpenOrdersUpdate;
    const NAME: &'static str = "openorders";
    // Every frame is whole: a subscriber that lags is sent the newest.
    const ON_LAG: OnLag = OnLag::SkipToNewest;
    const NEEDS: Needs = Needs::BOOKS;

    /// One key per account of the selection, on the default exchange.
    fn keys(selection: &Selection) -> Result<Vec<OpenOrdersKey>, ViewError> {
        let users = lowercased(&selection.users);
        if users.is_empty() || users.len() > MAX_REQUIRED_COINS {
            return Err(ViewError::AccountCount {
                view: Self::NAME,
                count: users.len(),
            });
        }
        Ok(users
            .iter()
            .map(|user| OpenOrdersKey::new(user, ""))
            .collect())
    }

    /// The account's orders as they rest now.
    fn open(
        market: &mut Market,
        key: &OpenOrdersKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<OpenOrdersUpdate>), ViewError> {
        let key = OpenOrdersKey::new(&key.user, &key.dex);
        if !market.hold_orders_of(&key.user) {
            return Err(ViewError::AccountsFollowed {
                view: Self::NAME,
                limit: MAX_HELD_USERS,
            });
        }
        let mut subscription = Self {
            changes: market.books().changes_of(&key.user),
            key,
            sent: Vec::new(),
        };
        subscription.sent = subscription.orders(market);
        let frame = subscription.frame(market);
        Ok((subscription, vec![frame]))
    }

    /// The orders again when the block changed them.
    fn on_block(&mut self, market: &Market) -> Vec<OpenOrdersUpdate> {
        let changes = market.books().changes_of(&self.key.user);
        if changes == self.changes {
            return Vec::new();
        }
        self.changes = changes;
        let orders = self.orders(market);
        if orders == self.sent {
            return Vec::new();
        }
        self.sent = orders;
        vec![self.frame(market)]
    }

    fn close(self, market: &mut Market) {
        market.release_orders_of(&self.key.user);
    }

    fn numbers(_frame: &OpenOrdersUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::Sequence(numbering.next_sequence())
    }

    fn stamp(frame: &mut OpenOrdersUpdate, numbers: &Numbers) {
        if let Numbers::Sequence(sequence) = numbers {
            frame.sequence = *sequence;
        }
    }
}

// `openorders`: one row per open order of each frame, newest first; a
// frame with no open order is one row with empty order columns.

/// The frame's own columns, before the order's.
const HEAD: usize = 5;
/// The order's columns: an order status's from `coin` to `cloid`.
const ORDER: usize = 15;
/// Where `coin` is among an order status's columns.
const ORDER_AT: usize = 5;

/// Every column: the frame's, then the order's as an order status has
/// them (the `l4book` table's resting orders have the same), each empty on
/// the row of an account with none.
const fn columns() -> [Column; HEAD + ORDER] {
    let head = [
        BLOCK[0],
        BLOCK[1],
        SEQUENCE,
        Column::required("user", Kind::Text, "the account"),
        Column::required(
            "dex",
            Kind::Text,
            "the exchange: empty for the default one, else a builder-deployed exchange's name",
        ),
    ];
    let mut out = [BLOCK[0]; HEAD + ORDER];
    let mut i = 0;
    while i < HEAD {
        out[i] = head[i];
        i += 1;
    }
    while i < HEAD + ORDER {
        out[i] = STATUS[ORDER_AT + i - HEAD];
        out[i].nullable = true;
        i += 1;
    }
    out
}

impl Tabular for OpenOrdersSubscription {
    const TABLE: Table = Table {
        name: "openorders",
        row: "one open order of the account after the frame's block (every frame is the whole \
              list, newest first); an account with none is one row with empty order columns",
        columns: &columns(),
    };

    fn block(frame: &OpenOrdersUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &OpenOrdersUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let head: [Cell<'_>; HEAD] = [
            number,
            time,
            Cell::U64(frame.sequence),
            Cell::Text(&frame.user),
            Cell::Text(&frame.dex),
        ];
        if frame.orders.is_empty() {
            return empty_frame_row(out, &head, ORDER);
        }
        for open in &frame.orders {
            let order = &open.order;
            let mut cloid_text = [0; CLOID_TEXT_LEN];
            let mut cells = [Cell::Null; HEAD + ORDER];
            cells[..HEAD].copy_from_slice(&head);
            cells[HEAD..].copy_from_slice(&[
                Cell::Text(&open.coin),
                Cell::Text(order.side.as_str()),
                Cell::decimal(order.limit_px),
                Cell::decimal(order.sz),
                Cell::decimal(order.orig_sz),
                Cell::U64(order.oid),
                Cell::TimeMs(order.timestamp),
                Cell::Text(&order.terms.order_type),
                Cell::text_or_null(order.terms.tif.as_deref()),
                Cell::Bool(order.terms.reduce_only),
                Cell::Bool(order.terms.is_trigger),
                Cell::decimal(order.terms.trigger_px),
                Cell::Text(&order.terms.trigger_condition),
                Cell::Bool(order.terms.is_position_tpsl),
                Cell::text_or_null(
                    order
                        .cloid
                        .as_ref()
                        .map(|cloid| cloid.as_str(&mut cloid_text)),
                ),
            ]);
            out.row(&cells)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_columns_are_the_ones_each_row_fills_in_that_order() {
        let names: Vec<&str> = OpenOrdersSubscription::TABLE.columns[HEAD..]
            .iter()
            .map(|column| column.name)
            .collect();
        assert_eq!(
            names,
            [
                "coin",
                "side",
                "limit_px",
                "sz",
                "orig_sz",
                "oid",
                "timestamp",
                "order_type",
                "tif",
                "reduce_only",
                "is_trigger",
                "trigger_px",
                "trigger_condition",
                "is_position_tpsl",
                "cloid",
            ]
        );
        assert!(
            OpenOrdersSubscription::TABLE.columns[HEAD..]
                .iter()
                .all(|column| column.nullable)
        );
    }
}
