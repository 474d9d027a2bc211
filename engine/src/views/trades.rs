//! Trades of 1–20 coins: each block's trades (fills paired by trade id, see
//! [`crate::market::trades`]) batched per coin. Live only: there is no
//! opening frame.

use std::collections::BTreeSet;

use crate::market::trades::TradesUpdate;
use crate::market::{Market, Needs};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, block_cells};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, required_coins};

/// `TradesRequest`, normalised: 1–20 distinct coins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TradesKey {
    /// Markets.
    pub coins: BTreeSet<String>,
}

/// One trades subscription: a coin filter over the block's frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TradesSubscription {
    coins: BTreeSet<String>,
}

impl View for TradesSubscription {
    type Key = TradesKey;
    type Frame = TradesUpdate;
    const NAME: &'static str = "trades";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs {
        trades: true,
        ..Needs::NONE
    };
    const LIVE_ONLY: bool = true;

    fn keys(selection: &Selection) -> Result<Vec<TradesKey>, ViewError> {
        Ok(vec![TradesKey {
            coins: required_coins(Self::NAME, &selection.coins)?,
        }])
    }

    fn listed_coins(key: &TradesKey) -> Vec<&str> {
        key.coins.iter().map(String::as_str).collect()
    }

    fn open(
        _market: &mut Market,
        key: &TradesKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<TradesUpdate>), ViewError> {
        let coins: Vec<String> = key.coins.iter().cloned().collect();
        let subscription = Self {
            coins: required_coins(Self::NAME, &coins)?,
        };
        Ok((subscription, Vec::new()))
    }

    /// The block's frames of the subscribed coins.
    fn on_block(&mut self, market: &Market) -> Vec<TradesUpdate> {
        market
            .trades()
            .frames()
            .iter()
            .filter(|frame| self.coins.contains(&frame.coin))
            .cloned()
            .collect()
    }
}

// `trades`: one row per trade.

impl Tabular for TradesSubscription {
    const TABLE: Table = Table {
        name: "trades",
        row: "one trade (both fills of a match are one trade), in the order of its first fill \
              in the block",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            Column::required("side", Kind::Text, "the taker's side: `B` bought, `A` sold"),
            Column::required("px", Kind::Decimal, "execution price"),
            Column::required("sz", Kind::Decimal, "execution size"),
            Column::required("time", Kind::TimeMs, "fill time"),
            Column::required(
                "hash",
                Kind::Text,
                "taker's transaction hash (zeros for a TWAP slice)",
            ),
            Column::required("tid", Kind::UInt64, "trade id, shared by both fills"),
            Column::required("buyer", Kind::Text, "buyer's address"),
            Column::required("seller", Kind::Text, "seller's address"),
        ],
    };

    fn block(frame: &TradesUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &TradesUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        for trade in &frame.trades {
            out.row(&[
                number,
                time,
                Cell::Text(&trade.coin),
                Cell::Text(trade.side.as_str()),
                Cell::decimal(trade.px),
                Cell::decimal(trade.sz),
                Cell::TimeMs(trade.time),
                Cell::Text(&trade.hash),
                Cell::U64(trade.tid),
                Cell::Text(&trade.users[0]),
                Cell::Text(&trade.users[1]),
            ])?;
        }
        Ok(())
    }
}
