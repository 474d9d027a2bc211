//! TP/SL updates: the lifecycle of the perps' untriggered trigger orders
//! (see [`crate::market::tpsl`] for how they are tracked), for the coins
//! and users asked for (empty coins = every perp; users match
//! case-insensitively). A subscription opens with a `snapshot: true` frame
//! holding every matching tracked order as an ADD; each later frame (one per
//! block with a matching diff) carries that block's diffs. Frames carry
//! `sequence` (1 on the first, +1 per frame), given per subscriber (see
//! [`crate::views::numbering`]). Naming a spot or outcome coin is refused.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::coin::is_perp;
use crate::market::tpsl::{TpslDiffType, TpslOrderDiff};
use crate::market::{Market, Needs};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{OnLag, Selection, View, ViewError, ViewSettings, lowercased};

/// `TpslUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TpslUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Diffs in order.
    pub diffs: Vec<TpslOrderDiff>,
    /// True = rebuild local state from these ADDs.
    pub snapshot: bool,
    /// 1 on the subscription's first frame, +1 per frame (0 until
    /// numbered).
    pub sequence: u64,
}

/// `TpslUpdatesRequest`, normalised.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TpslKey {
    /// Perp coins (empty = all perp coins).
    pub coins: BTreeSet<String>,
    /// Owners, lowercased (empty = all).
    pub users: BTreeSet<String>,
}

impl TpslKey {
    /// Refuses coins that are not perps.
    ///
    /// # Errors
    /// [`ViewError::NotPerp`] naming the first such coin.
    pub fn check(&self) -> Result<(), ViewError> {
        match self.coins.iter().find(|coin| !is_perp(coin)) {
            Some(coin) => Err(ViewError::NotPerp { coin: coin.clone() }),
            None => Ok(()),
        }
    }
}

/// One TP/SL subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpslSubscription {
    key: TpslKey,
}

impl TpslSubscription {
    /// Whether an order of `user` in `coin` belongs to this subscription.
    pub fn matches(&self, coin: &str, user: &str) -> bool {
        (self.key.coins.is_empty() || self.key.coins.contains(coin))
            && (self.key.users.is_empty() || self.key.users.contains(&user.to_ascii_lowercase()))
    }
}

impl View for TpslSubscription {
    type Key = TpslKey;
    type Frame = TpslUpdate;
    const NAME: &'static str = "tpsl";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs {
        tpsl: true,
        ..Needs::NONE
    };

    fn keys(selection: &Selection) -> Result<Vec<TpslKey>, ViewError> {
        let key = TpslKey {
            coins: selection.coins.iter().cloned().collect(),
            users: lowercased(&selection.users),
        };
        key.check()?;
        Ok(vec![key])
    }

    fn listed_coins(key: &TpslKey) -> Vec<&str> {
        key.coins.iter().map(String::as_str).collect()
    }

    /// The opening frame is the snapshot of the matching tracked orders.
    fn open(
        market: &mut Market,
        key: &TpslKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<TpslUpdate>), ViewError> {
        key.check()?;
        // Keys are normalised by whoever builds them; lowercase again so
        // that a hand-built key still matches case-insensitively.
        let subscription = Self {
            key: TpslKey {
                coins: key.coins.clone(),
                users: key.users.iter().map(|u| u.to_ascii_lowercase()).collect(),
            },
        };
        let view = market.tpsl();
        let diffs = view
            .orders()
            .filter(|order| subscription.matches(&order.coin, &order.user))
            .map(|order| order.diff(TpslDiffType::Add, None))
            .collect();
        let at = market.position();
        let frame = TpslUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
            snapshot: true,
            sequence: 0,
        };
        Ok((subscription, vec![frame]))
    }

    /// The block's matching diffs.
    fn on_block(&mut self, market: &Market) -> Vec<TpslUpdate> {
        let diffs: Vec<TpslOrderDiff> = market
            .tpsl()
            .diffs()
            .iter()
            .filter(|diff| self.matches(&diff.coin, &diff.user))
            .cloned()
            .collect();
        if diffs.is_empty() {
            return Vec::new();
        }
        let at = market.position();
        vec![TpslUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
            snapshot: false,
            sequence: 0,
        }]
    }

    fn numbers(_frame: &TpslUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::Sequence(numbering.next_sequence())
    }

    fn stamp(frame: &mut TpslUpdate, numbers: &Numbers) {
        if let Numbers::Sequence(sequence) = numbers {
            frame.sequence = *sequence;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_coins_are_refused() {
        let key = TpslKey {
            coins: ["BTC".to_owned(), "@107".to_owned()].into(),
            users: BTreeSet::new(),
        };
        assert_eq!(
            key.check(),
            Err(ViewError::NotPerp {
                coin: "@107".into()
            })
        );
    }
}
