//! The order statuses of watched accounts: for each account some order
//! updates subscription watches (by reference count), the last block's
//! statuses of that account exactly as the node wrote them, in file order
//! (filed by the book fold's one pass over the statuses, see
//! [`crate::fold::FoldWants::raw_users`]).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::fold::BlockChanges;

/// Shared state: the accounts someone watches and their last block's
/// statuses.
#[derive(Debug, Default)]
pub struct StatusesView {
    watchers: BTreeMap<String, usize>,
    /// The watched accounts (the keys of `watchers`), for the fold to file.
    users: BTreeSet<String>,
    /// The last block's statuses of watched accounts, with their account,
    /// in file order.
    last: Vec<(String, Bytes)>,
}

impl StatusesView {
    /// Watched accounts (lowercase addresses).
    pub fn users(&self) -> &BTreeSet<String> {
        &self.users
    }

    /// The last block's statuses of any of `users` (lowercase), in file
    /// order.
    pub fn of<'s>(&'s self, users: &'s BTreeSet<String>) -> impl Iterator<Item = &'s Bytes> + 's {
        self.last
            .iter()
            .filter(|(user, _)| users.contains(user))
            .map(|(_, bytes)| bytes)
    }

    /// One more watcher of `user`.
    pub(crate) fn watch(&mut self, user: &str) {
        *self.watchers.entry(user.to_owned()).or_insert(0) += 1;
        self.users.insert(user.to_owned());
    }

    /// One watcher of `user` fewer; the last one stops its filing.
    pub(crate) fn unwatch(&mut self, user: &str) {
        if let Some(count) = self.watchers.get_mut(user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.watchers.remove(user);
                self.users.remove(user);
            }
        }
    }

    /// Takes the block's filed statuses.
    pub(crate) fn update(&mut self, changes: &mut BlockChanges) {
        self.last = std::mem::take(&mut changes.raw_users);
    }

    /// Forgets the previous block's statuses (a block that filed none).
    pub(crate) fn clear(&mut self) {
        self.last.clear();
    }
}
