//! Exact L2 aggregation of an L4 book: levels of `(px, total sz, order
//! count)`, optionally bucketed to `n_sig_figs` significant figures (and a
//! `mantissa` of 2 or 5 at five figures), without floats.
//!
//! Bucketing counts significant figures on the full price: with `e` the
//! exponent of the price's leading digit, the bucket width is
//! `mantissa · 10^(e − n_sig_figs + 1)`. Bids round **down** and asks round
//! **up** to a multiple of it, so an aggregated level never shows a better
//! price than some order in it; adjacent levels landing in the same bucket
//! are merged (`sz` summed, `n` counted).

use serde::Serialize;
use thiserror::Error;

use crate::book::l4::{L4Book, Level};
use crate::event::Side;
use crate::num::{Decimal, MAX_SCALE, Px, Sz, pow10};

/// Default number of levels per side.
pub const DEFAULT_N_LEVELS: u32 = 20;

/// L2 parameters that are not valid, or a level that cannot be summed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum L2Error {
    /// `n_sig_figs` outside 2..=5.
    #[error("l2: n_sig_figs must be 2 to 5, got {0}")]
    SigFigs(u32),
    /// `mantissa` other than 1, 2, 5, or given without `n_sig_figs` 5.
    #[error("l2: mantissa {mantissa} needs n_sig_figs 5 and must be 1, 2 or 5")]
    Mantissa {
        /// The mantissa asked for.
        mantissa: u64,
    },
    /// A level's total size does not fit the exact representation.
    #[error("l2: size overflow at {px} for {coin}")]
    SizeOverflow {
        /// Market.
        coin: String,
        /// Level price.
        px: String,
    },
}

/// Which L2 view of a book: depth and price aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct L2Params {
    /// Levels per side; 0 = full depth.
    pub n_levels: u32,
    /// Significant figures of the bucketed price; `None` = exact prices.
    pub n_sig_figs: Option<u32>,
    /// Bucket mantissa (1, 2 or 5; only with five significant figures).
    pub mantissa: Option<u64>,
}

impl Default for L2Params {
    fn default() -> Self {
        Self {
            n_levels: DEFAULT_N_LEVELS,
            n_sig_figs: None,
            mantissa: None,
        }
    }
}

impl L2Params {
    /// Validated parameters; `n_levels` omitted means 20, `Some(0)` full depth.
    ///
    /// # Errors
    /// [`L2Error::SigFigs`] or [`L2Error::Mantissa`] for values outside the
    /// contract.
    pub fn new(
        n_levels: Option<u32>,
        n_sig_figs: Option<u32>,
        mantissa: Option<u64>,
    ) -> Result<Self, L2Error> {
        if let Some(figs) = n_sig_figs
            && !(2..=5).contains(&figs)
        {
            return Err(L2Error::SigFigs(figs));
        }
        if let Some(m) = mantissa
            && (n_sig_figs != Some(5) || !matches!(m, 1 | 2 | 5))
        {
            return Err(L2Error::Mantissa { mantissa: m });
        }
        Ok(Self {
            n_levels: n_levels.unwrap_or(DEFAULT_N_LEVELS),
            n_sig_figs,
            mantissa,
        })
    }
}

/// One aggregated level, shaped like the `L2Level` message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct L2Level {
    /// Level (or bucket) price.
    pub px: Px,
    /// Total resting size.
    pub sz: Sz,
    /// Number of resting orders.
    pub n: u32,
}

impl L2Level {
    /// The same level at the same price with no size: the removal marker of
    /// L2 diffs (`sz:"0.0"`, `n:0`).
    #[must_use]
    pub fn removed(self) -> Self {
        Self {
            px: self.px,
            sz: Sz::ZERO,
            n: 0,
        }
    }

    /// Byte-level equality: same printed price, size and count. Value
    /// equality would call `"1.0"` and `"1"` equal, yet they print apart.
    pub fn same_print(&self, other: &Self) -> bool {
        self.n == other.n
            && self.px == other.px
            && self.px.scale() == other.px.scale()
            && self.sz == other.sz
            && self.sz.scale() == other.sz.scale()
    }
}

/// Both sides of an aggregated book, best levels first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct L2Book {
    /// Bids, highest first.
    pub bids: Vec<L2Level>,
    /// Asks, lowest first.
    pub asks: Vec<L2Level>,
}

impl L2Book {
    /// One side's levels.
    pub fn side(&self, side: Side) -> &[L2Level] {
        match side {
            Side::Bid => &self.bids,
            Side::Ask => &self.asks,
        }
    }

    /// Whether both printed books are identical.
    pub fn same_print(&self, other: &Self) -> bool {
        fn same(a: &[L2Level], b: &[L2Level]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_print(y))
        }
        same(&self.bids, &other.bids) && same(&self.asks, &other.asks)
    }
}

/// The bucket price of `px` on `side`: bids rounded down, asks up, to a
/// multiple of `mantissa · 10^(e − n_sig_figs + 1)`; canonically printed.
/// `None` when the exact result does not fit (prices beyond 18 decimals).
pub fn bucket(px: Px, side: Side, n_sig_figs: u32, mantissa: u64) -> Option<Px> {
    let units = px.units();
    if units <= 0 {
        return Some(px);
    }
    let digits = units.ilog10() + 1;
    let mantissa = i128::from(mantissa);
    let (units, scale, width) = if digits >= n_sig_figs {
        let exp = u8::try_from(digits - n_sig_figs).ok()?;
        (
            i128::from(units),
            px.scale(),
            mantissa * i128::from(pow10(exp)),
        )
    } else {
        let up = u8::try_from(n_sig_figs - digits).ok()?;
        let scale = px.scale().checked_add(up)?;
        if scale > MAX_SCALE {
            return None;
        }
        (i128::from(units) * i128::from(pow10(up)), scale, mantissa)
    };
    let floor = units - units.rem_euclid(width);
    let rounded = match side {
        Side::Bid => floor,
        Side::Ask if floor == units => units,
        Side::Ask => floor + width,
    };
    Decimal::new(i64::try_from(rounded).ok()?, scale)
        .ok()
        .map(Decimal::canonical)
}

/// Aggregates one side of `book` under `params`, best first.
///
/// # Errors
/// [`L2Error::SizeOverflow`] when a level's total size does not fit.
pub fn aggregate_side(
    coin: &str,
    book: &L4Book,
    side: Side,
    params: &L2Params,
) -> Result<Vec<L2Level>, L2Error> {
    let limit = if params.n_levels == 0 {
        usize::MAX
    } else {
        params.n_levels as usize
    };
    let mut out: Vec<L2Level> = Vec::new();
    for level in book.side(side) {
        let exact = level_of(coin, level)?;
        let px = match params.n_sig_figs {
            Some(figs) => {
                bucket(exact.px, side, figs, params.mantissa.unwrap_or(1)).unwrap_or(exact.px)
            }
            None => exact.px,
        };
        if let Some(last) = out.last_mut()
            && last.px == px
        {
            last.sz = last
                .sz
                .checked_add(exact.sz)
                .ok_or_else(|| overflow(coin, px))?;
            last.n = last.n.saturating_add(exact.n);
            continue;
        }
        if out.len() == limit {
            break;
        }
        out.push(L2Level { px, ..exact });
    }
    Ok(out)
}

/// Aggregates both sides of `book` under `params`.
///
/// # Errors
/// [`L2Error::SizeOverflow`] when a level's total size does not fit.
pub fn aggregate(coin: &str, book: &L4Book, params: &L2Params) -> Result<L2Book, L2Error> {
    Ok(L2Book {
        bids: aggregate_side(coin, book, Side::Bid, params)?,
        asks: aggregate_side(coin, book, Side::Ask, params)?,
    })
}

/// The exact (unbucketed) level: its price, total size and order count.
///
/// # Errors
/// [`L2Error::SizeOverflow`] when the total size does not fit.
pub fn level_of(coin: &str, level: Level<'_>) -> Result<L2Level, L2Error> {
    Ok(L2Level {
        px: level.px(),
        sz: level.total_sz().ok_or_else(|| overflow(coin, level.px()))?,
        n: u32::try_from(level.len()).unwrap_or(u32::MAX),
    })
}

fn overflow(coin: &str, px: Px) -> L2Error {
    L2Error::SizeOverflow {
        coin: coin.to_owned(),
        px: px.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::l4::RestingOrder;
    use rstest::rstest;

    fn d(text: &str) -> Decimal {
        Decimal::parse(text).unwrap()
    }

    #[rstest]
    #[case::btc_five_figs_bid("81307.0", Side::Bid, 5, 1, "81307.0")]
    #[case::btc_four_figs_bid("81307.0", Side::Bid, 4, 1, "81300.0")]
    #[case::btc_four_figs_ask("81307.0", Side::Ask, 4, 1, "81310.0")]
    #[case::btc_mantissa_two("81307.0", Side::Ask, 5, 2, "81308.0")]
    #[case::btc_mantissa_five_bid("81307.0", Side::Bid, 5, 5, "81305.0")]
    #[case::big_price_tens("106217.0", Side::Bid, 5, 1, "106210.0")]
    #[case::two_figs_bid("34.01", Side::Bid, 2, 1, "34.0")]
    #[case::two_figs_ask_exact("35", Side::Ask, 2, 1, "35.0")]
    #[case::two_figs_ask_up("35.1", Side::Ask, 2, 1, "36.0")]
    #[case::finer_than_input("0.5", Side::Ask, 5, 2, "0.5")]
    #[case::small_price("0.0012345", Side::Bid, 3, 1, "0.00123")]
    #[case::small_price_ask("0.0012345", Side::Ask, 3, 1, "0.00124")]
    #[case::carry_to_next_decade("99.95", Side::Ask, 3, 1, "100.0")]
    fn buckets_exactly(
        #[case] px: &str,
        #[case] side: Side,
        #[case] figs: u32,
        #[case] mantissa: u64,
        #[case] want: &str,
    ) {
        assert_eq!(
            bucket(d(px), side, figs, mantissa).unwrap().to_string(),
            want
        );
    }

    #[rstest]
    #[case::one_fig(None, Some(1), None, L2Error::SigFigs(1))]
    #[case::six_figs(None, Some(6), None, L2Error::SigFigs(6))]
    #[case::mantissa_without_five(None, Some(4), Some(2), L2Error::Mantissa { mantissa: 2 })]
    #[case::mantissa_three(None, Some(5), Some(3), L2Error::Mantissa { mantissa: 3 })]
    #[case::mantissa_alone(None, None, Some(5), L2Error::Mantissa { mantissa: 5 })]
    fn rejects_parameters_outside_the_contract(
        #[case] n_levels: Option<u32>,
        #[case] figs: Option<u32>,
        #[case] mantissa: Option<u64>,
        #[case] want: L2Error,
    ) {
        assert_eq!(L2Params::new(n_levels, figs, mantissa), Err(want));
    }

    #[test]
    fn omitted_levels_mean_twenty() {
        assert_eq!(L2Params::new(None, Some(5), Some(1)).unwrap().n_levels, 20);
        assert_eq!(L2Params::new(Some(0), None, None).unwrap().n_levels, 0);
    }

    /// The peer's documented case: bids 34.6/34.5/34.01 and asks 35/35.1/35.5
    /// at two significant figures.
    #[test]
    fn merges_adjacent_levels_into_buckets() {
        let mut book = L4Book::new();
        let mut oid = 0;
        for (side, price, sz, count) in [
            (Side::Bid, "34.6", "100", 3),
            (Side::Bid, "34.5", "500", 2),
            (Side::Bid, "34.01", "500", 2),
            (Side::Ask, "35", "10", 1),
            (Side::Ask, "35.1", "10", 1),
            (Side::Ask, "35.5", "10", 1),
        ] {
            for _ in 0..count {
                oid += 1;
                let each = d(sz);
                book.insert(RestingOrder::bare("0x1", oid, side, d(price), each, 0));
            }
        }
        let params = L2Params::new(Some(0), Some(2), None).unwrap();
        let l2 = aggregate("X", &book, &params).unwrap();
        let show = |levels: &[L2Level]| {
            levels
                .iter()
                .map(|l| format!("{}/{}/{}", l.px, l.sz, l.n))
                .collect::<Vec<_>>()
        };
        assert_eq!(show(&l2.bids), ["34.0/2300.0/7"]);
        assert_eq!(show(&l2.asks), ["35.0/10.0/1", "36.0/20.0/2"]);
        let one = L2Params::new(Some(1), Some(2), None).unwrap();
        assert_eq!(
            show(&aggregate("X", &book, &one).unwrap().asks),
            ["35.0/10.0/1"]
        );
    }
}
