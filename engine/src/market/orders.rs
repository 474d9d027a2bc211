//! The last block's typed L4 order changes (NEW / UPDATE / REMOVE, in file
//! order) and the coins reset from a node snapshot in it.

use std::collections::BTreeSet;

use crate::fold::{BlockChanges, OrderChange};

/// Shared state: the last block's typed changes and resets.
#[derive(Debug, Default)]
pub struct L4UpdatesView {
    changes: Vec<OrderChange>,
    resets: BTreeSet<String>,
    /// The list before last, emptied, for the engine to fill again: a block
    /// has hundreds of changes, and growing a fresh list to that size copied
    /// it several times per block.
    spare: Vec<OrderChange>,
}

impl L4UpdatesView {
    /// The last block's applied changes.
    pub fn changes(&self) -> &[OrderChange] {
        &self.changes
    }

    /// Coins reset from a node snapshot in the last block.
    pub fn resets(&self) -> &BTreeSet<String> {
        &self.resets
    }

    pub(crate) fn update(&mut self, changes: &mut BlockChanges) {
        let mut previous = std::mem::replace(
            &mut self.changes,
            std::mem::take(&mut changes.order_changes),
        );
        previous.clear();
        self.spare = previous;
        self.resets = std::mem::take(&mut changes.resets);
    }

    /// An empty change list with room for a block's changes.
    pub(crate) fn take_spare(&mut self) -> Vec<OrderChange> {
        std::mem::take(&mut self.spare)
    }
}
