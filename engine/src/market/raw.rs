//! The raw L4 events of watched coins: for each coin some L4 book
//! subscription watches (by reference count), the last block's events as the
//! JSON object `{"order_statuses":[…],"book_diffs":[…]}`, built from the
//! node's own event bytes (each byte-identical to the source), and the coins
//! reset from a node snapshot in that block.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::fold::BlockChanges;

/// Shared state: the coins someone watches and their last block's data.
#[derive(Debug, Default)]
pub struct L4BookView {
    watchers: BTreeMap<String, usize>,
    /// The watched coins (the keys of `watchers`), for the fold to file.
    coins: BTreeSet<String>,
    data: BTreeMap<String, RawJson>,
    resets: Vec<String>,
}

/// Builds `{"order_statuses":[…],"book_diffs":[…]}` from exact event bytes.
pub fn diff_data(order_statuses: &[impl AsRef<[u8]>], book_diffs: &[impl AsRef<[u8]>]) -> String {
    let len: usize = order_statuses
        .iter()
        .map(|e| e.as_ref().len() + 1)
        .chain(book_diffs.iter().map(|e| e.as_ref().len() + 1))
        .sum();
    let mut out = Vec::with_capacity(len + 40);
    out.extend_from_slice(b"{\"order_statuses\":[");
    join(&mut out, order_statuses);
    out.extend_from_slice(b"],\"book_diffs\":[");
    join(&mut out, book_diffs);
    out.extend_from_slice(b"]}");
    String::from_utf8_lossy(&out).into_owned()
}

fn join(out: &mut Vec<u8>, events: &[impl AsRef<[u8]>]) {
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(event.as_ref());
    }
}

impl L4BookView {
    /// Coins with watchers (their raw events are kept per block).
    pub fn coins(&self) -> &BTreeSet<String> {
        &self.coins
    }

    /// The last block's data for `coin`, if it had events.
    pub fn data(&self, coin: &str) -> Option<&RawJson> {
        self.data.get(coin)
    }

    /// Whether `coin` was reset in the last block.
    pub fn was_reset(&self, coin: &str) -> bool {
        self.resets.iter().any(|c| c == coin)
    }

    /// One more watcher of `coin`.
    pub(crate) fn watch(&mut self, coin: &str) {
        *self.watchers.entry(coin.to_owned()).or_insert(0) += 1;
        self.coins.insert(coin.to_owned());
    }

    /// One watcher of `coin` fewer; the last one stops its filing.
    pub(crate) fn unwatch(&mut self, coin: &str) {
        if let Some(count) = self.watchers.get_mut(coin) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.watchers.remove(coin);
                self.coins.remove(coin);
            }
        }
    }

    pub(crate) fn update(&mut self, changes: &BlockChanges) {
        self.data.clear();
        for (coin, events) in &changes.raw {
            if self.watchers.contains_key(coin) {
                let text = diff_data(&events.order_statuses, &events.book_diffs);
                self.data.insert(coin.clone(), RawJson(text.into()));
            }
        }
        self.resets = changes.resets.iter().cloned().collect();
    }
}

/// JSON text shared between frames and written verbatim when serialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJson(Arc<str>);

impl RawJson {
    /// Wraps JSON text (the caller vouches that it is valid JSON).
    pub fn new(text: String) -> Self {
        Self(text.into())
    }

    /// The JSON bytes (the `data` field of `L4BookDiff`).
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}
