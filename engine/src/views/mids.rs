//! All mids: the mid price (`(best bid + best ask) / 2`, exact) of every coin
//! in scope (empty scope = all coins with both sides), as one map: the
//! current map on subscribe, then again whenever one of those mids changes.
//! The server's `StreamAllMids` without an Info source narrows the scope to
//! the default exchange's perps (`perps_only`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::coin::is_default_perp;
use crate::market::{Market, Needs};
use crate::num::Px;
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, block_cells};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, in_scope};

/// `AllMidsUpdate` (with the producing block, which book mids have).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllMidsUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Coin → mid, sorted by coin.
    pub mids: BTreeMap<String, Px>,
}

/// A mids request, normalised.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MidsKey {
    /// Markets (empty = all).
    pub coins: BTreeSet<String>,
    /// Only perps of the default exchange.
    pub perps_only: bool,
    /// Only the coins of one exchange, as the exchange's `allMids` asks:
    /// `""` the default exchange (perps, spot and outcome coins: no `dex:`
    /// prefix), else a builder-deployed exchange's `dex:` coins. `None`:
    /// every exchange.
    pub dex: Option<String>,
}

/// One mids subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MidsSubscription {
    key: MidsKey,
}

impl MidsSubscription {
    fn wants(&self, coin: &str) -> bool {
        in_scope(&self.key.coins, coin)
            && (!self.key.perps_only || is_default_perp(coin))
            && self
                .key
                .dex
                .as_deref()
                .is_none_or(|dex| crate::coin::on_dex(coin, dex))
    }

    fn frame(&self, market: &Market) -> AllMidsUpdate {
        let at = market.position();
        AllMidsUpdate {
            time: at.time,
            block_number: at.block_number,
            mids: market
                .mids()
                .mids()
                .iter()
                .filter(|(coin, _)| self.wants(coin))
                .map(|(coin, px)| (coin.clone(), *px))
                .collect(),
        }
    }
}

impl View for MidsSubscription {
    type Key = MidsKey;
    type Frame = AllMidsUpdate;
    const NAME: &'static str = "mids";
    const ON_LAG: OnLag = OnLag::SkipToNewest;
    const NEEDS: Needs = Needs::BOOKS;

    fn keys(selection: &Selection) -> Result<Vec<MidsKey>, ViewError> {
        Ok(vec![MidsKey {
            coins: selection.coins.iter().cloned().collect(),
            perps_only: false,
            dex: None,
        }])
    }

    /// The opening frame is the current map.
    fn open(
        market: &mut Market,
        key: &MidsKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<AllMidsUpdate>), ViewError> {
        let subscription = Self { key: key.clone() };
        market.watch_tops();
        let frame = subscription.frame(market);
        Ok((subscription, vec![frame]))
    }

    fn close(self, market: &mut Market) {
        market.unwatch_tops();
    }

    /// The whole map again when a mid in scope changed.
    fn on_block(&mut self, market: &Market) -> Vec<AllMidsUpdate> {
        let changed = market
            .mids()
            .changed()
            .iter()
            .any(|coin| self.wants(coin.as_str()));
        if changed {
            vec![self.frame(market)]
        } else {
            Vec::new()
        }
    }
}

// `mids`: one row per coin of each frame's map of mids.

impl Tabular for MidsSubscription {
    const TABLE: Table = Table {
        name: "mids",
        row: "one coin's mid in a frame (every coin in scope with both sides, sent whole when \
              one of them changed), coins in order; an empty map is one row with no coin",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::optional("coin", Kind::Text, "market"),
            Column::optional("mid", Kind::Decimal, "(best bid + best ask) / 2, exact"),
        ],
    };

    fn block(frame: &AllMidsUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &AllMidsUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        if frame.mids.is_empty() {
            return out.row(&[number, time, Cell::Null, Cell::Null]);
        }
        for (coin, mid) in &frame.mids {
            out.row(&[number, time, Cell::Text(coin), Cell::decimal(*mid)])?;
        }
        Ok(())
    }
}
