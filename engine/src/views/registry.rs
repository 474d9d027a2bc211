//! The view registry: every view by name, and one enum each for their keys,
//! their frames and their open subscriptions, so a driver (`l1gate replay`,
//! the server's engine thread) handles any view the same way. One line per
//! view in [`for_each_view!`](crate::for_each_view) registers it: the
//! variant name and the type implementing [`View`].
//!
//! A [`Batch`] is what a driver publishes per key and block: the frames,
//! their position, and each edge's rendering of them, made once by the first
//! subscriber that sends them and shared by all others.

use std::any::Any;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use serde::Serialize;

use crate::market::{Market, Needs, Position, Step};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{OnLag, Selection, View, ViewError, ViewSettings};

/// Calls `$callback! { Variant => ViewType, … }` with every view: the one
/// list of views. The registry above is made from it, and so is each edge's
/// per-view dispatch (the gRPC and WebSocket renderings), so a view added
/// here is a compile error at every edge until the edge says how it serves
/// it. The order is the order `l1gate replay` lists the views in.
#[macro_export]
macro_rules! for_each_view {
    ($callback:ident) => {
        $callback! {
            L2Book => $crate::views::l2book::L2BookSubscription,
            Bbo => $crate::views::bbo::BboSubscription,
            L2Diff => $crate::views::l2diff::L2DiffSubscription,
            L4Book => $crate::views::l4book::L4BookSubscription,
            L4Updates => $crate::views::l4updates::L4UpdatesSubscription,
            Tpsl => $crate::views::tpsl::TpslSubscription,
            Trades => $crate::views::trades::TradesSubscription,
            Fills => $crate::views::fills::FillsSubscription,
            Candles => $crate::views::candles::CandleSubscription,
            Mids => $crate::views::mids::MidsSubscription,
            Statuses => $crate::views::statuses::StatusesSubscription,
            OpenOrders => $crate::views::open_orders::OpenOrdersSubscription,
        }
    };
}

macro_rules! registry {
    ($($variant:ident => $view:ty),* $(,)?) => {
        /// Every view.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ViewKind {
            $(
                #[doc = concat!("`", stringify!($variant), "`: [`", stringify!($view), "`].")]
                $variant
            ),*
        }

        /// A normalised request of some view.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Key {
            $(
                #[doc = concat!("A key of [`", stringify!($view), "`].")]
                $variant(<$view as View>::Key)
            ),*
        }

        /// One frame of some view; serialised as the frame itself.
        #[derive(Debug, Clone, Serialize)]
        #[serde(untagged)]
        pub enum Frame {
            $(
                #[doc = concat!("A frame of [`", stringify!($view), "`].")]
                $variant(<$view as View>::Frame)
            ),*
        }

        #[derive(Debug)]
        enum Subscription {
            $($variant($view)),*
        }

        impl ViewKind {
            /// Every view, in the order `l1gate replay` lists them.
            pub const ALL: &'static [ViewKind] = &[$(ViewKind::$variant),*];

            /// The view's name (`bbo`, `l2book`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $(ViewKind::$variant => <$view as View>::NAME),*
                }
            }

            /// What a lag does to a subscriber of this view.
            pub fn on_lag(self) -> OnLag {
                match self {
                    $(ViewKind::$variant => <$view as View>::ON_LAG),*
                }
            }

            /// What the market must fold for this view.
            pub fn needs(self) -> Needs {
                match self {
                    $(ViewKind::$variant => <$view as View>::NEEDS),*
                }
            }

            /// The step of a block's fold after which the view's frames are
            /// final: a driver publishes them then.
            pub fn ready_after(self) -> Step {
                match self {
                    $(ViewKind::$variant if <$view as View>::FIRST => Step::FirstBooks,)*
                    _ => self.needs().ready_after(),
                }
            }

            /// Whether the view is live only (no opening state).
            pub fn live_only(self) -> bool {
                match self {
                    $(ViewKind::$variant => <$view as View>::LIVE_ONLY),*
                }
            }

            /// The keys `l1gate replay` opens for `selection`, in output
            /// order.
            ///
            /// # Errors
            /// [`ViewError`] when the selection is outside the view's
            /// contract.
            pub fn keys(self, selection: &Selection) -> Result<Vec<Key>, ViewError> {
                Ok(match self {
                    $(ViewKind::$variant => <$view as View>::keys(selection)?
                        .into_iter()
                        .map(Key::$variant)
                        .collect()),*
                })
            }
        }

        impl Key {
            /// The view this key belongs to.
            pub fn kind(&self) -> ViewKind {
                match self {
                    $(Key::$variant(_) => ViewKind::$variant),*
                }
            }

            /// Coins named by the key that must be known to the market.
            pub fn listed_coins(&self) -> Vec<&str> {
                match self {
                    $(Key::$variant(key) => <$view as View>::listed_coins(key)),*
                }
            }

            /// The only coins whose books the key reads, if it names them
            /// (see [`View::book_coins`]).
            pub fn book_coins(&self) -> Option<Vec<&str>> {
                match self {
                    $(Key::$variant(key) => <$view as View>::book_coins(key)),*
                }
            }

            /// Opens a subscription of this key on the market as it stands.
            ///
            /// # Errors
            /// [`ViewError`] when the key is outside its view's contract.
            pub fn open(
                &self,
                market: &mut Market,
                settings: &ViewSettings,
            ) -> Result<(Producer, Vec<Frame>), ViewError> {
                Ok(match self {
                    $(Key::$variant(key) => {
                        let (subscription, frames) =
                            <$view as View>::open(market, key, settings)?;
                        (
                            Producer(Subscription::$variant(subscription)),
                            frames.into_iter().map(Frame::$variant).collect(),
                        )
                    }),*
                })
            }
        }

        impl Producer {
            /// The frames of the block the market just folded.
            pub fn on_block(&mut self, market: &Market) -> Vec<Frame> {
                match &mut self.0 {
                    $(Subscription::$variant(subscription) => subscription
                        .on_block(market)
                        .into_iter()
                        .map(Frame::$variant)
                        .collect()),*
                }
            }

            /// Releases what the subscription holds in the market.
            pub fn close(self, market: &mut Market) {
                match self.0 {
                    $(Subscription::$variant(subscription) => subscription.close(market)),*
                }
            }
        }

        impl Frame {
            /// The view this frame belongs to.
            pub fn kind(&self) -> ViewKind {
                match self {
                    $(Frame::$variant(_) => ViewKind::$variant),*
                }
            }

            /// This subscriber's numbers for the frame (see
            /// [`crate::views::numbering`]).
            pub fn numbers(&self, numbering: &mut Numbering) -> Numbers {
                match self {
                    $(Frame::$variant(frame) => <$view as View>::numbers(frame, numbering)),*
                }
            }

            /// Writes `numbers` into the frame.
            pub fn stamp(&mut self, numbers: &Numbers) {
                match self {
                    $(Frame::$variant(frame) => <$view as View>::stamp(frame, numbers)),*
                }
            }
        }
    };
}

for_each_view!(registry);

/// An open subscription of some view (the engine side of a key).
#[derive(Debug)]
pub struct Producer(Subscription);

impl Frame {
    /// The frame numbered for one subscriber.
    #[must_use]
    pub fn numbered(mut self, numbering: &mut Numbering) -> Frame {
        let numbers = self.numbers(numbering);
        self.stamp(&numbers);
        self
    }
}

impl fmt::Display for ViewKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A view name that is not one of the registry's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown view {0:?}")]
pub struct UnknownView(pub String);

impl FromStr for ViewKind {
    type Err = UnknownView;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ViewKind::ALL
            .iter()
            .copied()
            .find(|view| view.name() == s)
            .ok_or_else(|| UnknownView(s.to_owned()))
    }
}

/// Renderings a batch can keep, one slot each: as many as there are edges
/// rendering frames (gRPC protobuf, the exchange's WebSocket JSON, …).
const RENDER_SLOTS: usize = 4;

/// One edge's rendering of a batch's frames, made once and shared.
pub trait Rendering: Any + Send + Sync {
    /// The batch slot this rendering lives in; each rendering type has its
    /// own (there are four).
    const SLOT: usize;
    /// Renders `batch`.
    fn render(batch: &Batch) -> Self;
}

/// What one key publishes for one block: that block's frames, in order,
/// with each edge's rendering of them cached.
pub struct Batch {
    at: Position,
    /// When the engine published it (Unix ms), if it says.
    made_ms: Option<i64>,
    frames: Vec<Frame>,
    renders: [OnceLock<Box<dyn Any + Send + Sync>>; RENDER_SLOTS],
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("at", &self.at)
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl Batch {
    /// A batch of `frames` made at `at`.
    pub fn new(at: Position, frames: Vec<Frame>) -> Self {
        Self {
            at,
            made_ms: None,
            frames,
            renders: Default::default(),
        }
    }

    /// The same batch, noted as published at `ms` (Unix ms): a live edge
    /// tells a subscriber that fell behind from one reading a burst of
    /// old blocks the node wrote at once.
    #[must_use]
    pub fn made_at(mut self, ms: i64) -> Self {
        self.made_ms = Some(ms);
        self
    }

    /// When the batch was published (Unix ms), if noted.
    pub fn made_ms(&self) -> Option<i64> {
        self.made_ms
    }

    /// Where the market stood when the frames were made.
    pub fn position(&self) -> Position {
        self.at
    }

    /// The frames, in order.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Whether the batch has no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The frames rendered as `R`, made on first use and kept. `None` only
    /// if two rendering types claim one slot (a programming error the
    /// edges' tests would show).
    pub fn rendered<R: Rendering>(&self) -> Option<&R> {
        self.renders
            .get(R::SLOT)?
            .get_or_init(|| Box::new(R::render(self)))
            .downcast_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_names_round_trip() {
        for &view in ViewKind::ALL {
            assert_eq!(view.name().parse::<ViewKind>(), Ok(view));
        }
        assert_eq!(
            "l3book".parse::<ViewKind>(),
            Err(UnknownView("l3book".into()))
        );
        assert_eq!(ViewKind::ALL.len(), 12);
    }

    #[derive(Debug, PartialEq)]
    struct Count(usize);

    impl Rendering for Count {
        const SLOT: usize = 0;
        fn render(batch: &Batch) -> Self {
            Count(batch.frames().len())
        }
    }

    #[test]
    fn a_rendering_is_made_once_and_shared() {
        let batch = Batch::new(Position::default(), Vec::new());
        let first: *const Count = batch.rendered::<Count>().unwrap();
        let second: *const Count = batch.rendered::<Count>().unwrap();
        assert_eq!(first, second);
        assert_eq!(batch.rendered::<Count>(), Some(&Count(0)));
    }
}
