//! The fills family: each block's fills (every fill of the block mapped
//! once, see [`crate::market::fills`]) filtered per subscription — all, by
//! user, by builder, liquidations — within a coin scope, batched per block.
//! Live only: there is no opening frame.
//!
//! # Matching
//!
//! - `coins` is a scope list: empty means every coin; duplicates are
//!   ignored; unknown coins are accepted and simply never match.
//! - A user filter matches the fill's own account, case-insensitively.
//! - A builder filter matches the fill's `builder` address,
//!   case-insensitively; fills without a builder never match.
//! - The liquidation stream takes fills carrying a `liquidation` object; a
//!   non-empty `liquidated_users` list keeps only those whose
//!   `liquidatedUser` is one of them (case-insensitive; a liquidation without
//!   a liquidated user never matches a non-empty list).
//!
//! # Sequence
//!
//! Frames carry `sequence`, given per subscriber (see
//! [`crate::views::numbering`]): 1 on the first frame, +1 per frame. A block
//! with no matching fill sends no frame and does not consume a number, so a
//! gap always means loss.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::market::fills::Fill;
use crate::market::{Market, Needs};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, SEQUENCE, Table, block_cells};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, lowercased};

/// `FillsUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FillsUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Matching fills in file order.
    pub fills: Vec<Fill>,
    /// 1 on the subscription's first frame, +1 per frame (0 until
    /// numbered).
    pub sequence: u64,
}

/// Which fills a subscription wants besides its coin scope. Addresses are
/// stored lowercased.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FillsFilter {
    /// Every fill.
    All,
    /// Fills whose own account is this one.
    User(String),
    /// Fills attributed to this builder.
    Builder(String),
    /// Fills with a liquidation object (and, when non-empty, one of these
    /// liquidated users).
    Liquidations(BTreeSet<String>),
}

impl FillsFilter {
    /// Whether `fill` passes this filter (coins aside).
    pub fn matches(&self, fill: &Fill) -> bool {
        match self {
            FillsFilter::All => true,
            FillsFilter::User(user) => fill.user.eq_ignore_ascii_case(user),
            FillsFilter::Builder(builder) => fill
                .builder
                .as_deref()
                .is_some_and(|b| b.eq_ignore_ascii_case(builder)),
            FillsFilter::Liquidations(users) => {
                fill.liquidation.as_ref().is_some_and(|liquidation| {
                    users.is_empty()
                        || liquidation
                            .liquidated_user
                            .as_deref()
                            .is_some_and(|u| users.contains(&u.to_ascii_lowercase()))
                })
            }
        }
    }
}

/// A fills request, normalised: which fills and the coin scope.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FillsKey {
    /// Which fills.
    pub filter: FillsFilter,
    /// Markets (empty = all; unknown coins never match).
    pub coins: BTreeSet<String>,
}

impl FillsKey {
    /// The key of `l1gate replay`'s selectors without `--liquidations`:
    /// builder fills with a builder, else user fills for one user, else all
    /// fills, within the coins.
    ///
    /// # Errors
    /// [`ViewError::MissingBuilder`] / [`ViewError::MissingUser`] for an
    /// empty builder or user, [`ViewError::UserCount`] for several users.
    pub fn from_selectors(
        users: &[String],
        builder: Option<&str>,
        coins: &[String],
    ) -> Result<Self, ViewError> {
        let filter = match (builder, users) {
            (Some(""), _) => return Err(ViewError::MissingBuilder),
            (Some(builder), _) => FillsFilter::Builder(builder.to_ascii_lowercase()),
            (None, []) => FillsFilter::All,
            (None, [user]) if user.is_empty() => return Err(ViewError::MissingUser),
            (None, [user]) => FillsFilter::User(user.to_ascii_lowercase()),
            (None, _) => return Err(ViewError::UserCount { count: users.len() }),
        };
        Ok(Self {
            filter,
            coins: coins.iter().cloned().collect(),
        })
    }
}

/// One fills subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillsSubscription {
    key: FillsKey,
}

impl FillsSubscription {
    /// A subscription of `key`.
    pub fn new(key: FillsKey) -> Self {
        Self { key }
    }

    /// Whether `fill` belongs to this subscription.
    pub fn matches(&self, fill: &Fill) -> bool {
        (self.key.coins.is_empty() || self.key.coins.contains(&fill.coin))
            && self.key.filter.matches(fill)
    }
}

impl View for FillsSubscription {
    type Key = FillsKey;
    type Frame = FillsUpdate;
    const NAME: &'static str = "fills";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs {
        fills: true,
        ..Needs::NONE
    };
    const LIVE_ONLY: bool = true;

    fn keys(selection: &Selection) -> Result<Vec<FillsKey>, ViewError> {
        if selection.liquidations {
            return Ok(vec![FillsKey {
                filter: FillsFilter::Liquidations(lowercased(&selection.users)),
                coins: selection.coins.iter().cloned().collect(),
            }]);
        }
        Ok(vec![FillsKey::from_selectors(
            &selection.users,
            selection.builder.as_deref(),
            &selection.coins,
        )?])
    }

    fn open(
        market: &mut Market,
        key: &FillsKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<FillsUpdate>), ViewError> {
        market.watch_fills();
        Ok((Self::new(key.clone()), Vec::new()))
    }

    fn close(self, market: &mut Market) {
        market.unwatch_fills();
    }

    /// The block's matching fills, in file order.
    fn on_block(&mut self, market: &Market) -> Vec<FillsUpdate> {
        let view = market.fills();
        let fills: Vec<Fill> = view
            .fills()
            .iter()
            .filter(|fill| self.matches(fill))
            .cloned()
            .collect();
        if fills.is_empty() {
            return Vec::new();
        }
        let at = market.position();
        vec![FillsUpdate {
            time: at.time,
            block_number: at.block_number,
            fills,
            sequence: 0,
        }]
    }

    fn numbers(_frame: &FillsUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::Sequence(numbering.next_sequence())
    }

    fn stamp(frame: &mut FillsUpdate, numbers: &Numbers) {
        if let Numbers::Sequence(sequence) = numbers {
            frame.sequence = *sequence;
        }
    }
}

// `fills`: one row per fill.

impl Tabular for FillsSubscription {
    const TABLE: Table = Table {
        name: "fills",
        row: "one party's fill, in file order (a match is two rows, one per side, sharing `tid`)",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            SEQUENCE,
            Column::required("user", Kind::Text, "the fill's own account"),
            Column::required("coin", Kind::Text, "market"),
            Column::required("px", Kind::Decimal, "price"),
            Column::required("sz", Kind::Decimal, "size"),
            Column::required("side", Kind::Text, "this party's side: `B` or `A`"),
            Column::required("time", Kind::TimeMs, "fill time"),
            Column::required(
                "start_position",
                Kind::Decimal,
                "position (or spot balance) before the fill",
            ),
            Column::required(
                "dir",
                Kind::Text,
                "`Open Long`, `Close Short`, `Buy`, `Sell`, …",
            ),
            Column::required("closed_pnl", Kind::Decimal, "realised PnL"),
            Column::required("hash", Kind::Text, "taker's transaction hash"),
            Column::required("oid", Kind::UInt64, "order id"),
            Column::required("crossed", Kind::Bool, "true: this party was the taker"),
            Column::required("fee", Kind::Decimal, "fee (negative: a rebate)"),
            Column::required("tid", Kind::UInt64, "trade id"),
            Column::required("fee_token", Kind::Text, "the fee's token"),
            Column::optional("cloid", Kind::Text, "client order id"),
            Column::optional("twap_id", Kind::UInt64, "TWAP id of a TWAP slice"),
            Column::optional("builder", Kind::Text, "builder address"),
            Column::optional("builder_fee", Kind::Decimal, "builder fee"),
            Column::optional(
                "deployer_fee",
                Kind::Decimal,
                "builder-deployed market's deployer fee",
            ),
            Column::optional("priority_gas", Kind::Decimal, "priority gas"),
            Column::optional(
                "liquidation_method",
                Kind::Text,
                "`market` or `backstop` on a liquidation fill; empty otherwise",
            ),
            Column::optional(
                "liquidated_user",
                Kind::Text,
                "the liquidated account, when the node names it",
            ),
            Column::optional(
                "liquidation_mark_px",
                Kind::Decimal,
                "mark price at the liquidation",
            ),
        ],
    };

    fn block(frame: &FillsUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &FillsUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let optional = |value: Option<crate::num::Decimal>| value.map_or(Cell::Null, Cell::decimal);
        for fill in &frame.fills {
            let liquidation = fill.liquidation.as_ref();
            out.row(&[
                number,
                time,
                Cell::U64(frame.sequence),
                Cell::Text(&fill.user),
                Cell::Text(&fill.coin),
                Cell::decimal(fill.px),
                Cell::decimal(fill.sz),
                Cell::Text(fill.side.as_str()),
                Cell::TimeMs(fill.time),
                Cell::decimal(fill.start_position),
                Cell::Text(&fill.dir),
                Cell::decimal(fill.closed_pnl),
                Cell::Text(&fill.hash),
                Cell::U64(fill.oid),
                Cell::Bool(fill.crossed),
                Cell::decimal(fill.fee),
                Cell::U64(fill.tid),
                Cell::Text(&fill.fee_token),
                Cell::text_or_null(fill.cloid.as_deref()),
                fill.twap_id.map_or(Cell::Null, Cell::U64),
                Cell::text_or_null(fill.builder.as_deref()),
                optional(fill.builder_fee),
                optional(fill.deployer_fee),
                optional(fill.priority_gas),
                Cell::text_or_null(liquidation.map(|l| l.method.as_str())),
                Cell::text_or_null(liquidation.and_then(|l| l.liquidated_user.as_deref())),
                optional(liquidation.map(|l| l.mark_px)),
            ])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode_fill;
    use crate::market::fills::tests::LIQUIDATION;

    fn liquidations(users: &[&str]) -> FillsSubscription {
        FillsSubscription::new(FillsKey {
            filter: FillsFilter::Liquidations(
                users.iter().map(|u| u.to_ascii_lowercase()).collect(),
            ),
            coins: BTreeSet::new(),
        })
    }

    #[test]
    fn liquidated_user_filter_is_case_insensitive() {
        let event = decode_fill(LIQUIDATION.as_bytes()).unwrap();
        let fill = Fill::of(&event);
        assert!(liquidations(&["0xDEAD000000000000000000000000000000000002"]).matches(&fill));
        assert!(!liquidations(&["0xbeef"]).matches(&fill));
        assert!(liquidations(&[]).matches(&fill));
    }

    #[test]
    fn command_line_selectors_pick_the_stream() {
        let coins = vec!["ETH".to_owned()];
        let users = vec!["0xAA".to_owned()];
        let builder = FillsKey::from_selectors(&users, Some("0xBB"), &coins).unwrap();
        assert_eq!(builder.filter, FillsFilter::Builder("0xbb".into()));
        let user = FillsKey::from_selectors(&users, None, &coins).unwrap();
        assert_eq!(user.filter, FillsFilter::User("0xaa".into()));
        let all = FillsKey::from_selectors(&[], None, &[]).unwrap();
        assert_eq!(all.filter, FillsFilter::All);
        let two = vec!["0xaa".to_owned(), "0xcc".to_owned()];
        assert_eq!(
            FillsKey::from_selectors(&two, None, &coins),
            Err(ViewError::UserCount { count: 2 })
        );
    }

    #[test]
    fn the_liquidations_selector_takes_the_users_as_liquidated_users() {
        let selection = Selection {
            liquidations: true,
            users: vec!["0xDEAD".to_owned()],
            coins: vec!["ETH".to_owned()],
            ..Selection::default()
        };
        assert_eq!(
            FillsSubscription::keys(&selection).unwrap(),
            [FillsKey {
                filter: FillsFilter::Liquidations(["0xdead".to_owned()].into()),
                coins: ["ETH".to_owned()].into(),
            }]
        );
    }

    #[test]
    fn empty_user_or_builder_is_refused() {
        assert_eq!(
            FillsKey::from_selectors(&[String::new()], None, &[]),
            Err(ViewError::MissingUser)
        );
        assert_eq!(
            FillsKey::from_selectors(&[], Some(""), &[]),
            Err(ViewError::MissingBuilder)
        );
    }
}
