//! Trades of 1–20 coins: each block's trades (fills paired by trade id, see
//! [`crate::market::trades`]) batched per coin. Live only: there is no
//! opening frame.

use std::collections::BTreeSet;

use crate::market::trades::TradesUpdate;
use crate::market::{Market, Needs};
use crate::views::{OnLag, Selection, View, ViewError, ViewSettings, required_coins};

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
