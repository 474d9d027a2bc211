//! Best bid and offer: for 1–20 coins, each coin's top level per side
//! (`px`, total `sz`, order count `n`); on subscribe every coin's current
//! top, then a frame for a coin only when its top changes.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::book::l2::L2Level;
use crate::market::{Market, Needs};
use crate::views::{OnLag, Selection, View, ViewError, ViewSettings, required_coins};

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
