//! Property tests: the L4 book and its exact L2 aggregation against plain
//! reference models (a `BTreeMap` of orders, brute-force bucketing).

use std::collections::BTreeMap;

use engine::book::l2::{L2Params, aggregate};
use engine::book::{L4Book, RestingOrder};
use engine::event::Side;
use engine::num::Decimal;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    New {
        oid: u64,
        side: Side,
        ticks: i64,
        wide: bool,
        sz: i64,
    },
    Update {
        oid: u64,
        sz: i64,
    },
    Remove {
        oid: u64,
    },
}

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Bid), Just(Side::Ask)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40, side(), 1i64..30, any::<bool>(), 0i64..500)
            .prop_map(|(oid, side, ticks, wide, sz)| Op::New { oid, side, ticks, wide, sz }),
        1 => (0u64..40, 0i64..500).prop_map(|(oid, sz)| Op::Update { oid, sz }),
        2 => (0u64..40).prop_map(|oid| Op::Remove { oid }),
    ]
}

/// `ticks / 2` printed with one decimal, or the same value with three.
fn price(ticks: i64, wide: bool) -> Decimal {
    if wide {
        Decimal::new(ticks * 500, 3).unwrap()
    } else {
        Decimal::new(ticks * 5, 1).unwrap()
    }
}

/// `units / 100`, written with two to four decimals (trailing zeros vary).
fn size(units: i64) -> Decimal {
    let extra = units.rem_euclid(3) as u32;
    Decimal::new(units * 10i64.pow(extra), 2 + extra as u8).unwrap()
}

/// A size in hundredths, whatever its written scale.
fn hundredths(sz: Decimal) -> i64 {
    sz.rescale(2).unwrap().units()
}

/// oid → (side, px, sz, arrival).
type Model = BTreeMap<u64, (Side, Decimal, Decimal, u64)>;

/// The model's levels of one side, best first: (px, oids in time order).
fn model_levels(model: &Model, want: Side) -> Vec<(Decimal, Vec<u64>)> {
    let mut levels: BTreeMap<Decimal, Vec<(u64, u64)>> = BTreeMap::new();
    for (oid, (side, px, _, seq)) in model {
        if *side == want {
            levels.entry(*px).or_default().push((*seq, *oid));
        }
    }
    let mut out: Vec<(Decimal, Vec<u64>)> = levels
        .into_iter()
        .map(|(px, mut orders)| {
            orders.sort_unstable();
            (px, orders.into_iter().map(|(_, oid)| oid).collect())
        })
        .collect();
    if want == Side::Bid {
        out.reverse();
    }
    out
}

fn book_levels(book: &L4Book, side: Side) -> Vec<(Decimal, Vec<u64>)> {
    book.side(side)
        .map(|level| (level.px(), level.orders().map(|o| o.oid).collect()))
        .collect()
}

proptest! {
    #[test]
    fn l4_book_agrees_with_a_map_of_orders(ops in prop::collection::vec(op(), 1..120)) {
        let mut book = L4Book::new();
        let mut model = Model::new();
        let mut arrival = 0u64;
        for op in ops {
            match op {
                Op::New { oid, side, ticks, wide, sz } => {
                    let px = price(ticks, wide);
                    book.insert(RestingOrder::bare("0xu", oid, side, px, size(sz), 0));
                    arrival += 1;
                    model.insert(oid, (side, px, size(sz), arrival));
                }
                Op::Update { oid, sz } => {
                    let applied = book.set_sz(oid, size(sz)).is_some();
                    let entry = model.get_mut(&oid);
                    prop_assert_eq!(applied, entry.is_some());
                    if let Some(entry) = entry {
                        entry.2 = size(sz);
                    }
                }
                Op::Remove { oid } => {
                    let removed = book.remove(oid);
                    let expected = model.remove(&oid);
                    prop_assert_eq!(removed.map(|o| (o.side, o.limit_px, o.sz)),
                        expected.map(|(side, px, sz, _)| (side, px, sz)));
                }
            }
        }
        prop_assert_eq!(book.len(), model.len());
        for side in [Side::Bid, Side::Ask] {
            prop_assert_eq!(book_levels(&book, side), model_levels(&model, side));
        }
        for (oid, (side, px, sz, _)) in &model {
            let order = book.get(*oid).unwrap();
            prop_assert_eq!((order.side, order.limit_px, order.sz), (*side, *px, *sz));
        }
        // Full-depth exact L2: one level per price, sizes summed, orders counted.
        let l2 = aggregate("X", &book, &L2Params::new(Some(0), None, None).unwrap()).unwrap();
        for side in [Side::Bid, Side::Ask] {
            let expected: Vec<(Decimal, Decimal, u32)> = model_levels(&model, side)
                .into_iter()
                .map(|(px, oids)| {
                    let total: i64 = oids.iter().map(|oid| hundredths(model[oid].2)).sum();
                    (px, Decimal::new(total, 2).unwrap(), oids.len() as u32)
                })
                .collect();
            let got: Vec<(Decimal, Decimal, u32)> =
                l2.side(side).iter().map(|l| (l.px, l.sz, l.n)).collect();
            prop_assert_eq!(got, expected);
            // The level's running total prints exactly as a fresh sum does.
            for level in book.side(side) {
                let fresh = level
                    .orders()
                    .try_fold(Decimal::ZERO, |total, o| total.checked_add(o.sz))
                    .unwrap();
                prop_assert_eq!(level.total_sz().unwrap().to_string(), fresh.to_string());
            }
        }
    }
}

const REF_SCALE: u32 = 24;

/// Value of `d` in units of 10^-24.
fn fine(d: Decimal) -> i128 {
    i128::from(d.units()) * 10i128.pow(REF_SCALE - u32::from(d.scale()))
}

/// Brute force: find the leading digit's exponent by comparing with powers
/// of ten, then floor (bids) or ceil (asks) to `mantissa · 10^(e−figs+1)`.
fn reference_bucket(px: Decimal, side: Side, figs: u32, mantissa: u64) -> i128 {
    let value = fine(px);
    let mut exp: i32 = -(REF_SCALE as i32);
    while 10i128.pow((i32::try_from(REF_SCALE).unwrap() + exp + 1) as u32) <= value {
        exp += 1;
    }
    let width_exp = i32::try_from(REF_SCALE).unwrap() + exp - i32::try_from(figs).unwrap() + 1;
    let width = i128::from(mantissa) * 10i128.pow(u32::try_from(width_exp).unwrap());
    let floor = value / width * width;
    match side {
        Side::Bid => floor,
        Side::Ask if floor == value => value,
        Side::Ask => floor + width,
    }
}

fn arbitrary_order() -> impl Strategy<Value = (Side, i64, u8, i64)> {
    (side(), 1i64..10_000_000, 0u8..7, 1i64..10_000)
}

proptest! {
    #[test]
    fn l2_bucketing_agrees_with_brute_force(
        orders in prop::collection::vec(arbitrary_order(), 1..60),
        n_levels in prop_oneof![Just(0u32), 1u32..8],
    ) {
        let mut book = L4Book::new();
        for (oid, (side, units, scale, sz)) in orders.iter().enumerate() {
            let px = Decimal::new(*units, *scale).unwrap();
            book.insert(RestingOrder::bare("0xu", oid as u64, *side, px, size(*sz), 0));
        }
        let mut combos: Vec<(u32, Option<u64>)> = (2..=5).map(|f| (f, None)).collect();
        combos.extend([(5, Some(1)), (5, Some(2)), (5, Some(5))]);
        for (figs, mantissa) in combos {
            let params = L2Params::new(Some(n_levels), Some(figs), mantissa).unwrap();
            let l2 = aggregate("X", &book, &params).unwrap();
            for side in [Side::Bid, Side::Ask] {
                let mut buckets: BTreeMap<i128, (i64, u32)> = BTreeMap::new();
                for (s, units, scale, sz) in &orders {
                    if *s != side {
                        continue;
                    }
                    let px = Decimal::new(*units, *scale).unwrap();
                    let key = reference_bucket(px, side, figs, mantissa.unwrap_or(1));
                    let entry = buckets.entry(key).or_default();
                    entry.0 += sz;
                    entry.1 += 1;
                }
                let mut expected: Vec<(i128, Decimal, u32)> = buckets
                    .into_iter()
                    .map(|(px, (sz, n))| (px, size(sz), n))
                    .collect();
                if side == Side::Bid {
                    expected.reverse();
                }
                if n_levels > 0 {
                    expected.truncate(n_levels as usize);
                }
                let got: Vec<(i128, Decimal, u32)> =
                    l2.side(side).iter().map(|l| (fine(l.px), l.sz, l.n)).collect();
                prop_assert_eq!(got, expected, "figs {} mantissa {:?}", figs, mantissa);
            }
        }
    }
}
