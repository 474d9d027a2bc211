//! `fills`: one row per fill.

use engine::views::fills::{FillsSubscription, FillsUpdate};

use super::{Exported, RowSink, SEQUENCE, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for FillsSubscription {
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

    fn rows(frame: &FillsUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let optional =
            |value: Option<engine::num::Decimal>| value.map_or(Cell::Null, Cell::decimal);
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
