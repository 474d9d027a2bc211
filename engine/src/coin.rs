//! What kind of market a coin name is, by the node's naming: main-dex perps
//! by base symbol (`BTC`, `kPEPE`), spot pairs as `@N` (plus named pairs
//! such as `PURR/USDC`), builder-deployed perps as `dex:ASSET`, outcome
//! market sides as `#N`. The one classifier of the workspace: the fold, the
//! views and the server's Info answers all ask here.

/// The market family a coin name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoinKind {
    /// A perp of the default (main) exchange (`BTC`, `kPEPE`).
    Perp,
    /// A perp of a builder-deployed exchange (`dex:ASSET`).
    BuilderPerp,
    /// A spot pair: `@N` or a `BASE/QUOTE` name.
    Spot,
    /// An outcome market side (`#N`).
    Outcome,
}

/// Classifies `coin` by its name.
pub fn kind(coin: &str) -> CoinKind {
    if coin.starts_with('@') || coin.contains('/') {
        CoinKind::Spot
    } else if coin.starts_with('#') {
        CoinKind::Outcome
    } else if coin.contains(':') {
        CoinKind::BuilderPerp
    } else {
        CoinKind::Perp
    }
}

/// Whether `coin` is a perp, main-dex or builder-deployed (the coins that
/// have positions).
pub fn is_perp(coin: &str) -> bool {
    matches!(kind(coin), CoinKind::Perp | CoinKind::BuilderPerp)
}

/// Whether `coin` names a perp of the default exchange.
pub fn is_default_perp(coin: &str) -> bool {
    !coin.is_empty() && kind(coin) == CoinKind::Perp
}

/// Whether `coin` trades on exchange `dex`, the exchange's `dex` parameter:
/// `""` is the default exchange (every coin without a `dex:` prefix:
/// perps, spot pairs, outcomes), any other name a builder-deployed
/// exchange's `name:` coins.
pub fn on_dex(coin: &str, dex: &str) -> bool {
    match coin.split_once(':') {
        Some((prefix, _)) => prefix == dex,
        None => dex.is_empty(),
    }
}

/// Whether `coin` is an outcome market side (`#N`).
pub fn is_outcome(coin: &str) -> bool {
    kind(coin) == CoinKind::Outcome
}

/// The pair index of a spot coin written `@N`.
pub fn spot_index(coin: &str) -> Option<u32> {
    let digits = coin.strip_prefix('@')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The complementary side of an outcome market: `#n` pairs with
/// `#(n XOR 1)` (`#1890` with `#1891`). `None` for any other coin.
pub fn outcome_sibling(coin: &str) -> Option<String> {
    let digits = coin.strip_prefix('#')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(format!("#{}", n ^ 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::main_perp("BTC", CoinKind::Perp)]
    #[case::thousand_perp("kPEPE", CoinKind::Perp)]
    #[case::builder_perp("xyz:NVDA", CoinKind::BuilderPerp)]
    #[case::spot_index("@107", CoinKind::Spot)]
    #[case::named_spot("PURR/USDC", CoinKind::Spot)]
    #[case::outcome("#1890", CoinKind::Outcome)]
    fn classifies_coin_names(#[case] coin: &str, #[case] expected: CoinKind) {
        assert_eq!(kind(coin), expected);
    }

    #[test]
    fn perps_and_default_perps() {
        assert!(is_perp("BTC") && is_perp("flx:BTC"));
        assert!(!is_perp("@1") && !is_perp("#1890"));
        assert!(is_default_perp("ETH"));
        assert!(!is_default_perp(""));
        assert!(!is_default_perp("@1"));
        assert!(!is_default_perp("flx:BTC"));
    }

    #[test]
    fn spot_indices_are_the_digits_after_the_at_sign() {
        assert_eq!(spot_index("@0"), Some(0));
        assert_eq!(spot_index("@107"), Some(107));
        assert_eq!(spot_index("@"), None);
        assert_eq!(spot_index("@1a"), None);
        assert_eq!(spot_index("PURR/USDC"), None);
        assert_eq!(spot_index("BTC"), None);
    }
}
