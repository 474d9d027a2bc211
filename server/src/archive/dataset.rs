//! The archive's datasets: the bucket folders `archive fetch` reads.

/// The datasets of the archive that are hour files of node output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Dataset {
    /// Fills batched by block (2025-07-27 08:00 on).
    NodeFillsByBlock,
    /// Fills, one per line (2025-05-25 to 2025-07-27).
    NodeFills,
    /// Trades (2025-03-22 to 2025-05-25).
    NodeTrades,
    /// Misc events batched by block (2025-09-27 on).
    MiscEventsByBlock,
}

impl Dataset {
    /// The dataset's name, its top-level folder in the bucket.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeFillsByBlock => "node_fills_by_block",
            Self::NodeFills => "node_fills",
            Self::NodeTrades => "node_trades",
            Self::MiscEventsByBlock => "misc_events_by_block",
        }
    }
}

impl std::fmt::Display for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
