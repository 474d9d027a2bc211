//! Perp positions per (user, coin), tracked from fills, and the market
//! families that decide which coins have positions at all.
//!
//! A fill carries the account's position before it (`startPosition`) and
//! its own signed size (`sz`, positive on the bid side, negative on the ask
//! side), so the position after a fill is `startPosition ± sz`. The tracker
//! takes `startPosition` as the truth: when it differs from the tracked
//! value (fills were missed, or tracking started mid-stream) the fill's
//! value wins and a [`PositionIssue::StartMismatch`] is reported, never an
//! error that stops the fold. When fills arrive in order and nothing is
//! missed, the tracked position equals the sum of the signed fills.
//!
//! Only perps have positions: main-dex perps (`BTC`) and builder-deployed
//! perps (`dex:ASSET`). Spot fills (`@N`, `PURR/USDC`) carry token
//! balances, not positions, and outcome markets (`#N`) trade
//! fully-collateralised outcome tokens; neither is tracked. Flat positions
//! are dropped, so memory follows open positions, not every account ever
//! seen.

use std::collections::HashMap;
use std::hash::BuildHasher as _;

use thiserror::Error;

use crate::block::DecodedBlock;
use crate::coin::is_perp;
use crate::event::{FillEvent, Side};
use crate::num::Decimal;
use crate::text::{Address, Short, prefixed_hex_bytes, write_prefixed_hex};

/// A fill the tracker could not take at face value (never fatal).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PositionIssue {
    /// The fill's `startPosition` differs from the tracked position; the
    /// fill's value was taken.
    #[error(
        "positions: {user} {coin} was {tracked} but the fill of oid {oid} at block {block} starts at {start}"
    )]
    StartMismatch {
        /// Account.
        user: String,
        /// Market.
        coin: String,
        /// Order id of the fill.
        oid: u64,
        /// Block number.
        block: u64,
        /// What the tracker held.
        tracked: Decimal,
        /// The fill's `startPosition`.
        start: Decimal,
    },
    /// `startPosition ± sz` does not fit; the position was left unchanged.
    #[error("positions: {user} {coin} overflows on the fill of oid {oid} at block {block}")]
    Overflow {
        /// Account.
        user: String,
        /// Market.
        coin: String,
        /// Order id of the fill.
        oid: u64,
        /// Block number.
        block: u64,
    },
}

/// A position that a fill moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionChange {
    /// Account, lowercased.
    pub user: String,
    /// Market.
    pub coin: String,
    /// Signed position after the fill (`0.0` when flat).
    pub position: Decimal,
}

/// Signed perp positions keyed by (lowercased user, coin).
///
/// Mainnet has hundreds of thousands of open positions, and the table
/// grows with the accounts that trade, so an entry is kept small: the
/// account as its number in a table of the accounts with open positions
/// (the usual `0x` and 40 hex digits, kept once as 20 bytes), the coin as
/// its number in a table of the coins seen, and the position packed into 8
/// bytes — 16 bytes an entry, where the account's bytes and a decimal took
/// 40 and an address and a coin name inline 88. A position too large for
/// the packed form (none on mainnet) is kept whole in a table of its own,
/// as is an account written any other way (none on mainnet either).
#[derive(Debug, Clone, Default)]
pub struct Positions {
    /// Accounts in the usual form with open positions, numbered.
    accounts: Accounts,
    /// Positions of accounts in the usual form, packed.
    usual: Shards,
    /// Positions of accounts in the usual form that do not pack, by the
    /// same keys (a key is in one table or the other).
    wide: HashMap<Packed, Decimal, foldhash::fast::RandomState>,
    /// Positions of accounts not in the usual form, by (lowercased user,
    /// coin).
    others: HashMap<(Address, Short), Decimal, foldhash::fast::RandomState>,
    /// The coins seen, by number, and their numbers.
    coins: Vec<Short>,
    coin_numbers: HashMap<Short, u32, foldhash::fast::RandomState>,
    mismatches: u64,
}

/// The accounts in the usual form that hold open positions, each with a
/// number for the position table's keys. A number whose account closed its
/// last position is given to the next new account, so the table follows
/// the accounts with positions, not every account ever seen.
#[derive(Debug, Clone, Default)]
struct Accounts {
    /// By number (a free number's entry is stale).
    slots: Vec<Account>,
    /// The numbers in use, found by their account's bytes.
    index: hashbrown::HashTable<u32>,
    /// Numbers free for reuse.
    free: Vec<u32>,
    hasher: foldhash::fast::RandomState,
}

#[derive(Debug, Clone, Copy)]
struct Account {
    bytes: [u8; 20],
    /// Its open positions.
    open: u32,
}

impl Accounts {
    fn number(&self, bytes: &[u8; 20]) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(self.hasher.hash_one(bytes), |&n| {
                slots[n as usize].bytes == *bytes
            })
            .copied()
    }

    /// A number for an account that has none.
    fn add(&mut self, bytes: [u8; 20]) -> u32 {
        let account = Account { bytes, open: 0 };
        let number = if let Some(number) = self.free.pop() {
            self.slots[number as usize] = account;
            number
        } else {
            // Fewer accounts than `u32::MAX` fit in memory.
            let number = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
            self.slots.push(account);
            number
        };
        let Self {
            slots,
            index,
            hasher,
            ..
        } = self;
        index.insert_unique(hasher.hash_one(bytes), number, |&n| {
            hasher.hash_one(slots[n as usize].bytes)
        });
        number
    }

    fn bytes(&self, number: u32) -> &[u8; 20] {
        &self.slots[number as usize].bytes
    }

    /// Account `number` opened a position.
    fn opened(&mut self, number: u32) {
        self.slots[number as usize].open += 1;
    }

    /// Account `number` closed a position; its number is freed with its
    /// last.
    fn closed(&mut self, number: u32) {
        let account = &mut self.slots[number as usize];
        account.open = account.open.saturating_sub(1);
        if account.open > 0 {
            return;
        }
        let hash = self.hasher.hash_one(account.bytes);
        if let Ok(entry) = self.index.find_entry(hash, |&n| n == number) {
            entry.remove();
            self.free.push(number);
        }
    }
}

/// Tables of [`Shards`]: one grows at a time.
const SHARDS: usize = 16;

/// The positions of accounts in the usual form, in [`SHARDS`] hash tables
/// chosen by the account's number (numbers are given in turn: the shards
/// fill evenly). A hash table grows by moving into one twice its size, so
/// one table of 250,000 positions held both for a moment; here a shard
/// doubles at a time, so the moment holds a sixteenth of that more. (The
/// shards fill evenly, so together they stay about as full as one table
/// would.)
#[derive(Debug, Clone, Default)]
struct Shards {
    tables: [HashMap<Packed, i64, foldhash::fast::RandomState>; SHARDS],
}

impl Shards {
    /// The shard of `key`: by the account's number.
    fn shard(key: Packed) -> usize {
        key.account as usize % SHARDS
    }

    fn get(&self, key: Packed) -> Option<&i64> {
        self.tables[Self::shard(key)].get(&key)
    }

    fn insert(&mut self, key: Packed, position: i64) -> Option<i64> {
        self.tables[Self::shard(key)].insert(key, position)
    }

    fn remove(&mut self, key: Packed) -> Option<i64> {
        self.tables[Self::shard(key)].remove(&key)
    }

    /// Room for `entries` in all, spread evenly (a restore: its count is
    /// known).
    fn reserve(&mut self, entries: usize) {
        let each = entries.div_ceil(SHARDS);
        for table in &mut self.tables {
            table.reserve(each + each / 8);
        }
    }

    fn len(&self) -> usize {
        self.tables.iter().map(HashMap::len).sum()
    }

    fn is_empty(&self) -> bool {
        self.tables.iter().all(HashMap::is_empty)
    }

    fn iter(&self) -> impl Iterator<Item = (&Packed, &i64)> {
        self.tables.iter().flat_map(HashMap::iter)
    }
}

/// Bits of a packed position that hold its scale (at most 18).
const SCALE_BITS: u32 = 5;

/// A position in 8 bytes: its units shifted above its scale. Units beyond
/// ±2^58 do not pack (positions that large do not occur).
fn pack(position: Decimal) -> Option<i64> {
    let units = position.units();
    let limit = 1_i64 << (63 - SCALE_BITS);
    (-limit..limit)
        .contains(&units)
        .then(|| (units << SCALE_BITS) | i64::from(position.scale()))
}

fn unpack(packed: i64) -> Decimal {
    // The low bits hold a scale of at most 18: the cast keeps it whole.
    Decimal::from_parts(
        packed >> SCALE_BITS,
        (packed & ((1 << SCALE_BITS) - 1)) as u8,
    )
}

/// Where one (account, coin) position is kept (see [`Positions::slot`]).
enum Slot {
    /// An account in the usual form, its number and the coin's number if
    /// they have one.
    Usual {
        user: [u8; 20],
        account: Option<u32>,
        coin: Option<u32>,
    },
    /// Any other account, as written, and the coin.
    Other((Address, Short)),
}

/// An account's and a coin's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Packed {
    account: u32,
    coin: u32,
}

/// An open position's account, as [`Positions::sorted`] lends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum User<'a> {
    /// `0x` and these bytes in lowercase hex.
    Bytes(&'a [u8; 20]),
    /// Written otherwise (lowercased).
    Text(&'a str),
}

impl User<'_> {
    /// The account as text (`buf` holds it when it is not kept as text).
    pub(crate) fn as_str<'b>(&'b self, buf: &'b mut [u8; 42]) -> &'b str {
        match self {
            User::Text(text) => text,
            User::Bytes(bytes) => write_prefixed_hex(*bytes, buf),
        }
    }
}

/// Parts a checkpoint archives the open positions in ([`Positions::part`]):
/// the accounts in the usual form by their first hex digit, then the
/// others. A checkpoint holds one part's sorted entries and what archiving
/// them needs at a time, never all of them.
pub(crate) const POSITION_PARTS: u8 = 17;

/// The part of the accounts in other forms.
const OTHERS_PART: u8 = POSITION_PARTS - 1;

/// One part of the open positions, sorted ([`Positions::part`]).
#[derive(Debug, Clone)]
pub(crate) struct Part<'a>(Sorted<'a>);

#[derive(Debug, Clone)]
enum Sorted<'a> {
    /// Accounts in the usual form, with sort keys (the account's first
    /// eight bytes).
    Usual {
        positions: &'a Positions,
        entries: Vec<(u64, Packed, Decimal)>,
    },
    /// Accounts in other forms.
    Others(Vec<(&'a (Address, Short), &'a Decimal)>),
}

impl<'a> Part<'a> {
    /// `(lowercased user, coin, position)`, in order.
    pub(crate) fn iter(&self) -> PartIter<'_, 'a> {
        PartIter { part: self, at: 0 }
    }

    fn len(&self) -> usize {
        match &self.0 {
            Sorted::Usual { entries, .. } => entries.len(),
            Sorted::Others(entries) => entries.len(),
        }
    }
}

/// The iterator of [`Part::iter`].
#[derive(Debug, Clone)]
pub(crate) struct PartIter<'p, 'a> {
    part: &'p Part<'a>,
    at: usize,
}

impl<'a> Iterator for PartIter<'_, 'a> {
    type Item = (User<'a>, &'a str, Decimal);

    fn next(&mut self) -> Option<Self::Item> {
        let item = match &self.part.0 {
            Sorted::Usual { positions, entries } => {
                let (_, key, position) = entries.get(self.at)?;
                (
                    User::Bytes(positions.accounts.bytes(key.account)),
                    positions.coin(key.coin),
                    *position,
                )
            }
            Sorted::Others(entries) => {
                let ((user, coin), position) = entries.get(self.at)?;
                (User::Text(user.as_str()), coin.as_str(), **position)
            }
        };
        self.at += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.part.len() - self.at;
        (left, Some(left))
    }
}

impl ExactSizeIterator for PartIter<'_, '_> {}

impl Positions {
    /// No positions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Positions as a checkpoint left them, before its `entries` (see
    /// [`Positions::restore`]): the mismatch count, and a table made for
    /// that many entries at once (growing it entry by entry would hold the
    /// old table beside the new one at each doubling).
    pub(crate) fn restoring(mismatches: u64, entries: usize) -> Self {
        let mut usual = Shards::default();
        usual.reserve(entries);
        Self {
            usual,
            mismatches,
            ..Self::default()
        }
    }

    /// One entry of a checkpoint: `user` lowercased (a flat position is
    /// dropped). Taken as borrowed text, so a restart copies no position's
    /// texts beside the table it fills.
    pub(crate) fn restore(&mut self, lowercased_user: &str, coin: &str, position: Decimal) {
        let slot = self.slot(lowercased_user, coin);
        self.set(slot, coin, position);
    }

    /// The number of open positions in each part ([`POSITION_PARTS`]).
    pub(crate) fn part_lens(&self) -> [usize; POSITION_PARTS as usize] {
        let mut lens = [0; POSITION_PARTS as usize];
        for key in self
            .usual
            .iter()
            .map(|(key, _)| key)
            .chain(self.wide.keys())
        {
            lens[usize::from(self.accounts.bytes(key.account)[0] >> 4)] += 1;
        }
        lens[usize::from(OTHERS_PART)] = self.others.len();
        lens
    }

    /// Part `part` of the open positions, in the order of their texts, user
    /// then coin: the table is a hash map, and a checkpoint archives them
    /// in this order so that the same state gives the same bytes. Parts
    /// `0..16` are the accounts in the usual form whose first hex digit is
    /// the part's number, sorted as copies of their keys with a sort key
    /// and the position (32 bytes a position, a sixteenth of them at a
    /// time); the last is the accounts in other forms (none on mainnet).
    pub(crate) fn part(&self, part: u8) -> Part<'_> {
        if part == OTHERS_PART {
            let mut others: Vec<(&(Address, Short), &Decimal)> = self.others.iter().collect();
            others.sort_unstable_by(|a, b| {
                (a.0.0.as_str(), a.0.1.as_str()).cmp(&(b.0.0.as_str(), b.0.1.as_str()))
            });
            return Part(Sorted::Others(others));
        }
        let packed = self
            .usual
            .iter()
            .map(|(key, position)| (*key, unpack(*position)));
        let wide = self.wide.iter().map(|(key, position)| (*key, *position));
        let mut entries: Vec<(u64, Packed, Decimal)> = packed
            .chain(wide)
            .filter(|(key, _)| self.accounts.bytes(key.account)[0] >> 4 == part)
            .map(|(key, position)| {
                let mut first = [0u8; 8];
                first.copy_from_slice(&self.accounts.bytes(key.account)[..8]);
                (u64::from_be_bytes(first), key, position)
            })
            .collect();
        // By the first eight bytes and, where those are equal, by the
        // entries themselves (lowercase hex keeps the bytes' order):
        // comparing through the numbers alone would read the accounts'
        // table at random, a cache miss each.
        let full = |key: &Packed| (self.accounts.bytes(key.account), self.coin(key.coin));
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| full(&a.1).cmp(&full(&b.1))));
        Part(Sorted::Usual {
            positions: self,
            entries,
        })
    }

    /// Every open position, part by part ([`Positions::part`]).
    #[cfg(test)]
    fn listed(&self) -> Vec<(String, String, Decimal)> {
        (0..POSITION_PARTS)
            .flat_map(|part| {
                let part = self.part(part);
                part.iter()
                    .map(|(user, coin, position)| {
                        (
                            user.as_str(&mut [0; 42]).to_owned(),
                            coin.to_owned(),
                            position,
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The name of coin number `number`.
    fn coin(&self, number: u32) -> &str {
        self.coins.get(number as usize).map_or("", Short::as_str)
    }

    /// Where the position of a lowercased user in `coin` is kept: the
    /// account read once for both a lookup and the update after it.
    fn slot(&self, lowercased_user: &str, coin: &str) -> Slot {
        match prefixed_hex_bytes::<20>(lowercased_user) {
            Some(user) => Slot::Usual {
                user,
                account: self.accounts.number(&user),
                coin: self.coin_numbers.get(coin).copied(),
            },
            None => Slot::Other((Address::new(lowercased_user), Short::new(coin))),
        }
    }

    /// The position kept at `slot`; flat when none is.
    fn get(&self, slot: &Slot) -> Decimal {
        match slot {
            Slot::Usual {
                account: Some(account),
                coin: Some(coin),
                ..
            } => {
                let key = Packed {
                    account: *account,
                    coin: *coin,
                };
                match self.usual.get(key) {
                    Some(packed) => unpack(*packed),
                    None => self.wide.get(&key).copied().unwrap_or(Decimal::ZERO),
                }
            }
            Slot::Usual { .. } => Decimal::ZERO,
            Slot::Other(key) => self.others.get(key).copied().unwrap_or(Decimal::ZERO),
        }
    }

    /// Sets the position at `slot` (of `coin`; flat: removed).
    fn set(&mut self, slot: Slot, coin: &str, position: Decimal) {
        let (user, account, number) = match slot {
            Slot::Other(key) => {
                if position.is_zero() {
                    self.others.remove(&key);
                } else {
                    self.others.insert(key, position);
                }
                return;
            }
            Slot::Usual {
                user,
                account,
                coin,
            } => (user, account, coin),
        };
        if position.is_zero() {
            if let (Some(account), Some(coin)) = (account, number) {
                let key = Packed { account, coin };
                let held = self.usual.remove(key).is_some()
                    || (!self.wide.is_empty() && self.wide.remove(&key).is_some());
                if held {
                    self.accounts.closed(account);
                }
            }
            return;
        }
        let account = account.unwrap_or_else(|| self.accounts.add(user));
        let coin = number.unwrap_or_else(|| {
            // Fewer coins than `u32::MAX` exist.
            let number = u32::try_from(self.coins.len()).unwrap_or(u32::MAX);
            self.coins.push(Short::new(coin));
            self.coin_numbers.insert(Short::new(coin), number);
            number
        });
        let key = Packed { account, coin };
        let new = if let Some(packed) = pack(position) {
            let before = self.usual.insert(key, packed);
            let was_wide = !self.wide.is_empty() && self.wide.remove(&key).is_some();
            before.is_none() && !was_wide
        } else {
            let before = self.wide.insert(key, position);
            let was_packed = self.usual.remove(key).is_some();
            before.is_none() && !was_packed
        };
        if new {
            self.accounts.opened(account);
        }
    }

    /// Folds one perp fill. Returns the new position, or `None` for spot
    /// and outcome fills (which are not tracked).
    ///
    /// # Errors
    /// [`PositionIssue::StartMismatch`] after taking the fill's
    /// `startPosition` (the change is still applied), or
    /// [`PositionIssue::Overflow`] (nothing changed). Both are reports,
    /// never reasons to stop folding.
    pub fn apply_fill(
        &mut self,
        block: u64,
        event: &FillEvent<'_>,
    ) -> Result<Option<PositionChange>, PositionIssue> {
        let fill = event.fill();
        if !is_perp(fill.coin) {
            return Ok(None);
        }
        let user = event.user().to_ascii_lowercase();
        let signed = match fill.side {
            Side::Bid => fill.sz,
            Side::Ask => -fill.sz,
        };
        let Some(after) = fill.start_position.checked_add(signed) else {
            return Err(PositionIssue::Overflow {
                user,
                coin: fill.coin.to_owned(),
                oid: fill.oid,
                block,
            });
        };
        let slot = self.slot(&user, fill.coin);
        let tracked = self.get(&slot);
        let mismatch = (tracked != fill.start_position).then(|| PositionIssue::StartMismatch {
            user: user.clone(),
            coin: fill.coin.to_owned(),
            oid: fill.oid,
            block,
            tracked,
            start: fill.start_position,
        });
        self.set(slot, fill.coin, after);
        let change = PositionChange {
            user,
            coin: fill.coin.to_owned(),
            position: after,
        };
        match mismatch {
            Some(issue) => {
                self.mismatches += 1;
                Err(issue)
            }
            None => Ok(Some(change)),
        }
    }

    /// Folds every fill of a block in file order; returns the positions
    /// that moved (last value per (user, coin), in first-touch order) and
    /// the issues met.
    pub fn apply(&mut self, block: &DecodedBlock<'_>) -> (Vec<PositionChange>, Vec<PositionIssue>) {
        self.apply_fills(block.number, block.fills.iter().map(|s| &s.event))
    }

    /// [`Positions::apply`] over fills given directly.
    pub fn apply_fills<'e, 'a: 'e>(
        &mut self,
        block: u64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
    ) -> (Vec<PositionChange>, Vec<PositionIssue>) {
        let mut changes: Vec<PositionChange> = Vec::new();
        let mut issues = Vec::new();
        for event in fills {
            let change = match self.apply_fill(block, event) {
                Ok(Some(change)) => change,
                Ok(None) => continue,
                Err(issue) => {
                    let moved = match &issue {
                        PositionIssue::StartMismatch { user, coin, .. } => Some(PositionChange {
                            user: user.clone(),
                            coin: coin.clone(),
                            position: self.position(user, coin),
                        }),
                        PositionIssue::Overflow { .. } => None,
                    };
                    issues.push(issue);
                    match moved {
                        Some(change) => change,
                        None => continue,
                    }
                }
            };
            match changes
                .iter_mut()
                .find(|c| c.user == change.user && c.coin == change.coin)
            {
                Some(existing) => existing.position = change.position,
                None => changes.push(change),
            }
        }
        (changes, issues)
    }

    /// The signed position of `user` (any case) in `coin`; `0.0` when flat
    /// or never seen.
    pub fn position(&self, user: &str, coin: &str) -> Decimal {
        self.get(&self.slot(&user.to_ascii_lowercase(), coin))
    }

    /// Open (non-flat) positions.
    pub fn len(&self) -> usize {
        self.usual.len() + self.wide.len() + self.others.len()
    }

    /// Whether no position is open.
    pub fn is_empty(&self) -> bool {
        self.usual.is_empty() && self.wide.is_empty() && self.others.is_empty()
    }

    /// Fills whose `startPosition` disagreed with the tracker so far.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode_fill;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn fill_text(user: &str, coin: &str, side: Side, sz: &str, start: &str) -> String {
        format!(
            r#"["{user}",{{"coin":"{coin}","px":"1.0","sz":"{sz}","side":"{}","time":1,"startPosition":"{start}","dir":"Open Long","closedPnl":"0.0","hash":"0x0","oid":9,"crossed":true,"fee":"0.0","tid":1,"feeToken":"USDC","twapId":null}}]"#,
            side.as_str()
        )
    }

    #[test]
    fn an_entry_of_the_usual_form_is_16_bytes() {
        assert_eq!(std::mem::size_of::<(Packed, i64)>(), 16);
    }

    #[test]
    fn positions_pack_exactly_and_the_largest_are_kept_whole() {
        let limit = 1_i64 << 58;
        for (units, scale) in [
            (0, 1),
            (-1, 18),
            (15, 1),
            (limit - 1, 0),
            (-limit, 18),
            (i64::MAX, 3),
        ] {
            let position = Decimal::new(units, scale).unwrap();
            if let Some(packed) = pack(position) {
                let back = unpack(packed);
                assert_eq!((back.units(), back.scale()), (units, scale));
            }
        }
        assert!(pack(Decimal::new(limit, 0).unwrap()).is_none());
        assert!(pack(Decimal::new(-limit - 1, 0).unwrap()).is_none());
        // Kept whole beside the packed ones, found, listed in order and
        // moved between the two forms.
        let mut positions = Positions::new();
        let (a, b) = (
            "0x1000000000000000000000000000000000000001",
            "0x2000000000000000000000000000000000000002",
        );
        let huge = Decimal::new(i64::MAX, 2).unwrap();
        let small = Decimal::new(-15, 1).unwrap();
        positions.restore(b, "BTC", small);
        positions.restore(a, "BTC", huge);
        positions.restore(a, "ETH", small);
        assert_eq!(positions.len(), 3);
        assert_eq!(positions.position(a, "BTC").to_string(), huge.to_string());
        let listed: Vec<(String, String, String)> = positions
            .listed()
            .into_iter()
            .map(|(user, coin, position)| (user, coin, position.to_string()))
            .collect();
        assert_eq!(
            listed,
            [
                (a.to_owned(), "BTC".to_owned(), huge.to_string()),
                (a.to_owned(), "ETH".to_owned(), "-1.5".to_owned()),
                (b.to_owned(), "BTC".to_owned(), "-1.5".to_owned()),
            ]
        );
        positions.restore(a, "BTC", small);
        assert_eq!(positions.position(a, "BTC"), small);
        assert!(positions.wide.is_empty());
        positions.restore(a, "BTC", huge);
        assert_eq!(positions.len(), 3);
        positions.restore(a, "BTC", Decimal::ZERO);
        assert_eq!(positions.len(), 2);
        assert!(positions.wide.is_empty());
    }

    #[test]
    fn an_account_leaves_the_table_with_its_last_position_and_its_number_is_reused() {
        let mut positions = Positions::new();
        let user = |n: u64| format!("0x{n:040x}");
        let one = Decimal::new(1, 0).unwrap();
        for n in 0..100 {
            positions.restore(&user(n), "BTC", one);
            positions.restore(&user(n), "ETH", one);
        }
        assert_eq!(positions.accounts.slots.len(), 100);
        for n in 0..50 {
            positions.restore(&user(n), "BTC", Decimal::ZERO);
        }
        // Each still holds ETH.
        assert_eq!(positions.accounts.free.len(), 0);
        for n in 0..50 {
            positions.restore(&user(n), "ETH", Decimal::ZERO);
        }
        assert_eq!(positions.accounts.free.len(), 50);
        assert_eq!(positions.len(), 100);
        // New accounts take the freed numbers; the others are untouched.
        for n in 1_000..1_050 {
            positions.restore(&user(n), "SOL", one);
        }
        assert_eq!(positions.accounts.slots.len(), 100);
        assert_eq!(positions.accounts.free.len(), 0);
        for n in 0..50 {
            assert!(positions.position(&user(n), "ETH").is_zero());
            assert_eq!(positions.position(&user(n + 50), "ETH"), one);
            assert_eq!(positions.position(&user(n + 1_000), "SOL"), one);
            assert!(positions.position(&user(n + 1_000), "ETH").is_zero());
        }
        let listed: Vec<String> = positions
            .listed()
            .into_iter()
            .map(|(user, coin, _)| format!("{user} {coin}"))
            .collect();
        let mut want: Vec<String> = (50..100)
            .flat_map(|n| [format!("{} BTC", user(n)), format!("{} ETH", user(n))])
            .chain((1_000..1_050).map(|n| format!("{} SOL", user(n))))
            .collect();
        want.sort();
        assert_eq!(listed, want);
    }

    #[test]
    fn accounts_spread_over_the_shards() {
        let mut positions = Positions::new();
        let n = 16_000u64;
        for i in 0..n {
            let user = format!("0x{:040x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            positions.restore(&user, "BTC", Decimal::new(1, 0).unwrap());
        }
        assert_eq!(positions.len(), n as usize);
        let mean = n as usize / SHARDS;
        for table in &positions.usual.tables {
            assert!(
                table.len() > mean / 2 && table.len() < mean * 2,
                "{}",
                table.len()
            );
        }
        let user = format!("0x{:040x}", 7u64.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        assert_eq!(positions.position(&user, "BTC").to_string(), "1");
        positions.restore(&user, "BTC", Decimal::ZERO);
        assert_eq!(positions.len(), n as usize - 1);
    }

    #[test]
    fn accounts_alike_in_their_first_bytes_are_listed_in_text_order() {
        let mut positions = Positions::new();
        let mut want = Vec::new();
        // Alike in their first eight bytes (the sort's key), apart later.
        for (tail, coin) in [
            (9, "ETH"),
            (3, "BTC"),
            (9, "AAVE"),
            (3, "SOL"),
            (200, "BTC"),
        ] {
            let user = format!("0x00ff00ff00ff00ff{tail:024x}");
            positions.restore(&user, coin, Decimal::new(1, 0).unwrap());
            want.push((user, coin.to_owned()));
        }
        positions.restore(
            "0x00ff00ff00ff00fe00000000000000000000ffff",
            "BTC",
            Decimal::new(1, 0).unwrap(),
        );
        want.push((
            "0x00ff00ff00ff00fe00000000000000000000ffff".to_owned(),
            "BTC".to_owned(),
        ));
        want.sort();
        let listed: Vec<(String, String)> = positions
            .listed()
            .into_iter()
            .map(|(user, coin, _)| (user, coin))
            .collect();
        assert_eq!(listed, want);
    }

    #[test]
    fn accounts_are_listed_by_first_digit_in_text_order_then_the_others() {
        let mut positions = Positions::new();
        let mut usual = Vec::new();
        // Spread over every first hex digit (every part but the last).
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for n in 0..400u64 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let user = format!("0x{:016x}{:024x}", seed ^ (n << 60), n);
            let coin = ["BTC", "ETH", "SOL"][(n % 3) as usize];
            positions.restore(&user, coin, Decimal::new(1, 0).unwrap());
            usual.push((user, coin.to_owned()));
        }
        let mut others = Vec::new();
        for user in [
            "0x7",
            "0xg0",
            "vault",
            "0xF00000000000000000000000000000000000000f",
        ] {
            let lowercased = user.to_ascii_lowercase();
            positions.restore(&lowercased, "BTC", Decimal::new(2, 0).unwrap());
            others.push((lowercased, "BTC".to_owned()));
        }
        // The uppercase one is an account of the usual form.
        usual.push(others.pop().unwrap());
        usual.sort();
        others.sort();
        let lens = positions.part_lens();
        assert_eq!(lens.iter().sum::<usize>(), positions.len());
        let mut listed = Vec::new();
        for part in 0..POSITION_PARTS {
            let part_of = positions.part(part);
            let mut iter = part_of.iter();
            // The count is exact at every step.
            assert_eq!(iter.len(), lens[usize::from(part)]);
            let mut copy = None;
            while let Some((user, coin, _)) = iter.next() {
                let user = user.as_str(&mut [0; 42]).to_owned();
                if part < OTHERS_PART {
                    assert_eq!(u8::from_str_radix(&user[2..3], 16), Ok(part));
                }
                listed.push((user, coin.to_owned()));
                if copy.is_none() {
                    copy = Some((listed.len(), iter.clone()));
                }
            }
            assert_eq!(iter.len(), 0);
            // A copy goes on the same way.
            if let Some((at, copy)) = copy {
                let rest: Vec<(String, String)> = copy
                    .map(|(user, coin, _)| (user.as_str(&mut [0; 42]).to_owned(), coin.to_owned()))
                    .collect();
                assert_eq!(rest[..], listed[at..]);
            }
        }
        assert!(lens.iter().all(|len| *len > 0), "{lens:?}");
        usual.extend(others);
        assert_eq!(listed, usual);
    }

    #[test]
    fn a_users_coins_are_listed_by_name_not_by_when_first_seen() {
        let user = "0x00ff00000000000000000000000000000000abcd";
        let mut positions = Positions::new();
        for coin in ["ETH", "BTC", "SOL", "AAVE"] {
            let text = fill_text(user, coin, Side::Bid, "1", "0");
            let _ = positions.apply_fill(1, &decode_fill(text.as_bytes()).unwrap());
        }
        let coins: Vec<String> = positions
            .listed()
            .into_iter()
            .map(|(_, coin, _)| coin)
            .collect();
        assert_eq!(coins, ["AAVE", "BTC", "ETH", "SOL"]);
    }

    #[test]
    fn accounts_in_any_form_are_kept_and_listed() {
        let hex = "0x00ff00000000000000000000000000000000abcd";
        let upper = "0x00FF00000000000000000000000000000000ABCD";
        let odd = ["0xa", "0x00ff00000000000000000000000000000000abcg", "vault"];
        let mut positions = Positions::new();
        for (at, user) in [hex].iter().chain(&odd).enumerate() {
            let text = fill_text(user, "BTC", Side::Bid, "1.5", &format!("{at}"));
            let event = decode_fill(text.as_bytes()).unwrap();
            let _ = positions.apply_fill(1, &event);
        }
        assert_eq!(positions.len(), 4);
        // Any case of the usual form finds the same account.
        assert_eq!(positions.position(upper, "BTC").to_string(), "1.5");
        assert_eq!(positions.position(odd[0], "BTC").to_string(), "2.5");
        assert_eq!(positions.position(hex, "ETH"), Decimal::ZERO);
        let texts: Vec<String> = positions
            .listed()
            .into_iter()
            .map(|(user, _, _)| user)
            .collect();
        // The usual form first, then the others in text order.
        assert_eq!(texts, [hex, odd[1], odd[0], odd[2]]);
        // A flat position leaves the table, in either form.
        for user in [hex, odd[2]] {
            let held = positions.position(user, "BTC").to_string();
            let text = fill_text(user, "BTC", Side::Ask, &held, &held);
            let event = decode_fill(text.as_bytes()).unwrap();
            assert!(
                positions
                    .apply_fill(2, &event)
                    .unwrap()
                    .unwrap()
                    .position
                    .is_zero()
            );
        }
        assert_eq!(positions.len(), 2);
        let mut restored = Positions::restoring(0, 2);
        for (user, coin, position) in positions.listed() {
            restored.restore(&user, &coin, position);
        }
        assert_eq!(restored.position(odd[0], "BTC").to_string(), "2.5");
        assert_eq!(restored.len(), 2);
    }

    #[test]
    fn a_mismatched_start_is_reported_and_taken() {
        let mut positions = Positions::new();
        let text = fill_text("0xA", "BTC", Side::Bid, "0.5", "1.0");
        let event = decode_fill(text.as_bytes()).unwrap();
        let issue = positions.apply_fill(3, &event).unwrap_err();
        assert_eq!(
            issue.to_string(),
            "positions: 0xa BTC was 0.0 but the fill of oid 9 at block 3 starts at 1.0"
        );
        assert_eq!(positions.position("0xa", "BTC").to_string(), "1.5");
        assert_eq!(positions.mismatches(), 1);
    }

    #[test]
    fn spot_and_outcome_fills_are_not_positions() {
        let mut positions = Positions::new();
        for coin in ["@107", "PURR/USDC", "#1890"] {
            let text = fill_text("0xa", coin, Side::Bid, "1.0", "0.0");
            let event = decode_fill(text.as_bytes()).unwrap();
            assert_eq!(positions.apply_fill(1, &event), Ok(None));
        }
        assert!(positions.is_empty());
    }

    proptest! {
        /// Random fills with consistent start positions: the tracker agrees
        /// with a plain sum of signed sizes per (user, coin).
        #[test]
        fn tracked_position_is_the_sum_of_signed_fills(
            steps in prop::collection::vec(
                (0usize..3, 0usize..3, any::<bool>(), 1i64..5_000_000, 0u8..6),
                1..200,
            )
        ) {
            let users = ["0xaa", "0xBB", "0xcc"];
            let coins = ["BTC", "xyz:NVDA", "ETH"];
            let mut reference: BTreeMap<(usize, usize), i128> = BTreeMap::new();
            let mut positions = Positions::new();
            for (user, coin, buy, units, scale) in steps {
                let sz = Decimal::new(units, scale).unwrap();
                // Reference positions are kept at scale 5 (every size fits it).
                let start_units = reference.get(&(user, coin)).copied().unwrap_or(0);
                let start = Decimal::new(i64::try_from(start_units).unwrap(), 5).unwrap();
                let side = if buy { Side::Bid } else { Side::Ask };
                let text = fill_text(users[user], coins[coin], side, &sz.to_string(), &start.to_string());
                let event = decode_fill(text.as_bytes()).unwrap();
                let change = positions.apply_fill(1, &event).unwrap().unwrap();
                let signed = i128::from(units) * 10_i128.pow(u32::from(5 - scale));
                let sum = start_units + if buy { signed } else { -signed };
                reference.insert((user, coin), sum);
                let expected = Decimal::new(i64::try_from(sum).unwrap(), 5).unwrap();
                prop_assert_eq!(change.position, expected);
            }
            for ((user, coin), sum) in &reference {
                let expected = Decimal::new(i64::try_from(*sum).unwrap(), 5).unwrap();
                prop_assert_eq!(positions.position(users[*user], coins[*coin]), expected);
            }
            prop_assert_eq!(positions.mismatches(), 0);
            prop_assert_eq!(positions.len(), reference.values().filter(|v| **v != 0).count());
        }
    }
}
