//! The fills family: every fill of a block mapped once into a `Fill` frame
//! entry, then filtered per subscription (all, by user, by builder,
//! liquidations) and batched per block as `FillsUpdate`.
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
//! Each subscription numbers its own frames: `sequence` is 1 on the first
//! frame it sends and grows by exactly 1 per frame. A block with no matching
//! fill sends no frame and does not consume a number, so a gap always means
//! loss.

use std::collections::BTreeSet;

use serde::Serialize;
use thiserror::Error;

use crate::block::DecodedBlock;
use crate::event::{FillEvent, Side};
use crate::num::{Decimal, Px, Sz};

/// `Liquidation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Liquidation {
    /// The liquidated account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liquidated_user: Option<String>,
    /// Mark price at liquidation.
    pub mark_px: Px,
    /// `"market"` or `"backstop"`.
    pub method: String,
}

/// `Fill`: one party's execution, field for field as the node wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fill {
    /// The fill's own account.
    pub user: String,
    /// Market.
    pub coin: String,
    /// Price.
    pub px: Px,
    /// Size.
    pub sz: Sz,
    /// This party's side.
    pub side: Side,
    /// Unix ms.
    pub time: i64,
    /// Position (or spot balance) before the fill.
    pub start_position: Decimal,
    /// `Open Long`, `Sell`, ...
    pub dir: String,
    /// Realised PnL.
    pub closed_pnl: Decimal,
    /// Taker's transaction hash.
    pub hash: String,
    /// Order id.
    pub oid: u64,
    /// True = taker.
    pub crossed: bool,
    /// Fee (negative = rebate).
    pub fee: Decimal,
    /// Trade id.
    pub tid: u64,
    /// Fee token.
    pub fee_token: String,
    /// Client order id, when the node wrote one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloid: Option<String>,
    /// TWAP id, when non-null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub twap_id: Option<u64>,
    /// Builder address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder: Option<String>,
    /// Builder fee.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder_fee: Option<Decimal>,
    /// HIP-3 deployer fee.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployer_fee: Option<Decimal>,
    /// Priority gas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_gas: Option<Decimal>,
    /// Liquidation details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liquidation: Option<Liquidation>,
}

impl Fill {
    /// Maps a node fill event.
    pub fn of(event: &FillEvent<'_>) -> Self {
        let fill = event.fill();
        Self {
            user: event.user().to_owned(),
            coin: fill.coin.to_owned(),
            px: fill.px,
            sz: fill.sz,
            side: fill.side,
            time: fill.time,
            start_position: fill.start_position,
            dir: fill.dir.to_owned(),
            closed_pnl: fill.closed_pnl,
            hash: fill.hash.to_owned(),
            oid: fill.oid,
            crossed: fill.crossed,
            fee: fill.fee,
            tid: fill.tid,
            fee_token: fill.fee_token.to_owned(),
            cloid: fill.cloid.map(str::to_owned),
            twap_id: fill.twap_id,
            builder: fill.builder.map(str::to_owned),
            builder_fee: fill.builder_fee,
            deployer_fee: fill.deployer_fee,
            priority_gas: fill.priority_gas,
            liquidation: fill.liquidation.as_ref().map(|l| Liquidation {
                liquidated_user: l.liquidated_user.map(str::to_owned),
                mark_px: l.mark_px,
                method: l.method.to_owned(),
            }),
        }
    }
}

/// `FillsUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FillsUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Matching fills in file order.
    pub fills: Vec<Fill>,
    /// 1 on the subscription's first frame, +1 per frame.
    pub sequence: u64,
}

/// Shared state: the last folded block's fills, mapped once.
#[derive(Debug, Clone, Default)]
pub struct FillsView {
    block_number: u64,
    time: i64,
    fills: Vec<Fill>,
}

impl FillsView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one decoded block.
    pub fn apply(&mut self, block: &DecodedBlock<'_>) {
        self.apply_fills(
            block.number,
            block.time_ms,
            block.fills.iter().map(|spanned| &spanned.event),
        );
    }

    /// Folds one block given as its fills.
    pub fn apply_fills<'e, 'a: 'e>(
        &mut self,
        block_number: u64,
        time: i64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
    ) {
        self.block_number = block_number;
        self.time = time;
        self.fills.clear();
        self.fills.extend(fills.into_iter().map(Fill::of));
    }

    /// The last folded block: `(block_number, time)`.
    pub fn position(&self) -> (u64, i64) {
        (self.block_number, self.time)
    }

    /// The last block's fills in file order.
    pub fn fills(&self) -> &[Fill] {
        &self.fills
    }
}

/// A fills request outside the contract.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FillsError {
    /// `UserFillsRequest.user` is empty.
    #[error("fills: user fills need a user")]
    MissingUser,
    /// `BuilderFillsRequest.builder` is empty.
    #[error("fills: builder fills need a builder")]
    MissingBuilder,
    /// User fills were asked for several users at once; a user-fills
    /// subscription follows exactly one account.
    #[error("fills: user fills follow one user, got {count}")]
    UserCount {
        /// Users given.
        count: usize,
    },
}

/// `AllFillsRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllFillsRequest {
    /// Scope list (empty = all coins).
    pub coins: Vec<String>,
}

/// `UserFillsRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserFillsRequest {
    /// Required; the fill's own account, case-insensitive.
    pub user: String,
    /// Scope list (empty = all coins).
    pub coins: Vec<String>,
}

/// `BuilderFillsRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuilderFillsRequest {
    /// Required; case-insensitive.
    pub builder: String,
    /// Scope list (empty = all coins).
    pub coins: Vec<String>,
}

/// `LiquidationFillsRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiquidationFillsRequest {
    /// Scope list (empty = all coins).
    pub coins: Vec<String>,
    /// Liquidated accounts (empty = no filter), case-insensitive.
    pub liquidated_users: Vec<String>,
}

/// Which fills a subscription wants besides its coin scope. Addresses are
/// stored lowercased.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// One fills-family subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillsSubscription {
    coins: BTreeSet<String>,
    filter: FillsFilter,
    sequence: u64,
}

impl FillsSubscription {
    /// Subscribes with an explicit filter and coin scope.
    pub fn new(filter: FillsFilter, coins: &[String]) -> Self {
        Self {
            coins: coins.iter().cloned().collect(),
            filter,
            sequence: 0,
        }
    }

    /// `StreamAllFills`.
    pub fn all(request: &AllFillsRequest) -> Self {
        Self::new(FillsFilter::All, &request.coins)
    }

    /// `StreamUserFills`.
    ///
    /// # Errors
    /// [`FillsError::MissingUser`] when `user` is empty.
    pub fn user(request: &UserFillsRequest) -> Result<Self, FillsError> {
        if request.user.is_empty() {
            return Err(FillsError::MissingUser);
        }
        Ok(Self::new(
            FillsFilter::User(request.user.to_ascii_lowercase()),
            &request.coins,
        ))
    }

    /// `StreamBuilderFills`.
    ///
    /// # Errors
    /// [`FillsError::MissingBuilder`] when `builder` is empty.
    pub fn builder(request: &BuilderFillsRequest) -> Result<Self, FillsError> {
        if request.builder.is_empty() {
            return Err(FillsError::MissingBuilder);
        }
        Ok(Self::new(
            FillsFilter::Builder(request.builder.to_ascii_lowercase()),
            &request.coins,
        ))
    }

    /// The subscription a command line's selectors name: builder fills when
    /// a builder is given, else user fills for exactly one user, else all
    /// fills; always within `coins`.
    ///
    /// # Errors
    /// [`FillsError::UserCount`] for more than one user, or the errors of
    /// [`FillsSubscription::user`] and [`FillsSubscription::builder`].
    pub fn from_selectors(
        users: &[String],
        builder: Option<&str>,
        coins: &[String],
    ) -> Result<Self, FillsError> {
        let coins = coins.to_vec();
        if let Some(builder) = builder {
            return Self::builder(&BuilderFillsRequest {
                builder: builder.to_owned(),
                coins,
            });
        }
        match users {
            [] => Ok(Self::all(&AllFillsRequest { coins })),
            [user] => Self::user(&UserFillsRequest {
                user: user.clone(),
                coins,
            }),
            _ => Err(FillsError::UserCount { count: users.len() }),
        }
    }

    /// `StreamLiquidationFills`.
    pub fn liquidations(request: &LiquidationFillsRequest) -> Self {
        Self::new(
            FillsFilter::Liquidations(
                request
                    .liquidated_users
                    .iter()
                    .map(|u| u.to_ascii_lowercase())
                    .collect(),
            ),
            &request.coins,
        )
    }

    /// The filter.
    pub fn filter(&self) -> &FillsFilter {
        &self.filter
    }

    /// The sequence of the last frame sent (0 before the first).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether `fill` belongs to this subscription.
    pub fn matches(&self, fill: &Fill) -> bool {
        (self.coins.is_empty() || self.coins.contains(&fill.coin)) && self.filter.matches(fill)
    }

    /// The frame of the last folded block, if any fill matched.
    pub fn on_block(&mut self, view: &FillsView) -> Option<FillsUpdate> {
        let fills: Vec<Fill> = view
            .fills()
            .iter()
            .filter(|fill| self.matches(fill))
            .cloned()
            .collect();
        if fills.is_empty() {
            return None;
        }
        self.sequence += 1;
        let (block_number, time) = view.position();
        Some(FillsUpdate {
            time,
            block_number,
            fills,
            sequence: self.sequence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode_fill;

    const LIQUIDATION: &str = r#"["0xAbC0000000000000000000000000000000000001",{"coin":"ETH","px":"3000.5","sz":"0.10","side":"A","time":5,"startPosition":"0.10","dir":"Close Long","closedPnl":"-1.0","hash":"0x01","oid":3,"crossed":true,"fee":"0.01","tid":4,"feeToken":"USDC","twapId":null,"liquidation":{"liquidatedUser":"0xDEAD000000000000000000000000000000000002","markPx":"3000.0","method":"market"},"priorityGas":"0.5"}]"#;

    #[test]
    fn maps_every_field_and_omits_absent_ones() {
        let event = decode_fill(LIQUIDATION.as_bytes()).unwrap();
        let json = serde_json::to_string(&Fill::of(&event)).unwrap();
        assert_eq!(
            json,
            r#"{"user":"0xAbC0000000000000000000000000000000000001","coin":"ETH","px":"3000.5","sz":"0.10","side":"A","time":5,"start_position":"0.10","dir":"Close Long","closed_pnl":"-1.0","hash":"0x01","oid":3,"crossed":true,"fee":"0.01","tid":4,"fee_token":"USDC","priority_gas":"0.5","liquidation":{"liquidated_user":"0xDEAD000000000000000000000000000000000002","mark_px":"3000.0","method":"market"}}"#
        );
    }

    #[test]
    fn liquidated_user_filter_is_case_insensitive() {
        let event = decode_fill(LIQUIDATION.as_bytes()).unwrap();
        let fill = Fill::of(&event);
        let wanted = LiquidationFillsRequest {
            coins: vec![],
            liquidated_users: vec!["0xdead000000000000000000000000000000000002".into()],
        };
        let other = LiquidationFillsRequest {
            coins: vec![],
            liquidated_users: vec!["0xbeef".into()],
        };
        assert!(FillsSubscription::liquidations(&wanted).matches(&fill));
        assert!(!FillsSubscription::liquidations(&other).matches(&fill));
        assert!(
            FillsSubscription::liquidations(&LiquidationFillsRequest::default()).matches(&fill)
        );
    }

    #[test]
    fn command_line_selectors_pick_the_stream() {
        let coins = vec!["ETH".to_owned()];
        let users = vec!["0xAA".to_owned()];
        let builder = FillsSubscription::from_selectors(&users, Some("0xBB"), &coins).unwrap();
        assert_eq!(builder.filter(), &FillsFilter::Builder("0xbb".into()));
        let user = FillsSubscription::from_selectors(&users, None, &coins).unwrap();
        assert_eq!(user.filter(), &FillsFilter::User("0xaa".into()));
        let all = FillsSubscription::from_selectors(&[], None, &[]).unwrap();
        assert_eq!(all.filter(), &FillsFilter::All);
        let two = vec!["0xaa".to_owned(), "0xcc".to_owned()];
        assert_eq!(
            FillsSubscription::from_selectors(&two, None, &coins),
            Err(FillsError::UserCount { count: 2 })
        );
    }

    #[test]
    fn empty_user_or_builder_is_refused() {
        assert_eq!(
            FillsSubscription::user(&UserFillsRequest::default()),
            Err(FillsError::MissingUser)
        );
        assert_eq!(
            FillsSubscription::builder(&BuilderFillsRequest::default()),
            Err(FillsError::MissingBuilder)
        );
    }
}
