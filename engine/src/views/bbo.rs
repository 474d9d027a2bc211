//! Best bid and offer: for 1–20 coins, each coin's top level per side
//! (`px`, total `sz`, order count `n`); on subscribe every coin's current
//! top, then a frame for a coin only when its top changes.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::book::l2::L2Level;
use crate::market::{Market, Needs};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, block_cells};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, required_coins};

/// `BboUpdate`: one coin's top of book; a side is omitted when empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BboUpdate {
    /// Market.
    pub coin: String,
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Best bid level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bid: Option<L2Level>,
    /// Best ask level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask: Option<L2Level>,
}

/// `BboRequest`, normalised: 1–20 distinct coins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BboKey {
    /// Markets.
    pub coins: BTreeSet<String>,
}

/// One BBO subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BboSubscription {
    coins: BTreeSet<String>,
}

impl BboSubscription {
    fn frame(market: &Market, coin: &str) -> BboUpdate {
        let at = market.position();
        let (bid, ask) = market.bbo().top(coin);
        BboUpdate {
            coin: coin.to_owned(),
            time: at.time,
            block_number: at.block_number,
            bid,
            ask,
        }
    }
}

impl View for BboSubscription {
    type Key = BboKey;
    type Frame = BboUpdate;
    const NAME: &'static str = "bbo";
    const ON_LAG: OnLag = OnLag::SkipToNewest;
    const NEEDS: Needs = Needs::BOOKS;
    const FIRST: bool = true;

    fn keys(selection: &Selection) -> Result<Vec<BboKey>, ViewError> {
        Ok(vec![BboKey {
            coins: required_coins(Self::NAME, &selection.coins)?,
        }])
    }

    fn listed_coins(key: &BboKey) -> Vec<&str> {
        key.coins.iter().map(String::as_str).collect()
    }

    fn book_coins(key: &BboKey) -> Option<Vec<&str>> {
        Some(Self::listed_coins(key))
    }

    /// The opening frames are every coin's current top.
    fn open(
        market: &mut Market,
        key: &BboKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<BboUpdate>), ViewError> {
        let coins: Vec<String> = key.coins.iter().cloned().collect();
        let subscription = Self {
            coins: required_coins(Self::NAME, &coins)?,
        };
        market.watch_tops();
        market.fold_first(subscription.coins.iter().map(String::as_str));
        let frames = subscription
            .coins
            .iter()
            .map(|coin| Self::frame(market, coin))
            .collect();
        Ok((subscription, frames))
    }

    fn close(self, market: &mut Market) {
        market.unwatch_tops();
        market.unfold_first(self.coins.iter().map(String::as_str));
    }

    /// One frame per subscribed coin whose top changed.
    fn on_block(&mut self, market: &Market) -> Vec<BboUpdate> {
        self.coins
            .iter()
            .filter(|coin| market.bbo().changed(coin))
            .map(|coin| Self::frame(market, coin))
            .collect()
    }
}

// `bbo`: one row per frame, a coin's best bid and ask.

impl Tabular for BboSubscription {
    const TABLE: Table = Table {
        name: "bbo",
        row: "one frame: a coin's top of book after a block that changed it (on the first \
              block, every coin's)",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            Column::optional(
                "bid_px",
                Kind::Decimal,
                "best bid price; empty when no bid rests",
            ),
            Column::optional("bid_sz", Kind::Decimal, "size resting at the best bid"),
            Column::optional("bid_n", Kind::UInt32, "orders resting at the best bid"),
            Column::optional(
                "ask_px",
                Kind::Decimal,
                "best ask price; empty when no ask rests",
            ),
            Column::optional("ask_sz", Kind::Decimal, "size resting at the best ask"),
            Column::optional("ask_n", Kind::UInt32, "orders resting at the best ask"),
        ],
    };

    fn block(frame: &BboUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &BboUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let [bid_px, bid_sz, bid_n] = super::l2book::level_cells(frame.bid.as_ref());
        let [ask_px, ask_sz, ask_n] = super::l2book::level_cells(frame.ask.as_ref());
        out.row(&[
            number,
            time,
            Cell::Text(&frame.coin),
            bid_px,
            bid_sz,
            bid_n,
            ask_px,
            ask_sz,
            ask_n,
        ])
    }
}
