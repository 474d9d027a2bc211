//! Property tests over untrusted bytes: real node lines and a real-shaped
//! snapshot, damaged at random (bytes flipped, cut, spliced, repeated), go
//! through every decoder that reads the node's output — envelope headers,
//! the aligner, the event decoders and the fold, the snapshot parser — and
//! nothing panics; the fold's state stays within what the input could
//! build.
//!
//! Cases per property: proptest's default (256), or `PROPTEST_CASES`. A
//! longer run:
//!
//! ```sh
//! PROPTEST_CASES=20000 cargo test --release -p engine --test engine untrusted_input
//! ```
//!
//! A failing case is shrunk and saved under
//! `engine/tests/engine/untrusted_input.proptest-regressions`, which is
//! checked in so that it is replayed first on every later run.

use std::sync::LazyLock;

use bytes::Bytes;
use engine::align::{AlignMode, Aligner};
use engine::market::{Market, Needs};
use feeds::Source;
use proptest::prelude::*;

use super::common::{hourly_file, real};

/// Real lines of the BTC capture: (source, line).
static LINES: LazyLock<Vec<(Source, Vec<u8>)>> = LazyLock::new(|| {
    let data = real("btc-985148182");
    let mut out = Vec::new();
    for (source, dir) in [
        (Source::OrderStatuses, "node_order_statuses_by_block"),
        (Source::RawBookDiffs, "node_raw_book_diffs_by_block"),
        (Source::Fills, "node_fills_by_block"),
    ] {
        let file = hourly_file(&data, dir).expect("the real capture");
        let bytes = std::fs::read(file).unwrap();
        out.extend(
            bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .take(12)
                .map(|l| (source, l.to_vec())),
        );
    }
    out
});

/// A small real-shaped snapshot: the simulator's, for a small universe.
static SNAPSHOT: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let sim = fixtures::Simulator::new(&fixtures::SimConfig::small(7));
    let mut out = Vec::new();
    sim.write_snapshot_json(&mut out).unwrap();
    out
});

/// One way to damage bytes.
#[derive(Debug, Clone)]
enum Damage {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Cut { at: usize },
    Splice { at: usize, bytes: Vec<u8> },
    Repeat { at: usize, len: usize },
    Delete { at: usize, len: usize },
}

fn damage() -> impl Strategy<Value = Damage> {
    let interesting = prop_oneof![
        Just(b'"'),
        Just(b'\\'),
        Just(b'{'),
        Just(b'}'),
        Just(b'['),
        Just(b']'),
        Just(b','),
        Just(b':'),
        Just(b'-'),
        Just(b'.'),
        Just(b'e'),
        Just(b'9'),
        Just(0xff),
        Just(0xc3),
        Just(0),
        any::<u8>(),
    ];
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Damage::Flip { at, bit }),
        (any::<usize>(), interesting.clone()).prop_map(|(at, byte)| Damage::Set { at, byte }),
        any::<usize>().prop_map(|at| Damage::Cut { at }),
        (
            any::<usize>(),
            proptest::collection::vec(interesting, 1..24)
        )
            .prop_map(|(at, bytes)| Damage::Splice { at, bytes }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Damage::Repeat { at, len }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Damage::Delete { at, len }),
    ]
}

fn apply(bytes: &mut Vec<u8>, damage: &Damage) {
    if bytes.is_empty() {
        return;
    }
    let pick = |at: usize| at % bytes.len();
    match damage {
        Damage::Flip { at, bit } => {
            let i = pick(*at);
            bytes[i] ^= 1 << bit;
        }
        Damage::Set { at, byte } => {
            let i = pick(*at);
            bytes[i] = *byte;
        }
        Damage::Cut { at } => {
            let i = pick(*at);
            bytes.truncate(i);
        }
        Damage::Splice { at, bytes: more } => {
            let i = pick(*at);
            bytes.splice(i..i, more.iter().copied());
        }
        Damage::Repeat { at, len } => {
            let i = pick(*at);
            let end = (i + len).min(bytes.len());
            let copy = bytes[i..end].to_vec();
            bytes.splice(end..end, copy);
        }
        Damage::Delete { at, len } => {
            let i = pick(*at);
            let end = (i + len).min(bytes.len());
            bytes.drain(i..end);
        }
    }
}

/// Folds `lines` into `market`; panics only if the engine does.
fn fold(mut market: Market, lines: &[(Source, Vec<u8>)]) -> Market {
    let sources = [Source::OrderStatuses, Source::RawBookDiffs, Source::Fills];
    let mut aligner = Aligner::new(AlignMode::ByBlock, &sources, i64::MAX);
    for (source, line) in lines {
        // A newline inside a damaged line makes two lines, as on disk.
        for part in line.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            aligner.push_line(*source, Bytes::copy_from_slice(part), 0);
        }
        while let Some(block) = aligner.pop(0) {
            market.apply(&block);
        }
    }
    while let Some(block) = aligner.finish() {
        market.apply(&block);
    }
    market
}

/// The real lines with `damages` applied.
fn damaged(damages: &[(usize, Damage)]) -> Vec<(Source, Vec<u8>)> {
    let mut lines = LINES.clone();
    for (which, damage) in damages {
        let i = which % lines.len();
        apply(&mut lines[i].1, damage);
    }
    lines
}

proptest! {
    #[test]
    fn damaged_node_lines_never_panic_the_decoders_or_the_fold(
        damages in proptest::collection::vec((any::<usize>(), damage()), 1..8),
    ) {
        let lines = damaged(&damages);
        for (_, line) in &lines {
            let _ = feeds::envelope::decode(line);
            let _ = feeds::index::envelope_header(line);
        }
        // From an empty market: every order is unknown to the book, which
        // exercises the fold's refusals.
        let market = fold(Market::new(Needs::ALL), &lines);
        // The fold grows only from what it was given: a damaged line adds
        // no more coins than it has bytes.
        let books = market.universe().len();
        let bytes: usize = lines.iter().map(|(_, l)| l.len()).sum();
        prop_assert!(books <= bytes, "{books} coins from {bytes} bytes");
    }
}

proptest! {
    // Each case starts from the real 18 MB snapshot: few cases by default.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(12)
    ))]
    #[test]
    fn damaged_node_lines_fold_onto_the_real_book_without_panicking(
        damages in proptest::collection::vec((any::<usize>(), damage()), 1..8),
    ) {
        let lines = damaged(&damages);
        let market = fold(
            Market::from_snapshot(super::common::btc_snapshot(), Needs::ALL),
            &lines,
        );
        prop_assert!(market.universe().contains("BTC"));
    }
}

proptest! {
    #[test]
    fn a_damaged_snapshot_is_an_error_or_a_snapshot_never_a_panic(
        damages in proptest::collection::vec(damage(), 1..6),
    ) {
        let mut bytes = SNAPSHOT.clone();
        for damage in &damages {
            apply(&mut bytes, damage);
        }
        if let Ok(snapshot) = engine::snapshot::parse(&bytes) {
            // Whatever parsed can start a market.
            let _ = Market::from_snapshot(snapshot, Needs::ALL);
        }
    }

    #[test]
    fn arbitrary_bytes_are_not_envelopes_and_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let _ = feeds::envelope::decode(&bytes);
        let _ = feeds::index::envelope_header(&bytes);
        let _ = feeds::index::replica_time_ms(&bytes);
        let _ = engine::snapshot::parse(&bytes);
    }
}
