//! Order updates of 1–20 accounts: each block's order statuses of those
//! accounts, exactly as the node wrote them, in file order (the exchange's
//! `orderUpdates` channel is rendered from these). Live only: there is no
//! opening frame.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::market::raw::RawJson;
use crate::market::{Market, Needs};
use crate::table::order::{STATUS, StatusEvent, status_cells, unreadable};
use crate::table::{BLOCK, Cell, RowSink, SEQUENCE, Table, block_cells, join};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{
    MAX_REQUIRED_COINS, OnLag, Selection, Tabular, View, ViewError, ViewSettings, lowercased,
};

/// `OrderStatusesUpdate`: one block's statuses of the subscribed accounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderStatusesUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// The node's status events (`{"time","user","hash","builder","status",
    /// "order"}`), byte-identical, in file order.
    pub statuses: Vec<RawJson>,
    /// 1 on the subscription's first frame, +1 per frame (0 until
    /// numbered).
    pub sequence: u64,
}

/// An order updates request, normalised: 1–20 accounts, lowercase.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatusesKey {
    /// Accounts (lowercase addresses).
    pub users: BTreeSet<String>,
}

impl StatusesKey {
    /// The key of `users` (any case), checked.
    ///
    /// # Errors
    /// [`ViewError::AccountCount`] for no account or more than 20.
    pub fn new(users: &[String]) -> Result<Self, ViewError> {
        let users = lowercased(users);
        if users.is_empty() || users.len() > MAX_REQUIRED_COINS {
            return Err(ViewError::AccountCount {
                view: StatusesSubscription::NAME,
                count: users.len(),
            });
        }
        Ok(Self { users })
    }
}

/// One order updates subscription: the accounts it watches in the market.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusesSubscription {
    users: BTreeSet<String>,
}

impl View for StatusesSubscription {
    type Key = StatusesKey;
    type Frame = OrderStatusesUpdate;
    const NAME: &'static str = "statuses";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs::BOOKS;
    const LIVE_ONLY: bool = true;

    fn keys(selection: &Selection) -> Result<Vec<StatusesKey>, ViewError> {
        Ok(vec![StatusesKey::new(&selection.users)?])
    }

    fn open(
        market: &mut Market,
        key: &StatusesKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<OrderStatusesUpdate>), ViewError> {
        let users: Vec<String> = key.users.iter().cloned().collect();
        let key = StatusesKey::new(&users)?;
        for user in &key.users {
            market.statuses_mut().watch(user);
        }
        Ok((Self { users: key.users }, Vec::new()))
    }

    /// The block's statuses of the watched accounts, in file order.
    fn on_block(&mut self, market: &Market) -> Vec<OrderStatusesUpdate> {
        let statuses: Vec<RawJson> = market
            .statuses()
            .of(&self.users)
            .map(|bytes| RawJson::new(String::from_utf8_lossy(bytes).into_owned()))
            .collect();
        if statuses.is_empty() {
            return Vec::new();
        }
        let at = market.position();
        vec![OrderStatusesUpdate {
            time: at.time,
            block_number: at.block_number,
            statuses,
            sequence: 0,
        }]
    }

    fn close(self, market: &mut Market) {
        for user in &self.users {
            market.statuses_mut().unwatch(user);
        }
    }

    fn numbers(_frame: &OrderStatusesUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::Sequence(numbering.next_sequence())
    }

    fn stamp(frame: &mut OrderStatusesUpdate, numbers: &Numbers) {
        if let Numbers::Sequence(sequence) = numbers {
            frame.sequence = *sequence;
        }
    }
}

// `statuses`: one row per order status of the subscribed accounts.

const NAME: &str = "statuses";

impl Tabular for StatusesSubscription {
    const TABLE: Table = Table {
        name: NAME,
        row: "one order status of a subscribed account, in file order",
        columns: &join::<3, 21, 24>([BLOCK[0], BLOCK[1], SEQUENCE], STATUS),
    };

    fn block(frame: &OrderStatusesUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &OrderStatusesUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        for raw in &frame.statuses {
            let event: StatusEvent<'_> =
                serde_json::from_str(raw.as_str()).map_err(|e| unreadable(NAME, &e))?;
            let mut cells = [Cell::Null; 24];
            cells[..3].copy_from_slice(&[number, time, Cell::U64(frame.sequence)]);
            cells[3..].copy_from_slice(&status_cells(NAME, &event)?);
            out.row(&cells)?;
        }
        Ok(())
    }
}
