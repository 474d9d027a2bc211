//! `l4book`: one row per resting order of a snapshot frame, and per node
//! event (order status, raw book diff) of a diff frame.

use std::borrow::Cow;

use engine::views::l4book::{L4BookSubscription, L4BookUpdate, L4Order};
use serde::Deserialize;

use super::order::{
    DiffEvent, RawBookDiff, STATUS, StatusEvent, decimal, status_cells, unreadable,
};
use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

const NAME: &str = "l4book";

/// A diff frame's `data`: the coin's events, and its mirrored sibling's.
#[derive(Debug, Deserialize)]
struct Events<'a> {
    #[serde(borrow)]
    order_statuses: Vec<StatusEvent<'a>>,
    #[serde(borrow)]
    book_diffs: Vec<DiffEvent<'a>>,
    #[serde(borrow, default)]
    mirror: Option<Mirror<'a>>,
}

#[derive(Debug, Deserialize)]
struct Mirror<'a> {
    #[serde(borrow)]
    order_statuses: Vec<StatusEvent<'a>>,
    #[serde(borrow)]
    book_diffs: Vec<DiffEvent<'a>>,
}

// Column indexes of the row (after `block_number`, `block_time`).
const KIND: usize = 2;
const MIRROR: usize = 3;
const DIFF: usize = 4;
/// Where [`STATUS`]'s columns start.
const STATUS_AT: usize = 5;
const COLUMNS: usize = STATUS_AT + STATUS.len();

const fn columns() -> [Column; COLUMNS] {
    let head = [
        BLOCK[0],
        BLOCK[1],
        Column::required(
            "kind",
            Kind::Text,
            "`order` (a snapshot's resting order), `status` (an order status) or `diff` (a raw book diff)",
        ),
        Column::required(
            "mirror",
            Kind::Bool,
            "true: the mirrored outcome sibling's (an order projected onto this book, or the sibling's event)",
        ),
        Column::optional(
            "diff",
            Kind::Text,
            "on `diff` rows: `new`, `update` or `remove`",
        ),
    ];
    let mut out = [BLOCK[0]; COLUMNS];
    let mut i = 0;
    while i < STATUS_AT {
        out[i] = head[i];
        i += 1;
    }
    while i < COLUMNS {
        // Every order column may be empty: a diff row fills only the ones
        // a raw book diff has.
        out[i] = STATUS[i - STATUS_AT];
        out[i].nullable = true;
        i += 1;
    }
    out
}

/// A status column's index in the row (evaluated at compile time where
/// used: `const { at("user") }`).
const fn at(name: &str) -> usize {
    let mut i = 0;
    while i < STATUS.len() {
        if same(STATUS[i].name, name) {
            return STATUS_AT + i;
        }
        i += 1;
    }
    panic!("not a status column")
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl Exported for L4BookSubscription {
    const TABLE: Table = Table {
        name: NAME,
        row: "one resting order of a snapshot frame (kind `order`: bids best first, then asks, \
              time priority within a level), or one node event of a diff frame (kinds `status` \
              and `diff`: the block's order statuses, then its raw book diffs, in file order, \
              then the mirrored sibling's); the order columns hold what the event has (a diff: \
              its price in `limit_px`, the resting size after it in `sz` — empty on `remove` — \
              and an update's size before it in `orig_sz`)",
        columns: &columns(),
    };

    fn block(frame: &L4BookUpdate) -> (u64, i64) {
        match frame {
            L4BookUpdate::Snapshot(snapshot) => (snapshot.block_number, snapshot.time),
            L4BookUpdate::Diff(diff) => (diff.block_number, diff.time),
        }
    }

    fn rows(frame: &L4BookUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let mut cells = vec![Cell::Null; COLUMNS];
        cells[0] = number;
        cells[1] = time;
        match frame {
            L4BookUpdate::Snapshot(snapshot) => {
                for order in snapshot.bids.iter().chain(&snapshot.asks) {
                    order_row(&mut cells, order);
                    out.row(&cells)?;
                }
            }
            L4BookUpdate::Diff(diff) => {
                let events: Events<'_> =
                    serde_json::from_str(diff.data.as_str()).map_err(|e| unreadable(NAME, &e))?;
                let mirrored = events
                    .mirror
                    .iter()
                    .map(|m| (true, &m.order_statuses, &m.book_diffs));
                for (mirror, statuses, diffs) in
                    std::iter::once((false, &events.order_statuses, &events.book_diffs))
                        .chain(mirrored)
                {
                    for status in statuses {
                        cells[2..].fill(Cell::Null);
                        cells[KIND] = Cell::Text("status");
                        cells[MIRROR] = Cell::Bool(mirror);
                        cells[STATUS_AT..].copy_from_slice(&status_cells(NAME, status)?);
                        out.row(&cells)?;
                    }
                    for event in diffs {
                        diff_row(&mut cells, mirror, event)?;
                        out.row(&cells)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn order_row<'o>(cells: &mut [Cell<'o>], order: &'o L4Order) {
    cells[2..].fill(Cell::Null);
    cells[KIND] = Cell::Text("order");
    cells[MIRROR] = Cell::Bool(order.synthetic);
    cells[const { at("user") }] = Cell::Text(&order.user);
    cells[const { at("coin") }] = Cell::Text(&order.coin);
    cells[const { at("side") }] = Cell::Text(order.side.as_str());
    cells[const { at("limit_px") }] = Cell::decimal(order.limit_px);
    cells[const { at("sz") }] = Cell::decimal(order.sz);
    cells[const { at("oid") }] = Cell::U64(order.oid);
    cells[const { at("timestamp") }] = Cell::TimeMs(order.timestamp);
    cells[const { at("order_type") }] = Cell::Text(&order.order_type);
    cells[const { at("tif") }] = Cell::text_or_null(order.tif.as_deref());
    cells[const { at("reduce_only") }] = Cell::Bool(order.reduce_only);
    cells[const { at("is_trigger") }] = Cell::Bool(order.is_trigger);
    cells[const { at("trigger_px") }] = Cell::decimal(order.trigger_px);
    cells[const { at("trigger_condition") }] = Cell::Text(&order.trigger_condition);
    cells[const { at("is_position_tpsl") }] = Cell::Bool(order.is_position_tpsl);
    cells[const { at("cloid") }] = Cell::text_or_null(order.cloid.as_deref());
}

fn diff_row<'e>(
    cells: &mut [Cell<'e>],
    mirror: bool,
    event: &'e DiffEvent<'_>,
) -> Result<(), ExportError> {
    cells[2..].fill(Cell::Null);
    cells[KIND] = Cell::Text("diff");
    cells[MIRROR] = Cell::Bool(mirror);
    cells[DIFF] = Cell::Text(event.raw_book_diff.name());
    let text = |value: &'e Cow<'_, str>| Cell::Text(value.as_ref());
    match &event.raw_book_diff {
        RawBookDiff::New { sz } => cells[const { at("sz") }] = decimal(NAME, "sz", sz)?,
        RawBookDiff::Update { orig_sz, new_sz } => {
            cells[const { at("sz") }] = decimal(NAME, "sz", new_sz)?;
            cells[const { at("orig_sz") }] = decimal(NAME, "orig_sz", orig_sz)?;
        }
        RawBookDiff::Remove => {}
    }
    cells[const { at("user") }] = text(&event.user);
    cells[const { at("coin") }] = text(&event.coin);
    cells[const { at("side") }] = text(&event.side);
    cells[const { at("limit_px") }] = decimal(NAME, "limit_px", &event.px)?;
    cells[const { at("oid") }] = Cell::U64(event.oid);
    Ok(())
}
