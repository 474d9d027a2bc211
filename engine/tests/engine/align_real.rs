//! The aligner in streaming mode on real data: the by-block capture re-cut
//! into one event per line (as `--stream-with-block-info` writes it), fed
//! with the sources out of step, folds to the same book as by-block mode.

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;
use engine::align::{AlignMode, Aligner};
use engine::fold::Engine;
use feeds::Source;
use feeds::envelope;

use crate::common::{btc_snapshot, by_block_blocks, hourly_file, real};

/// One line per event, same envelope, for one source's by-block file.
fn streaming_lines(dir: &str) -> Vec<Bytes> {
    let file = hourly_file(&real("btc-985148182"), dir).unwrap();
    let text = std::fs::read(file).unwrap();
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let env = envelope::decode(line).unwrap();
        let time = std::str::from_utf8(env.block_time_text()).unwrap();
        for span in env.events() {
            let event = std::str::from_utf8(&line[span.unwrap()]).unwrap();
            out.push(Bytes::from(format!(
                r#"{{"local_time":"{time}","block_time":"{time}","block_number":{},"events":[{event}]}}"#,
                env.block_number
            )));
        }
    }
    out
}

#[test]
fn streaming_lines_out_of_step_fold_like_by_block() {
    let mut queues: Vec<(Source, usize, VecDeque<Bytes>)> = vec![
        (
            Source::OrderStatuses,
            997,
            streaming_lines("node_order_statuses_by_block").into(),
        ),
        (
            Source::RawBookDiffs,
            13,
            streaming_lines("node_raw_book_diffs_by_block").into(),
        ),
        (
            Source::Fills,
            1,
            streaming_lines("node_fills_by_block").into(),
        ),
    ];
    let with_events: BTreeSet<u64> = queues
        .iter()
        .flat_map(|(_, _, lines)| lines.iter())
        .map(|line| envelope::decode(line).unwrap().block_number)
        .collect();
    let sources: Vec<Source> = queues.iter().map(|(s, _, _)| *s).collect();
    let mut aligner = Aligner::new(AlignMode::Streaming, &sources, i64::MAX);
    let mut streamed = Engine::from_snapshot(btc_snapshot());
    let mut emitted = Vec::new();
    while queues.iter().any(|(_, _, lines)| !lines.is_empty()) {
        for (source, step, lines) in &mut queues {
            for line in lines.drain(..(*step).min(lines.len())) {
                aligner.push_line(*source, line, 0);
            }
        }
        while let Some(block) = aligner.pop(0) {
            emitted.push(block.number);
            let report = streamed.apply(&block);
            assert_eq!(report.issues, []);
        }
    }
    while let Some(block) = aligner.finish() {
        emitted.push(block.number);
        streamed.apply(&block);
    }
    assert_eq!(aligner.report().issues, []);
    assert_eq!(emitted, with_events.into_iter().collect::<Vec<_>>());

    let mut by_block = Engine::from_snapshot(btc_snapshot());
    for block in by_block_blocks(&real("btc-985148182")) {
        by_block.apply(&block);
    }
    assert_eq!(streamed.books(), by_block.books());
    assert_eq!(streamed.events_seen(), by_block.events_seen());
}
