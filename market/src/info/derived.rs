//! `meta` and `spotMeta` answers derived from the coins l1gate has seen in
//! the node's data (the starting L4 snapshot plus every coin that appeared
//! since), for when no Info source is configured.
//!
//! Only what the coin names say is filled in; everything the node's files do
//! not carry is left out rather than guessed:
//! - `meta`: `{"universe":[{"name"}]}`, the default exchange's perps sorted
//!   by name. Omitted: `szDecimals`, `maxLeverage`, `marginTableId`,
//!   `onlyIsolated`, `isDelisted`, `marginTables`, `collateralToken`. The
//!   position in `universe` is **not** the asset id (the exchange orders its
//!   universe by listing, which the files do not record).
//! - `spotMeta`: `{"universe":[{"name","index"}]}` for `@N` pairs (the index
//!   is `N` by definition), sorted by index, then `{"name"}` for pairs
//!   written `BASE/QUOTE` (their index is not in the name). Omitted: each
//!   pair's `tokens` and `isCanonical`, and the top-level `tokens` list.
//!
//! Builder-deployed perps (`dex:ASSET`) and outcome markets (`#N`) appear in
//! neither answer.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use engine::coin::{self, CoinKind};

/// `meta` of the default exchange from `coins`.
pub fn meta(coins: &BTreeSet<String>) -> Value {
    let universe: Vec<Value> = coins
        .iter()
        .filter(|c| coin::is_default_perp(c))
        .map(|name| json!({ "name": name }))
        .collect();
    json!({ "universe": universe })
}

/// `spotMeta` from `coins`.
pub fn spot_meta(coins: &BTreeSet<String>) -> Value {
    let mut indexed: Vec<(u32, &String)> = Vec::new();
    let mut named: Vec<&String> = Vec::new();
    for name in coins.iter().filter(|c| coin::kind(c) == CoinKind::Spot) {
        match coin::spot_index(name) {
            Some(index) => indexed.push((index, name)),
            None => named.push(name),
        }
    }
    indexed.sort_unstable();
    let universe: Vec<Value> = indexed
        .into_iter()
        .map(|(index, name)| json!({ "name": name, "index": index }))
        .chain(named.into_iter().map(|name| json!({ "name": name })))
        .collect();
    json!({ "universe": universe })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coins(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    #[test]
    fn meta_lists_default_perps_by_name_only() {
        let all = coins(&["ETH", "@10", "BTC", "xyz:NVDA", "#1890", "PURR/USDC"]);
        assert_eq!(
            meta(&all),
            json!({"universe": [{"name": "BTC"}, {"name": "ETH"}]})
        );
    }

    #[test]
    fn spot_meta_orders_pairs_by_index_then_named_pairs() {
        let all = coins(&["@10", "@2", "BTC", "PURR/USDC", "@107"]);
        assert_eq!(
            spot_meta(&all),
            json!({"universe": [
                {"name": "@2", "index": 2},
                {"name": "@10", "index": 10},
                {"name": "@107", "index": 107},
                {"name": "PURR/USDC"},
            ]})
        );
    }
}
