//! Event filters over real captures, checked against an independent
//! serde_json computation, and kept events checked byte for byte.

use std::collections::BTreeMap;

use feeds::{EventFilter, Feed, FilterError, Source, Start};
use serde_json::Value;

use crate::common::real;

/// (user, coin) of an event by the documented shapes, via serde_json.
fn user_coin(source: Source, event: &Value) -> (Option<String>, Option<String>) {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    match source {
        Source::Fills => (text(&event[0]), text(&event[1]["coin"])),
        Source::OrderStatuses => (text(&event["user"]), text(&event["order"]["coin"])),
        _ => (text(&event["user"]), text(&event["coin"])),
    }
}

type Predicate<'a> = &'a dyn Fn(Option<&str>, Option<&str>) -> bool;

/// Filters every record of `source` in `dir` and checks each output line.
/// Returns the number of kept events.
fn check(dir: &str, source: Source, fields: &[(&str, Vec<&str>)], expect: Predicate<'_>) -> usize {
    let feed = Feed::open(&real(dir), source).unwrap();
    let filter = EventFilter::new(source, fields).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let records = feed.read(&mut cursor, 10_000).unwrap();
    assert!(!records.is_empty());
    let mut kept_total = 0;
    for record in &records {
        let out = filter.apply(&record.data).unwrap();
        let original: Value = serde_json::from_slice(&record.data).unwrap();
        let filtered: Value = serde_json::from_slice(&out.line).unwrap();
        let events = original["events"].as_array().unwrap();
        let expected: Vec<Value> = events
            .iter()
            .filter(|e| {
                let (user, coin) = user_coin(source, e);
                expect(user.as_deref(), coin.as_deref())
            })
            .cloned()
            .collect();
        assert_eq!(out.total, events.len());
        assert_eq!(
            out.matched,
            expected.len(),
            "block {:?}",
            record.block_number
        );
        assert_eq!(filtered["events"], Value::Array(expected));
        for key in ["local_time", "block_time", "block_number"] {
            assert_eq!(filtered[key], original[key]);
        }
        assert_kept_bytes_unchanged(&record.data, &out.line);
        kept_total += out.matched;
    }
    kept_total
}

/// Every event of `filtered` occurs verbatim, in order, in `original`, and
/// the bytes around the events array are the original's.
fn assert_kept_bytes_unchanged(original: &[u8], filtered: &[u8]) {
    let original = std::str::from_utf8(original).unwrap();
    let filtered_text = std::str::from_utf8(filtered).unwrap();
    let marker = "\"events\":[";
    let head = original.find(marker).unwrap() + marker.len();
    assert_eq!(&filtered_text[..head], &original[..head]);
    assert!(filtered_text.ends_with("]}"));
    let env = feeds::envelope::decode(filtered).unwrap();
    let mut from = head;
    for span in env.events() {
        let event = &filtered_text[span.unwrap()];
        let at = original[from..]
            .find(event)
            .expect("kept event must be byte-identical");
        from += at + event.len();
    }
}

fn mixed_case(address: &str) -> String {
    let (prefix, hex) = address.split_at(2);
    let upper: String = hex
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    format!("{prefix}{upper}")
}

/// Users of a source's events in `dir`, most frequent first.
fn users_by_frequency(dir: &str, source: Source) -> Vec<String> {
    let feed = Feed::open(&real(dir), source).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for record in feed.read(&mut cursor, 10_000).unwrap() {
        let value: Value = serde_json::from_slice(&record.data).unwrap();
        for event in value["events"].as_array().unwrap() {
            if let (Some(user), _) = user_coin(source, event) {
                *counts.entry(user).or_default() += 1;
            }
        }
    }
    let mut users: Vec<_> = counts.into_iter().collect();
    users.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    users.into_iter().map(|(u, _)| u).collect()
}

const BTC: &str = "btc-985148182";

#[test]
fn btc_coin_filter_keeps_every_btc_event() {
    for source in [Source::Fills, Source::RawBookDiffs, Source::OrderStatuses] {
        let kept = check(BTC, source, &[("coins", vec!["BTC"])], &|_, c| {
            c == Some("BTC")
        });
        assert!(kept > 0, "{source}");
        let none = check(BTC, source, &[("coins", vec!["btc"])], &|_, c| {
            c == Some("btc")
        });
        assert_eq!(none, 0, "coins match exactly");
    }
}

#[test]
fn user_filter_matches_case_insensitively_in_every_btc_feed() {
    let users = users_by_frequency(BTC, Source::RawBookDiffs);
    let wanted = [users[1].clone(), users[users.len() / 2].clone()];
    let requested: Vec<String> = wanted.iter().map(|u| mixed_case(u)).collect();
    let requested_refs: Vec<&str> = requested.iter().map(String::as_str).collect();
    let is_wanted = |u: Option<&str>, _: Option<&str>| {
        u.is_some_and(|u| wanted.iter().any(|w| w.eq_ignore_ascii_case(u)))
    };
    let mut kept = 0;
    for source in [Source::Fills, Source::RawBookDiffs, Source::OrderStatuses] {
        kept += check(
            BTC,
            source,
            &[("users", requested_refs.clone())],
            &is_wanted,
        );
    }
    assert!(kept > 0);
}

const UNFILTERED: &str = "fills-unfiltered";

#[test]
fn spot_coin_filters_on_unfiltered_fills() {
    let kept = check(
        UNFILTERED,
        Source::Fills,
        &[("coins", vec!["@142"])],
        &|_, c| c == Some("@142"),
    );
    assert!(kept > 0);
    let kept = check(
        UNFILTERED,
        Source::Fills,
        &[("coins", vec!["PURR/USDC"])],
        &|_, c| c == Some("PURR/USDC"),
    );
    assert!(kept > 0);
}

#[test]
fn builder_perp_coin_filter_on_unfiltered_fills() {
    let coins = vec!["xyz:NVDA", "cash:NVDA", "km:USTECH"];
    let kept = check(
        UNFILTERED,
        Source::Fills,
        &[("coins", coins.clone())],
        &|_, c| c.is_some_and(|c| coins.contains(&c)),
    );
    assert_eq!(kept, 12);
}

#[test]
fn mixed_case_user_and_combined_filters_on_unfiltered_fills() {
    let users = users_by_frequency(UNFILTERED, Source::Fills);
    let user = users[1].clone();
    let requested = mixed_case(&user);
    assert_ne!(requested, user);
    let kept = check(
        UNFILTERED,
        Source::Fills,
        &[("users", vec![requested.as_str()])],
        &|u, _| u.is_some_and(|u| u.eq_ignore_ascii_case(&user)),
    );
    assert!(kept > 0);
    // AND across fields: this user's fills in spot coins only.
    let both = check(
        UNFILTERED,
        Source::Fills,
        &[
            ("users", vec![requested.as_str()]),
            ("coins", vec!["@142", "@230", "@166"]),
        ],
        &|u, c| {
            u.is_some_and(|u| u.eq_ignore_ascii_case(&user))
                && c.is_some_and(|c| ["@142", "@230", "@166"].contains(&c))
        },
    );
    assert!(both <= kept);
}

#[test]
fn unknown_fields_and_empty_values_are_rejected_by_name() {
    let err = EventFilter::new(Source::OrderStatuses, &[("coin", vec!["BTC"])]).unwrap_err();
    assert_eq!(
        err,
        FilterError::UnknownField {
            field: "coin".to_owned(),
            feed: "order_statuses"
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("\"coin\"") && message.contains("users, coins"),
        "{message}"
    );
    let err = EventFilter::new(Source::Blocks, &[("users", vec!["0x1"])]).unwrap_err();
    assert!(err.to_string().contains("\"users\""));
    let err = EventFilter::new(Source::Fills, &[("users", Vec::<&str>::new())]).unwrap_err();
    assert_eq!(
        err,
        FilterError::NoValues {
            field: "users".to_owned()
        }
    );
}
