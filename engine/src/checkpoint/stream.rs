//! A checkpoint's archive written while the market is read, one book at a
//! time: what [`Checkpointer`](super::Checkpointer) takes.
//!
//! [`capture`](super::capture) copies the whole state first and serialises
//! it after: simple, but the copy of a mainnet-size book (~60 MB) is held
//! beside the live one until it is written, on top of the server's memory,
//! every time a checkpoint is taken. Here each book's levels and, a part at
//! a time, its orders are copied into reused buffers and serialised into
//! the archive at once, and only where they landed is kept. The root is written last, as
//! rkyv lays it out, from a shell that archives as
//! [`ArchivedCheckpointState`] and points at the arrays already written.
//! The books are the first field with data out of line, so they come
//! first in the archive whichever way it is made: the file is byte for
//! byte the one [`capture`](super::capture) and
//! [`file::encode`](super::file::encode) make, and loads the same way.
//!
//! The TP/SL positions (hundreds of thousands on mainnet, a table that
//! grows with the accounts that trade) are archived the same way, in parts
//! (by the account's first hex digit): each part is sorted from the live
//! table as the archive reaches it, rather than a copy of their texts, and
//! is a list of its own in the archive, so that what rkyv keeps to lay out
//! a list (8 bytes an entry) is a part's worth, not the whole table's.
//!
//! The TP/SL trigger orders are archived from the tracker's table too,
//! each written out as the archive reaches it.
//!
//! What is held meanwhile: a deep book's levels and a part of its orders,
//! the text table, one part of the positions sorted, one trigger order
//! written out and what the sink buffers, rather than a copy of the state.

use std::cell::Cell;
use std::marker::PhantomData;

use rkyv::munge::munge;
use rkyv::rancor::{self, Fallible, Source as _, Strategy};
use rkyv::ser::Serializer;
use rkyv::ser::Writer;
use rkyv::ser::allocator::{Allocator, ArenaHandle};
use rkyv::ser::sharing::Share;
use rkyv::ser::writer::IoWriter;
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::with::{ArchiveWith, SerializeWith};
use rkyv::{Archive, Place, Serialize, SerializeUnsized};

use super::state::{
    ArchivedBookState, ArchivedCheckpointState, ArchivedPositionEntryState, ArchivedTpslState,
    ArchivedTriggerOrderState, CandlesState, CheckpointState, DecimalState, LevelState, OrderState,
    PositionState, ResetState, TextTable, TradesState, UnknownIdsState, capture_levels_into,
    capture_rest,
};
use crate::event::Side;
use crate::market::Market;
use crate::market::tpsl::{TextRoom, TpslView, TriggerRef, TriggerView};
use crate::positions::{POSITION_PARTS, Positions, User};

/// What a streamed archive holds, for its file's header and the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streamed {
    /// The block the state is at ([`CheckpointState::block_number`]).
    pub block_number: u64,
    /// Its time, Unix ms.
    pub time_ms: i64,
    /// What the market folds, as the header's bits.
    pub needs: u8,
    /// Resting orders over every book.
    pub orders: usize,
}

/// Serialises `market`'s checkpoint archive into `out`, positions counted
/// from `start` (the file's header comes before it). Called between two
/// blocks by the market's single writer, like [`capture`](super::capture).
///
/// # Errors
/// When `out` fails (its error is rkyv's, naming the write).
pub fn archive_into<W: std::io::Write>(
    market: &Market,
    out: W,
    start: usize,
) -> Result<(W, Streamed), rancor::Error> {
    rkyv::util::with_arena(|arena| {
        let mut serializer = Serializer::new(
            IoWriter::with_pos(out, start),
            arena.acquire(),
            Share::new(),
        );
        let streamed = serialize(market, &mut serializer)?;
        Ok((serializer.into_writer().into_inner(), streamed))
    })
}

type Out<'a, W> = Serializer<IoWriter<W>, ArenaHandle<'a>, Share>;

fn serialize<W: std::io::Write>(
    market: &Market,
    serializer: &mut Out<'_, W>,
) -> Result<Streamed, rancor::Error> {
    let books = market.fold().books();
    let mut texts = TextTable::default();
    let mut shells = Vec::with_capacity(books.len());
    // One buffer of levels for every book, at the most levels of a book;
    // the orders go a part at a time through a buffer of their own.
    let mut levels: Vec<LevelState> = Vec::new();
    let mut orders: Vec<OrderState> = Vec::with_capacity(ORDERS_AT_ONCE);
    let mut order_count = 0;
    // The books come first among the fields with data out of line, each
    // book's coin, levels and orders in that order: the layout rkyv gives
    // (and its validation expects) for the archive of the whole state.
    for (coin, book) in books.iter() {
        levels.clear();
        let mut resting = capture_levels_into(book, &mut levels);
        order_count += resting.len();
        let coin = Prewritten::new(coin.to_owned(), serializer)?;
        let levels_at = levels
            .as_slice()
            .serialize_unsized(Strategy::wrap(&mut *serializer))?;
        // An archived order has nothing out of line and its size is a
        // multiple of its alignment: parts written one after another lie
        // exactly where the whole array would (the first part aligns).
        let mut orders_at = None;
        while orders_at.is_none() || !resting.done() {
            orders.clear();
            resting.capture_into(ORDERS_AT_ONCE, &mut texts, &mut orders);
            let at = orders
                .as_slice()
                .serialize_unsized(Strategy::wrap(&mut *serializer))?;
            orders_at.get_or_insert(at);
        }
        shells.push(BookShell {
            coin,
            levels: Written::new(levels_at, levels.len()),
            orders: Written::new(orders_at.unwrap_or_default(), resting.len()),
        });
    }
    drop((levels, orders));
    let CheckpointState {
        needs,
        height,
        time_ms,
        books_height,
        books_time_ms,
        blocks_folded,
        events_seen,
        books: _,
        texts: _,
        book_coins,
        unknown_ids,
        pending_resets,
        universe,
        trades,
        fills,
        tpsl,
        candles,
    } = capture_rest(market);
    let tpsl = TpslShell {
        position: tpsl.position,
        max_oid: tpsl.max_oid,
        orders: TriggerList(market.tpsl()),
        positions: PositionList::new(market.tpsl().positions()),
        position_mismatches: tpsl.position_mismatches,
    };
    let root = StateShell {
        needs,
        height,
        time_ms,
        books_height,
        books_time_ms,
        blocks_folded,
        events_seen,
        books: shells,
        texts: Texts(texts.into_list()),
        book_coins,
        unknown_ids,
        pending_resets,
        universe,
        trades,
        fills,
        tpsl,
        candles,
    };
    rkyv::api::serialize_using::<_, rancor::Error>(&root, serializer)?;
    Ok(Streamed {
        block_number: height.unwrap_or(0),
        time_ms,
        needs,
        orders: order_count,
    })
}

/// Orders captured and archived at a time: a deep book is not copied
/// whole (51,000 orders of 96 bytes on mainnet's deepest).
const ORDERS_AT_ONCE: usize = 4096;

/// A value whose data out of line is already in the archive: what is left
/// is to resolve it where its parent lands.
struct Prewritten<T: Archive> {
    value: T,
    resolver: Cell<Option<T::Resolver>>,
}

impl<T: Archive> Prewritten<T> {
    /// Writes `value`'s data out of line now.
    fn new<S>(value: T, serializer: &mut S) -> Result<Self, rancor::Error>
    where
        T: Serialize<Strategy<S, rancor::Error>>,
    {
        let resolver = value.serialize(Strategy::wrap(serializer))?;
        Ok(Self {
            value,
            resolver: Cell::new(Some(resolver)),
        })
    }
}

/// Archives a [`Prewritten`] value as itself.
struct Resolved;

impl<T: Archive> ArchiveWith<Prewritten<T>> for Resolved {
    type Archived = T::Archived;
    type Resolver = T::Resolver;

    fn resolve_with(field: &Prewritten<T>, resolver: T::Resolver, out: Place<Self::Archived>) {
        field.value.resolve(resolver, out);
    }
}

impl<T: Archive, S: Fallible<Error = rancor::Error> + ?Sized> SerializeWith<Prewritten<T>, S>
    for Resolved
{
    fn serialize_with(field: &Prewritten<T>, _: &mut S) -> Result<T::Resolver, rancor::Error> {
        field
            .resolver
            .take()
            .ok_or_else(|| rancor::Error::new(Twice))
    }
}

/// A [`Prewritten`] value resolved twice (a shell serialised twice).
#[derive(Debug)]
struct Twice;

impl std::fmt::Display for Twice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a checkpoint shell was serialised twice")
    }
}

impl std::error::Error for Twice {}

/// An array already in the archive: where its elements begin, and how
/// many there are.
struct Written<T> {
    at: usize,
    len: usize,
    of: PhantomData<T>,
}

impl<T> Written<T> {
    fn new(at: usize, len: usize) -> Self {
        Self {
            at,
            len,
            of: PhantomData,
        }
    }
}

/// Archives a [`Written`] array as the `Vec` it was written from.
struct AsVec;

impl<T: Archive> ArchiveWith<Written<T>> for AsVec {
    type Archived = ArchivedVec<T::Archived>;
    type Resolver = VecResolver;

    fn resolve_with(field: &Written<T>, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(field.len, resolver, out);
    }
}

impl<T: Archive, S: Fallible + ?Sized> SerializeWith<Written<T>, S> for AsVec {
    fn serialize_with(field: &Written<T>, _: &mut S) -> Result<VecResolver, S::Error> {
        Ok(VecResolver::from_pos(field.at))
    }
}

/// A [`BookState`](super::state::BookState) whose coin and arrays are
/// written.
#[derive(Archive, Serialize)]
#[rkyv(as = ArchivedBookState)]
struct BookShell {
    #[rkyv(with = Resolved)]
    coin: Prewritten<String>,
    #[rkyv(with = AsVec)]
    levels: Written<LevelState>,
    #[rkyv(with = AsVec)]
    orders: Written<OrderState>,
}

/// A [`CheckpointState`] whose books are [`BookShell`]s and whose texts and
/// TP/SL positions are borrowed: field for field, in the same order, the
/// same archive.
#[derive(Archive, Serialize)]
#[rkyv(
    as = ArchivedCheckpointState,
    serialize_bounds(__S: Allocator + Writer, <__S as Fallible>::Error: rancor::Source)
)]
struct StateShell<'m> {
    needs: u8,
    height: Option<u64>,
    time_ms: i64,
    books_height: Option<u64>,
    books_time_ms: i64,
    blocks_folded: u64,
    events_seen: u64,
    books: Vec<BookShell>,
    #[rkyv(omit_bounds)]
    texts: Texts<'m>,
    book_coins: Option<Vec<String>>,
    unknown_ids: Vec<UnknownIdsState>,
    pending_resets: Vec<ResetState>,
    universe: Vec<String>,
    trades: TradesState,
    fills: PositionState,
    #[rkyv(omit_bounds)]
    tpsl: TpslShell<'m>,
    candles: CandlesState,
}

/// The text table's strings, borrowed: archived as the `Vec<String>` they
/// were.
struct Texts<'m>(Vec<&'m str>);

impl Archive for Texts<'_> {
    type Archived = ArchivedVec<ArchivedString>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(self.0.len(), resolver, out);
    }
}

impl<S> Serialize<S> for Texts<'_>
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        ArchivedVec::serialize_from_iter::<TextShell<'_>, _, _>(
            self.0.iter().map(|&text| TextShell(text)),
            serializer,
        )
    }
}

/// A [`TpslState`] whose positions are borrowed from the live table: the
/// same archive without a copy of every position's texts.
#[derive(Archive, Serialize)]
#[rkyv(
    as = ArchivedTpslState,
    serialize_bounds(__S: Allocator + Writer, <__S as Fallible>::Error: rancor::Source)
)]
struct TpslShell<'m> {
    position: PositionState,
    max_oid: u64,
    #[rkyv(omit_bounds)]
    orders: TriggerList<'m>,
    #[rkyv(omit_bounds)]
    positions: PositionList<'m>,
    position_mismatches: u64,
}

/// The open positions, borrowed: archived as the parts of entries they
/// were ([`Positions::part`]), each part sorted as the archive reaches it
/// and each entry made as it is archived. rkyv holds what it needs to lay
/// out a list (8 bytes an entry) until the list is written: a part's worth,
/// not the whole table's.
struct PositionList<'m> {
    positions: &'m Positions,
    lens: [usize; POSITION_PARTS as usize],
}

impl<'m> PositionList<'m> {
    fn new(positions: &'m Positions) -> Self {
        Self {
            positions,
            lens: positions.part_lens(),
        }
    }

    fn parts(&self) -> impl ExactSizeIterator<Item = PositionPart<'m>> + Clone + '_ {
        (0..POSITION_PARTS).map(|part| PositionPart {
            positions: self.positions,
            part,
            len: self.lens[usize::from(part)],
        })
    }
}

impl Archive for PositionList<'_> {
    type Archived = ArchivedVec<ArchivedVec<ArchivedPositionEntryState>>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(self.lens.len(), resolver, out);
    }
}

impl<S> Serialize<S> for PositionList<'_>
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        ArchivedVec::serialize_from_iter::<PositionPart<'_>, _, _>(self.parts(), serializer)
    }
}

/// One part of [`PositionList`], of `len` entries.
struct PositionPart<'m> {
    positions: &'m Positions,
    part: u8,
    len: usize,
}

impl Archive for PositionPart<'_> {
    type Archived = ArchivedVec<ArchivedPositionEntryState>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(self.len, resolver, out);
    }
}

impl<S> Serialize<S> for PositionPart<'_>
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        let part = self.positions.part(self.part);
        let shells = part.iter().map(|(user, coin, position)| PositionShell {
            user,
            coin,
            position: position.into(),
        });
        ArchivedVec::serialize_from_iter::<PositionShell<'_>, _, _>(shells, serializer)
    }
}

/// The tracked trigger orders in the archive's order, from the live table:
/// archived as the `Vec` of entries they were, each entry archived from
/// the table as it is ([`TriggerShell`]).
struct TriggerList<'m>(&'m TpslView);

impl Archive for TriggerList<'_> {
    type Archived = ArchivedVec<ArchivedTriggerOrderState>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(self.0.orders().len(), resolver, out);
    }
}

impl<S> Serialize<S> for TriggerList<'_>
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        let shells = self.0.orders().map(TriggerShell);
        ArchivedVec::serialize_from_iter::<TriggerShell<'_>, _, _>(shells, serializer)
    }
}

/// A [`TriggerOrderState`], borrowed from the table: its texts are
/// borrowed, or written into room on the stack each time they are needed
/// (once to write them, once to lay the entry out), never allocated — a
/// checkpoint archives every tracked order on the engine thread.
struct TriggerShell<'m>(TriggerRef<'m>);

/// What [`TriggerShell`] wrote, for its entry's layout.
struct TriggerResolver {
    coin: StringResolver,
    user: StringResolver,
    trigger_px: <DecimalState as Archive>::Resolver,
    limit_px: <DecimalState as Archive>::Resolver,
    orig_sz: <DecimalState as Archive>::Resolver,
    trigger_condition: StringResolver,
    order_type: StringResolver,
    cloid: Option<StringResolver>,
    sz: <DecimalState as Archive>::Resolver,
}

impl Archive for TriggerShell<'_> {
    type Archived = ArchivedTriggerOrderState;
    type Resolver = TriggerResolver;

    fn resolve(&self, resolver: TriggerResolver, out: Place<ArchivedTriggerOrderState>) {
        let mut room = TextRoom::new();
        let order: TriggerView<'_> = self.0.view(&mut room);
        munge!(let ArchivedTriggerOrderState {
            coin, user, oid, bid, trigger_px, limit_px, orig_sz, trigger_condition, order_type,
            is_position_tpsl, reduce_only, timestamp, cloid, sz,
        } = out);
        ArchivedString::resolve_from_str(order.coin, resolver.coin, coin);
        ArchivedString::resolve_from_str(order.user, resolver.user, user);
        order.oid.resolve((), oid);
        (order.side == Side::Bid).resolve((), bid);
        DecimalState::from(order.trigger_px).resolve(resolver.trigger_px, trigger_px);
        DecimalState::from(order.limit_px).resolve(resolver.limit_px, limit_px);
        DecimalState::from(order.orig_sz).resolve(resolver.orig_sz, orig_sz);
        let condition = order.trigger_condition;
        ArchivedString::resolve_from_str(condition, resolver.trigger_condition, trigger_condition);
        ArchivedString::resolve_from_str(order.order_type, resolver.order_type, order_type);
        order.is_position_tpsl.resolve((), is_position_tpsl);
        order.reduce_only.resolve((), reduce_only);
        order.timestamp.resolve((), timestamp);
        order.cloid.map(TextShell).resolve(resolver.cloid, cloid);
        DecimalState::from(order.sz).resolve(resolver.sz, sz);
    }
}

impl<S> Serialize<S> for TriggerShell<'_>
where
    S: Fallible + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<TriggerResolver, S::Error> {
        let mut room = TextRoom::new();
        let order = self.0.view(&mut room);
        // In the fields' order, as the derived archive writes them.
        Ok(TriggerResolver {
            coin: ArchivedString::serialize_from_str(order.coin, serializer)?,
            user: ArchivedString::serialize_from_str(order.user, serializer)?,
            trigger_px: DecimalState::from(order.trigger_px).serialize(serializer)?,
            limit_px: DecimalState::from(order.limit_px).serialize(serializer)?,
            orig_sz: DecimalState::from(order.orig_sz).serialize(serializer)?,
            trigger_condition: ArchivedString::serialize_from_str(
                order.trigger_condition,
                serializer,
            )?,
            order_type: ArchivedString::serialize_from_str(order.order_type, serializer)?,
            cloid: order.cloid.map(TextShell).serialize(serializer)?,
            sz: DecimalState::from(order.sz).serialize(serializer)?,
        })
    }
}

/// A text of the table, borrowed: archived as the `String` it was.
struct TextShell<'m>(&'m str);

impl Archive for TextShell<'_> {
    type Archived = ArchivedString;
    type Resolver = StringResolver;

    fn resolve(&self, resolver: StringResolver, out: Place<ArchivedString>) {
        ArchivedString::resolve_from_str(self.0, resolver, out);
    }
}

impl<S> Serialize<S> for TextShell<'_>
where
    S: Fallible + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<StringResolver, S::Error> {
        ArchivedString::serialize_from_str(self.0, serializer)
    }
}

/// A [`PositionEntryState`](super::state::PositionEntryState), borrowed.
struct PositionShell<'m> {
    user: User<'m>,
    coin: &'m str,
    position: DecimalState,
}

impl Archive for PositionShell<'_> {
    type Archived = ArchivedPositionEntryState;
    type Resolver = (
        StringResolver,
        StringResolver,
        <DecimalState as Archive>::Resolver,
    );

    fn resolve(&self, resolver: Self::Resolver, out: Place<ArchivedPositionEntryState>) {
        munge!(let ArchivedPositionEntryState { user, coin, position } = out);
        ArchivedString::resolve_from_str(self.user.as_str(&mut [0; 42]), resolver.0, user);
        ArchivedString::resolve_from_str(self.coin, resolver.1, coin);
        self.position.resolve(resolver.2, position);
    }
}

impl<S> Serialize<S> for PositionShell<'_>
where
    S: Fallible + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize(&self, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        Ok((
            ArchivedString::serialize_from_str(self.user.as_str(&mut [0; 42]), serializer)?,
            ArchivedString::serialize_from_str(self.coin, serializer)?,
            self.position.serialize(serializer)?,
        ))
    }
}
