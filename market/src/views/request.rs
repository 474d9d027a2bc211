//! The `MarketStreaming` requests as the views they open: each request type
//! checks its fields (an `INVALID_ARGUMENT` naming the field when one is
//! out of contract) and says what serves it — a view's key, or the Info
//! source. The service itself is one generic method (`grpc::market`).

use std::collections::BTreeSet;

use engine::market::candles::{CandleError, Interval};
use engine::views::ViewError;
use engine::views::registry::Key;
use proto::v3 as pb;
use tonic::Status;

/// What serves a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Opening {
    /// The view of this key.
    View(Key),
    /// The Info source's mids when the server has one, else the book mids
    /// of this key.
    Mids(Key),
    /// The Info source's context of this coin (no view has it).
    AssetCtx(String),
}

/// A `MarketStreaming` request.
pub trait MarketRequest: Send + 'static {
    /// What serves the request.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the field outside the contract.
    fn opening(self) -> Result<Opening, Status>;
}

impl MarketRequest for pb::ActiveAssetCtxRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::AssetCtx(one_coin(&self.coin)?))
    }
}

/// Rejects blank and `*` entries of a coin or user list.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn entries(field: &str, values: &[String]) -> Result<(), Status> {
    common::bounded_list(field, values).map_err(Status::invalid_argument)?;
    for value in values {
        if value.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "{field}: blank entry {}",
                common::quoted(value)
            )));
        }
        if value == "*" {
            return Err(Status::invalid_argument(format!(
                "{field}: \"*\" is not a value; leave the list empty for all"
            )));
        }
    }
    Ok(())
}

/// A required single coin.
///
/// # Errors
/// `INVALID_ARGUMENT` when it is blank or out of bounds.
pub fn one_coin(coin: &str) -> Result<String, Status> {
    if coin.trim().is_empty() {
        return Err(Status::invalid_argument("coin: required"));
    }
    entries("coin", &[coin.to_owned()])?;
    Ok(coin.to_owned())
}

/// A checked scope list of coins (empty = all), duplicates merged.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn coins(field: &str, values: &[String]) -> Result<BTreeSet<String>, Status> {
    entries(field, values)?;
    Ok(values.iter().cloned().collect())
}

/// A required address (user or builder), lowercased; see [`common::address`].
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn address(field: &str, value: &str) -> Result<String, Status> {
    common::address(field, value).map_err(Status::invalid_argument)
}

/// A scope list of addresses (empty = all): each entry checked, lowercased,
/// duplicates merged.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `field`.
pub fn addresses(field: &str, values: &[String]) -> Result<BTreeSet<String>, Status> {
    entries(field, values)?;
    values.iter().map(|value| address(field, value)).collect()
}

/// The status of a request its view refused.
pub fn view_status(error: ViewError) -> Status {
    match error {
        ViewError::CoinCount { count, .. } => Status::invalid_argument(format!(
            "coins: 1 to 20 distinct coins are required, got {count}"
        )),
        ViewError::MissingCoin { .. } | ViewError::Candle(CandleError::MissingCoin) => {
            Status::invalid_argument("coin: required")
        }
        ViewError::L2(error) => Status::invalid_argument(common::bounded(error.to_string())),
        ViewError::NotPerp { coin } => Status::invalid_argument(format!(
            "coins: {} is not a perp coin",
            common::quoted(&coin)
        )),
        ViewError::Candle(CandleError::UnknownInterval(interval)) => {
            Status::invalid_argument(format!(
                "interval: unknown interval {}; one of {}",
                common::quoted(&interval),
                Interval::ALL.map(Interval::as_str).join(" ")
            ))
        }
        ViewError::MissingUser => Status::invalid_argument("user: required"),
        ViewError::AccountCount { count, .. } => Status::invalid_argument(format!(
            "users: 1 to 20 distinct addresses are required, got {count}"
        )),
        ViewError::MissingBuilder => Status::invalid_argument("builder: required"),
        ViewError::Disabled { view: "candles" } => Status::failed_precondition(
            "candle streaming is disabled on this server (candle_streaming = false)",
        ),
        ViewError::Disabled { view } => {
            Status::failed_precondition(format!("{view} is disabled on this server"))
        }
        error @ ViewError::AccountsFollowed { .. } => Status::resource_exhausted(error.to_string()),
        ViewError::UserCount { count } => {
            Status::invalid_argument(format!("user: one account is followed, got {count}"))
        }
        // A sum past 128 bits is the server's limit, not the client's fault.
        error @ ViewError::Candle(CandleError::Overflow { .. }) => {
            Status::internal(error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_error_names_its_field_and_a_full_server_says_try_later() {
        let count = view_status(ViewError::AccountCount {
            view: "statuses",
            count: 21,
        });
        assert_eq!(count.code(), tonic::Code::InvalidArgument);
        assert!(count.message().starts_with("users:"), "{}", count.message());
        let full = view_status(ViewError::AccountsFollowed {
            view: "openorders",
            limit: 4_096,
        });
        assert_eq!(full.code(), tonic::Code::ResourceExhausted);
        assert!(full.message().contains("4096"), "{}", full.message());
    }
}
