//! What kind of market a coin name is, by the node's naming: main-dex perps
//! by base symbol (`BTC`, `kPEPE`), spot pairs as `@N` (plus the one named
//! pair `PURR/USDC`), builder-deployed perps as `dex:ASSET`, outcome market
//! sides as `#N`.

/// The market family a coin name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoinKind {
    /// A perp of the default (main) exchange.
    Perp,
    /// A spot pair: `@N` or a `BASE/QUOTE` name.
    Spot,
    /// A perp of a builder-deployed exchange (`dex:ASSET`).
    BuilderPerp,
    /// An outcome market side (`#N`).
    Outcome,
}

/// Classifies `coin` by its name.
pub fn kind(coin: &str) -> CoinKind {
    if coin.starts_with('@') || coin.contains('/') {
        CoinKind::Spot
    } else if coin.contains(':') {
        CoinKind::BuilderPerp
    } else if coin.starts_with('#') {
        CoinKind::Outcome
    } else {
        CoinKind::Perp
    }
}

/// Whether `coin` names a perp of the default exchange.
pub fn is_default_perp(coin: &str) -> bool {
    !coin.is_empty() && kind(coin) == CoinKind::Perp
}

/// The pair index of a spot coin written `@N`.
pub fn spot_index(coin: &str) -> Option<u32> {
    let digits = coin.strip_prefix('@')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_like_the_node_writes_them() {
        for (coin, expected) in [
            ("BTC", CoinKind::Perp),
            ("kPEPE", CoinKind::Perp),
            ("@107", CoinKind::Spot),
            ("PURR/USDC", CoinKind::Spot),
            ("xyz:NVDA", CoinKind::BuilderPerp),
            ("#1890", CoinKind::Outcome),
        ] {
            assert_eq!(kind(coin), expected, "{coin}");
        }
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
