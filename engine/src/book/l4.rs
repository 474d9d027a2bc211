//! The per-coin L4 book: every resting order with its owner and metadata,
//! bids price-descending and asks price-ascending, time priority inside a
//! level. Mutation follows the node's raw book diffs literally — a `new`
//! rests where the diff says (replacing any entry with the same oid, no local
//! matching), `update` sets the size, `remove` deletes — so the book never
//! guesses what the matching engine did.
//!
//! One concept a file: `order` (a resting order, the diffs a book refuses),
//! `owner` (an order's owner, one copy per account), `cloid` (its client
//! order id, kept as bytes), `slots` (the slot table the orders live in), `levels` (the level table),
//! `level` (a level borrowed, with its orders), `book` (one coin's book),
//! `books` (every coin's).

mod book;
mod books;
mod cloid;
mod level;
mod levels;
mod order;
mod owner;
mod slots;

pub use book::{L4Book, UserOrders};
pub use books::{Books, MAX_HELD_USERS, MAX_WATCHED_USERS};
pub use cloid::{CLOID_TEXT_LEN, Cloid, CloidForm};
pub use level::{Level, LevelOrders};
pub use order::{L4Error, RestingOrder, Terms};
pub use owner::Owner;
