//! L2 diffs per coin: a `snapshot=true` full book first (`seq` 1,
//! `prev_seq` 0), then only the levels a block changed, chained per coin by
//! `prev_seq` = the previous entry's `seq`; a removed level is sent with
//! `sz:"0.0"`. A coin reset from a node snapshot restarts its chain with a
//! fresh `snapshot=true` entry (`prev_seq` 0). The aggregation is shared
//! with the L2 book view ([`L2Tracker`](crate::views::l2book::L2Tracker)).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::book::l2::{L2Level, L2Params};
use crate::fold::Engine;
use crate::views::l2book::L2Key;
use crate::views::{ViewError, position, required_coins};

/// `L2CoinDiff`: one coin's entry in a diff frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2CoinDiff {
    /// Market.
    pub coin: String,
    /// This entry's sequence number for the coin.
    pub seq: u64,
    /// The previous entry's `seq` for the coin; 0 on a snapshot.
    pub prev_seq: u64,
    /// Changed bid levels (all levels on a snapshot).
    pub bids: Vec<L2Level>,
    /// Changed ask levels (all levels on a snapshot).
    pub asks: Vec<L2Level>,
    /// True = full book, rebuild from it.
    pub snapshot: bool,
}

/// `L2BookDiffUpdate`: one block's entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2BookDiffUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Per-coin entries, sorted by coin.
    pub diffs: Vec<L2CoinDiff>,
}

/// `L2BookDiffRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct L2BookDiffRequest {
    /// 1–20 markets.
    pub coins: Vec<String>,
    /// Levels per side; omitted = 20, 0 = full depth.
    pub n_levels: Option<u32>,
    /// Significant figures, 2–5.
    pub n_sig_figs: Option<u32>,
    /// 1, 2 or 5, only with five significant figures.
    pub mantissa: Option<u64>,
}

/// One L2 diff subscription: its coins and each coin's last `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2DiffSubscription {
    params: L2Params,
    seqs: BTreeMap<String, u64>,
}

impl L2DiffSubscription {
    /// Subscribes; the opening frame holds a `snapshot=true` entry per coin.
    ///
    /// # Errors
    /// [`ViewError::CoinCount`] or [`ViewError::L2`] for a request outside
    /// the contract.
    pub fn open(
        engine: &mut Engine,
        request: &L2BookDiffRequest,
    ) -> Result<(Self, L2BookDiffUpdate), ViewError> {
        let coins = required_coins("l2diff", &request.coins)?;
        let params = L2Params::new(request.n_levels, request.n_sig_figs, request.mantissa)?;
        let (views, books) = engine.views_mut();
        for coin in &coins {
            views.l2.track(
                L2Key {
                    coin: coin.clone(),
                    params,
                },
                books,
            );
        }
        let mut subscription = Self {
            params,
            seqs: coins.into_iter().map(|coin| (coin, 0)).collect(),
        };
        let coins: Vec<String> = subscription.seqs.keys().cloned().collect();
        let diffs = coins
            .iter()
            .map(|coin| subscription.snapshot_entry(engine, coin))
            .collect();
        let (block_number, time) = position(engine);
        Ok((
            subscription,
            L2BookDiffUpdate {
                time,
                block_number,
                diffs,
            },
        ))
    }

    /// The frame of the last folded block, if any subscribed coin's levels
    /// changed (or a coin was reset).
    pub fn on_block(&mut self, engine: &Engine) -> Option<L2BookDiffUpdate> {
        let mut diffs = Vec::new();
        let coins: Vec<String> = self.seqs.keys().cloned().collect();
        for coin in coins {
            let key = self.key(&coin);
            let Some(tracked) = engine.views().l2.get(&key) else {
                continue;
            };
            if tracked.reset() {
                diffs.push(self.snapshot_entry(engine, &coin));
            } else if tracked.changed() {
                let seq = self.seqs.entry(coin.clone()).or_insert(0);
                let prev_seq = *seq;
                *seq += 1;
                diffs.push(L2CoinDiff {
                    coin,
                    seq: *seq,
                    prev_seq,
                    bids: tracked.delta().bids.clone(),
                    asks: tracked.delta().asks.clone(),
                    snapshot: false,
                });
            }
        }
        if diffs.is_empty() {
            return None;
        }
        let (block_number, time) = position(engine);
        Some(L2BookDiffUpdate {
            time,
            block_number,
            diffs,
        })
    }

    /// Unsubscribes.
    pub fn close(self, engine: &mut Engine) {
        let views = engine.views_mut().0;
        for coin in self.seqs.keys() {
            views.l2.untrack(&self.key(coin));
        }
    }

    fn key(&self, coin: &str) -> L2Key {
        L2Key {
            coin: coin.to_owned(),
            params: self.params,
        }
    }

    fn snapshot_entry(&mut self, engine: &Engine, coin: &str) -> L2CoinDiff {
        let book = engine
            .views()
            .l2
            .get(&self.key(coin))
            .map(|tracked| tracked.book().clone())
            .unwrap_or_default();
        let seq = self.seqs.entry(coin.to_owned()).or_insert(0);
        *seq += 1;
        L2CoinDiff {
            coin: coin.to_owned(),
            seq: *seq,
            prev_seq: 0,
            bids: book.bids,
            asks: book.asks,
            snapshot: true,
        }
    }
}
