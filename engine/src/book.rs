//! Order books: the per-coin L4 book that the fold mutates ([`l4`]) and the
//! exact L2 aggregation derived from it ([`l2`]).

pub mod l2;
pub mod l4;
mod oids;

pub(crate) use self::oids::prefetch_all;

pub use l4::{Books, L4Book, L4Error, Level, RestingOrder, Terms};
