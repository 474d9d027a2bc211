//! The open orders view against a walk of the books: after every block of
//! a simulator run, the account's last frame lists exactly the orders it
//! has resting on the default exchange, newest first; a frame comes only
//! when that list changed; and a held account is kept however many other
//! accounts are asked about meanwhile.

use engine::book::l4::MAX_WATCHED_USERS;
use engine::market::{Market, Needs};
use engine::views::ViewSettings;
use engine::views::open_orders::{OpenOrdersKey, OpenOrdersUpdate};
use engine::views::registry::{Frame, Key, Producer};

use crate::steps::{busiest_users, simulated};

/// `user`'s resting orders on the default exchange, by walking every order
/// of every book: (coin, oid, size), newest first.
fn walked(market: &Market, user: &str) -> Listed {
    let mut orders: Vec<(i64, u64, String, String)> = market
        .books()
        .iter()
        .filter(|(coin, _)| !coin.contains(':'))
        .flat_map(|(coin, book)| {
            book.orders()
                .filter(|order| order.user.as_str().eq_ignore_ascii_case(user))
                .map(move |order| {
                    (
                        order.timestamp,
                        order.oid,
                        coin.to_owned(),
                        order.sz.to_string(),
                    )
                })
        })
        .collect();
    orders.sort_by_key(|&(timestamp, oid, _, _)| std::cmp::Reverse((timestamp, oid)));
    orders
        .into_iter()
        .map(|(_, oid, coin, sz)| (coin, oid, sz))
        .collect()
}

/// An account's orders: (coin, oid, size), newest first.
type Listed = Vec<(String, u64, String)>;

fn listed(update: &OpenOrdersUpdate) -> Listed {
    update
        .orders
        .iter()
        .map(|open| {
            (
                open.coin.to_string(),
                open.order.oid,
                open.order.sz.to_string(),
            )
        })
        .collect()
}

fn updates(frames: Vec<Frame>) -> Vec<OpenOrdersUpdate> {
    frames
        .into_iter()
        .map(|frame| match frame {
            Frame::OpenOrders(update) => update,
            other => panic!("not an open orders frame: {other:?}"),
        })
        .collect()
}

#[test]
fn every_frame_is_the_accounts_resting_orders_and_only_changes_are_sent() {
    let (start, blocks) = simulated();
    let users = busiest_users(&blocks, 3);
    let mut market = Market::from_snapshot(start, Needs::ALL);
    let mut open: Vec<(String, Producer, Listed)> = Vec::new();
    for user in &users {
        // Mixed case: one account.
        let key = Key::OpenOrders(OpenOrdersKey::new(
            &user.to_uppercase().replace("0X", "0x"),
            "",
        ));
        let (producer, frames) = key.open(&mut market, &ViewSettings::default()).unwrap();
        let opening = updates(frames);
        assert_eq!(opening.len(), 1, "one opening frame");
        assert_eq!(opening[0].user, *user);
        assert_eq!(
            listed(&opening[0]),
            walked(&market, user),
            "opening of {user}"
        );
        open.push((user.clone(), producer, listed(&opening[0])));
    }
    let mut frames = 0;
    // Past the bound, half-way through: other accounts asked about (as Info
    // asks) must not let a held one go.
    let pressure_at = blocks.len() / 2;
    for (index, block) in blocks.values().enumerate() {
        if index == pressure_at {
            for n in 0..=MAX_WATCHED_USERS + 10 {
                market.orders_of(&format!("0x{n:040x}"));
            }
        }
        market.apply(block);
        for (user, producer, last) in &mut open {
            let now = walked(&market, user);
            let got = updates(producer.on_block(&market));
            assert!(got.len() <= 1, "one frame per block at most");
            if let Some(update) = got.first() {
                frames += 1;
                assert_eq!(update.block_number, block.number);
                assert_ne!(listed(update), *last, "a frame with nothing changed");
                assert_eq!(listed(update), now, "{user} after block {}", block.number);
                *last = now;
            } else {
                assert_eq!(
                    now, *last,
                    "{user}: block {} changed the orders unsent",
                    block.number
                );
            }
        }
    }
    assert!(
        frames > 10,
        "the busiest accounts' orders changed in only {frames} blocks"
    );
    for (_, producer, _) in open {
        producer.close(&mut market);
    }
}
