//! The byte-level scan of a block's order statuses: what it counts, files
//! raw and decodes (the book's openings, the trigger tap's statuses).

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use bytes::Bytes;
use feeds::envelope;
use memchr::arch::all::packedpair::HeuristicFrequencyRank;
use memchr::memmem;

use crate::block::{Block, BlockDecodeError};
use crate::coin::is_perp;
use crate::event::{
    self, OrderStatusEvent, decode_order_status, decode_order_status_at, plain_string,
};

use super::report::{BlockChanges, BlockReport};

/// The statuses the TP/SL tracker acts on, collected during the status scan.
pub(super) struct TriggerTap<'a, 'w> {
    pub(super) tracked: &'w dyn Fn(u64) -> bool,
    /// Trigger orders opened earlier in this block (not tracked yet).
    pub(super) opened: Vec<u64>,
    pub(super) statuses: Vec<OrderStatusEvent<'a>>,
}

impl<'a, 'w> TriggerTap<'a, 'w> {
    pub(super) fn new(tracked: &'w dyn Fn(u64) -> bool) -> Self {
        Self {
            tracked,
            opened: Vec::new(),
            statuses: Vec::new(),
        }
    }

    /// Whether statuses of `oid` are wanted.
    pub(super) fn wants(&self, oid: u64) -> bool {
        (self.tracked)(oid) || self.opened.contains(&oid)
    }

    /// Keeps `event` when the tracker acts on it.
    pub(super) fn offer(&mut self, event: &OrderStatusEvent<'a>) {
        let order = &event.order;
        if !is_perp(order.coin) {
            return;
        }
        if event.status == "open" && order.is_trigger {
            self.opened.push(order.oid);
        } else if !self.wants(order.oid) {
            return;
        }
        self.statuses.push(event.clone());
    }

    /// Where the tap stands, to take back what a line added.
    pub(super) fn mark(&self) -> (usize, usize) {
        (self.opened.len(), self.statuses.len())
    }

    pub(super) fn rewind(&mut self, (opened, statuses): (usize, usize)) {
        self.opened.truncate(opened);
        self.statuses.truncate(statuses);
    }
}

/// `list` emptied, as a list of another item type — in practice the same
/// type borrowing something else, so that a list kept across blocks can hold
/// the next block's borrows. Collecting an emptied `Vec`'s own iterator into
/// a `Vec` of a same-sized type reuses its memory in place.
pub(super) fn emptied<T, U>(mut list: Vec<T>) -> Vec<U> {
    list.clear();
    // `filter_map` to nothing, not `filter`: the item type changes.
    #[allow(clippy::unnecessary_filter_map)]
    list.into_iter().filter_map(|_| None).collect()
}

/// A block's opening statuses by oid (a later one for the same oid replaces
/// the earlier). The engine keeps one between blocks, emptied: the table and
/// the list are allocated once, not per block.
#[derive(Debug, Default)]
pub(super) struct Openings<'a> {
    pub(super) index: HashMap<u64, usize, foldhash::fast::RandomState>,
    pub(super) events: Vec<OrderStatusEvent<'a>>,
}

impl<'a> Openings<'a> {
    pub(super) fn insert(&mut self, event: OrderStatusEvent<'a>) {
        match self.index.entry(event.order.oid) {
            Entry::Occupied(held) => {
                if let Some(slot) = self.events.get_mut(*held.get()) {
                    *slot = event;
                }
            }
            Entry::Vacant(vacant) => {
                vacant.insert(self.events.len());
                self.events.push(event);
            }
        }
    }

    pub(super) fn get(&self, oid: u64) -> Option<&OrderStatusEvent<'a>> {
        self.events.get(*self.index.get(&oid)?)
    }

    /// Empties the table for the next block, whose statuses borrow other
    /// lines; both allocations carry over (see [`emptied`]).
    pub(super) fn recycle(mut self) -> Openings<'static> {
        self.index.clear();
        Openings {
            index: self.index,
            events: emptied(self.events),
        }
    }
}

/// What one block's status scan serves besides counting: the raw events of
/// some coins, the book's openings (absent when the books are not folded),
/// the trigger tap (absent without a trigger watch).
pub(super) struct StatusScan<'s, 'a, 'w> {
    pub(super) raw_coins: &'s BTreeSet<String>,
    pub(super) raw_users: &'s BTreeSet<String>,
    /// The coins whose books are kept (`None`: all): openings of others are
    /// not wanted.
    pub(super) book_coins: Option<&'s BTreeSet<String>>,
    pub(super) openings: Option<&'s mut Openings<'a>>,
    pub(super) tap: Option<&'s mut TriggerTap<'a, 'w>>,
}

impl<'a> StatusScan<'_, 'a, '_> {
    /// Hands a decoded status to the openings and the tap.
    pub(super) fn take(&mut self, event: OrderStatusEvent<'a>) {
        if let Some(tap) = self.tap.as_deref_mut() {
            tap.offer(&event);
        }
        if event.opens_resting_order()
            && self.keeps(event.order.coin.as_bytes())
            && let Some(openings) = self.openings.as_deref_mut()
        {
            openings.insert(event);
        }
    }

    /// Whether an opening of `coin` is wanted by the books.
    pub(super) fn keeps(&self, coin: &[u8]) -> bool {
        self.book_coins
            .is_none_or(|coins| std::str::from_utf8(coin).is_ok_and(|coin| coins.contains(coin)))
    }

    /// Whether an opening whose order's coin is `coin` (`None`: not read
    /// from the bytes) can be passed over undecoded: its book is not kept
    /// and no trigger tap looks at openings.
    pub(super) fn passes_over(&self, coin: Option<&[u8]>) -> bool {
        self.tap.is_none() && coin.is_some_and(|coin| !self.keeps(coin))
    }

    /// Whether a status that opens nothing must be decoded: the tap
    /// watches its order.
    pub(super) fn wants(&self, oid: Option<u64>) -> bool {
        self.tap
            .as_deref()
            .is_some_and(|tap| oid.is_some_and(|oid| tap.wants(oid)))
    }
}

/// Walks every status: counts it, files its bytes for coins a view wants raw,
/// and fully decodes only the statuses that can open a resting order (into
/// the openings) or that the trigger tap wants.
pub(super) fn scan_statuses<'a>(
    block: &'a Block,
    mut scan: StatusScan<'_, 'a, '_>,
    changes: &mut BlockChanges,
    report: &mut BlockReport,
) {
    let raw_wanted = !scan.raw_coins.is_empty() || !scan.raw_users.is_empty();
    if scan.openings.is_none() && scan.tap.is_none() && !raw_wanted {
        report.events += count_events(&block.lines.order_statuses, block.number, report);
        return;
    }
    for line in &block.lines.order_statuses {
        if !raw_wanted && let Some(events) = scan_openings(line, &mut scan) {
            report.events += events;
            continue;
        }
        for_each_span(line, block.number, report, |raw, report| {
            report.events += 1;
            if !scan.raw_users.is_empty()
                && let Some(user) = status_user(raw)
            {
                // The node writes addresses lowercase; matched as such.
                let user = if user.bytes().any(|b| b.is_ascii_uppercase()) {
                    std::borrow::Cow::Owned(user.to_ascii_lowercase())
                } else {
                    std::borrow::Cow::Borrowed(user)
                };
                if scan.raw_users.contains(user.as_ref()) {
                    changes
                        .raw_users
                        .push((user.into_owned(), line.slice_ref(raw)));
                }
            }
            let scanned = scan_status(raw);
            if let Some((_, coin)) = scanned
                && scan.raw_coins.contains(coin)
            {
                changes
                    .raw
                    .entry(coin.to_owned())
                    .or_default()
                    .order_statuses
                    .push(line.slice_ref(raw));
            }
            if let Some((status, coin)) = scanned
                && (status == b"open" || status == b"triggered")
                && scan.passes_over(Some(coin.as_bytes()))
            {
                return;
            }
            if let Some((status, _)) = scanned
                && status != b"open"
                && status != b"triggered"
                && (scan.tap.is_none()
                    || status == NEVER_A_TRIGGER
                    || status_oid(raw).is_some_and(|oid| !scan.wants(Some(oid))))
            {
                return;
            }
            match decode_order_status(raw) {
                Ok(event) => {
                    if scanned.is_none() && scan.raw_coins.contains(event.order.coin) {
                        changes
                            .raw
                            .entry(event.order.coin.to_owned())
                            .or_default()
                            .order_statuses
                            .push(line.slice_ref(raw));
                    }
                    scan.take(event);
                }
                Err(error) => report.decode_errors.push(BlockDecodeError::Event {
                    block: block.number,
                    error,
                }),
            }
        });
    }
}

/// The fast walk of one status line when no view wants raw statuses: the
/// events are counted by their `"status":"` keys and only the openings
/// (`open`, `triggered`) and the statuses the trigger tap watches are
/// delimited and decoded, so the rejections that make up most of the bytes
/// are passed over at `memmem` speed instead of being walked bracket by
/// bracket (with a tap, each one's order id is read where it stands).
///
/// It leans on the node's layout, checked as it goes: each event is an object
/// whose first key is `"time"` and which holds one `"status"` key (order
/// objects have none), followed by its order with its `"oid"`. A key
/// sequence can only occur outside strings in valid JSON, so every status key
/// is seen. A status value is compared with `open"` and `triggered"` where it
/// starts; any other value (a rejection) is passed over unread. Anything
/// unexpected — a backslash where an escape could spell an opening, no
/// `{"time":` between a decoded status and the previous event's status, no
/// order id after a status the tap asks about, a status that does not decode
/// or does not span its own status key — answers `None` before anything is
/// counted or reported, and the caller walks the line exactly instead (which
/// reports what is wrong). Openings inserted before such a line is abandoned
/// are inserted again, identically, by the exact walk; what the tap took from
/// the line is taken back first.
pub(super) fn scan_openings<'a>(
    line: &'a Bytes,
    scan: &mut StatusScan<'_, 'a, '_>,
) -> Option<usize> {
    let mark = scan.tap.as_deref().map(TriggerTap::mark);
    let counted = scan_line(line, scan);
    if counted.is_none()
        && let (Some(tap), Some(mark)) = (scan.tap.as_deref_mut(), mark)
    {
        tap.rewind(mark);
    }
    counted
}

pub(super) fn scan_line<'a>(line: &'a Bytes, scan: &mut StatusScan<'_, 'a, '_>) -> Option<usize> {
    let line: &'a [u8] = line;
    let env = envelope::decode(line).ok()?;
    let body = env.events.start + 1..env.events.end - 1;
    let mut events = 0;
    // Where the previous event's status value starts: the next event starts
    // after it.
    let mut floor = body.start;
    for hit in STATUS_KEY.find_iter(&line[body.clone()]) {
        let key = body.start + hit;
        let value_at = key + STATUS_KEY.needle().len();
        events += 1;
        // Only an opening's value is read through; a rejection's is passed
        // over by the next key search. A value could spell `open` with
        // escapes only by having a backslash among its first nine bytes
        // (`triggered` is nine letters): such a line is walked exactly.
        let value = &line[value_at..body.end];
        if backslash_in_first_nine(value) {
            return None;
        }
        let opening = (value.starts_with(b"open\"") || value.starts_with(b"triggered\""))
            && !scan.passes_over(order_coin(value));
        let tapped = || -> Option<bool> {
            Some(
                scan.tap.is_some()
                    && !never_a_trigger(value)
                    && scan.wants(Some(order_oid(value)?)),
            )
        };
        if opening || tapped()? {
            let start = floor + EVENT_START.find(&line[floor..key])?;
            let rest = &line[start..body.end];
            let (event, len) = if let Some(decoded) = decode_order_status_at(rest) {
                decoded
            } else {
                let end = envelope::skip_value(rest, 0).ok()?;
                (decode_order_status(&rest[..end]).ok()?, end)
            };
            if start + len <= key {
                return None;
            }
            scan.take(event);
        }
        floor = value_at;
    }
    Some(events)
}

/// Whether one of the first nine bytes of `value` is a backslash: a word
/// test on the first eight (a `memchr` call costs more than the test).
pub(super) fn backslash_in_first_nine(value: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let mut head = [0u8; 9];
    let len = value.len().min(9);
    head[..len].copy_from_slice(&value[..len]);
    let (first, ninth) = head.split_at(8);
    let first = first.try_into().map_or(0, u64::from_le_bytes);
    let word = first ^ (ONES * u64::from(b'\\'));
    // A byte of `word` is zero exactly where `value` has a backslash.
    word.wrapping_sub(ONES) & !word & (ONES << 7) != 0 || ninth == [b'\\']
}

/// The `status` value and the order's `coin` read straight from the bytes,
/// or `None` when either is not a plain string (then the event is decoded).
/// The first `"status":"` is the event's own key (order objects have none),
/// and the first `"coin":"` belongs to the order (its children share it).
pub(super) fn scan_status(raw: &[u8]) -> Option<(&[u8], &str)> {
    let status = string_after(raw, &STATUS_KEY)?;
    let coin = string_after(raw, &COIN_KEY)?;
    Some((status, std::str::from_utf8(coin).ok()?))
}

/// The owner of a status where the node writes it, near the start of the
/// event (`{"time":"…","user":"0x…",`), if it is a plain lowercase-able
/// string there.
pub(super) fn status_user(raw: &[u8]) -> Option<&str> {
    let head = &raw[..raw.len().min(96)];
    std::str::from_utf8(string_after(head, &USER_KEY)?).ok()
}

/// The status most of a block's bytes are (an add-liquidity-only order whose
/// price would have crossed). It is never about a trigger order — trigger
/// orders carry no time in force, and only ALO orders are refused for their
/// price — so the trigger tap passes it over without reading its order id.
pub(super) const NEVER_A_TRIGGER: &[u8] = b"badAloPxRejected";

/// Whether the status value that starts `value` (after its opening quote)
/// is [`NEVER_A_TRIGGER`].
pub(super) fn never_a_trigger(value: &[u8]) -> bool {
    value
        .get(..NEVER_A_TRIGGER.len() + 1)
        .is_some_and(|head| head.starts_with(NEVER_A_TRIGGER) && head.ends_with(b"\""))
}

/// The order id of a status read where the node writes it: `value` starts
/// with the status value (after its opening quote), which the order object
/// follows (`","order":{…"oid":N`). `None` when the bytes are laid out any
/// other way (an escape in the status, another key after it).
pub(super) fn order_oid(value: &[u8]) -> Option<u64> {
    let len = plain_string(value)?.len();
    let order = value.get(len + 1..)?.strip_prefix(b",\"order\":{")?;
    let at = OID_KEY.find(order)? + OID_KEY.needle().len();
    event::leading_unsigned(&order[at..]).map(|(oid, _)| oid)
}

/// The order's coin of a status read where the node writes it (see
/// [`order_oid`]: `","order":{"coin":"…"`), or `None` when the bytes are
/// laid out any other way.
pub(super) fn order_coin(value: &[u8]) -> Option<&[u8]> {
    let len = plain_string(value)?.len();
    let order = value
        .get(len + 1..)?
        .strip_prefix(b",\"order\":{\"coin\":\"")?;
    plain_string(order)
}

/// The order id of one status event's bytes, read as [`order_oid`] does.
pub(super) fn status_oid(raw: &[u8]) -> Option<u64> {
    let at = STATUS_KEY.find(raw)? + STATUS_KEY.needle().len();
    order_oid(&raw[at..])
}

/// Searchers for the keys [`scan_status`] and [`scan_openings`] look for,
/// built once: building a searcher costs more than running it over one
/// status.
pub(super) static STATUS_KEY: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
    memmem::FinderBuilder::new().build_forward_with_ranker(NodeJsonRank, b"\"status\":\"")
});
pub(super) static EVENT_START: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
    memmem::FinderBuilder::new().build_forward_with_ranker(NodeJsonRank, b"{\"time\":")
});
pub(super) static COIN_KEY: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"coin\":\""));
pub(super) static USER_KEY: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"user\":\""));
pub(super) static OID_KEY: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"oid\":"));

/// Byte frequencies of node lines for `memmem`'s candidate filter, which
/// looks for the needle's two rarest bytes first. Its default ranking (from
/// text and source code) counts quotes and colons as rare; in node JSON they
/// are the commonest bytes, and hex digits fill addresses, hashes and
/// numbers. Ranking them as frequent makes the filter pick the needle's
/// letters, so it stops at a handful of places per event instead of at every
/// key.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeJsonRank;

impl HeuristicFrequencyRank for NodeJsonRank {
    fn rank(&self, byte: u8) -> u8 {
        match byte {
            b'"' | b':' | b',' => 255,
            b'0'..=b'9' | b'a'..=b'f' => 250,
            b'{' | b'}' | b'.' | b'x' => 245,
            b'g'..=b'z' => 150,
            b'A'..=b'Z' => 100,
            _ => 50,
        }
    }
}

pub(super) fn string_after<'a>(raw: &'a [u8], key: &memmem::Finder<'_>) -> Option<&'a [u8]> {
    let start = key.find(raw)? + key.needle().len();
    plain_string(&raw[start..])
}

pub(super) fn for_each_span<'a>(
    line: &'a Bytes,
    block: u64,
    report: &mut BlockReport,
    mut visit: impl FnMut(&'a [u8], &mut BlockReport),
) {
    for_each_event(
        line,
        block,
        report,
        |_| None::<((), usize)>,
        |raw, _, report| visit(raw, report),
    );
}

/// Visits each event of a line with its exact bytes. `fast` is tried at
/// each event's start first — a decoder of the node's compact layout that
/// says how many bytes it read — so an event it decodes is delimited by that
/// decode and handed over decoded (`Some`); any other event is delimited by
/// the bracket walk and handed over undecoded (`None`). Envelope errors are
/// reported and end the line.
pub(super) fn for_each_event<'a, T>(
    line: &'a Bytes,
    block: u64,
    report: &mut BlockReport,
    fast: impl Fn(&'a [u8]) -> Option<(T, usize)>,
    mut visit: impl FnMut(&'a [u8], Option<T>, &mut BlockReport),
) {
    let line_bytes: &'a [u8] = line;
    let env = match envelope::decode(line_bytes) {
        Ok(env) => env,
        Err(error) => {
            report
                .decode_errors
                .push(BlockDecodeError::Envelope { block, error });
            return;
        }
    };
    let mut spans = env.events();
    loop {
        let mut decoded = None;
        let next = spans.next_measured(|rest| {
            let (event, len) = fast(rest)?;
            decoded = Some(event);
            Some(len)
        });
        match next {
            None => return,
            Some(Ok(span)) => visit(&line_bytes[span], decoded, report),
            Some(Err(error)) => {
                report
                    .decode_errors
                    .push(BlockDecodeError::Envelope { block, error });
                return;
            }
        }
    }
}

pub(super) fn count_events(lines: &[Bytes], block: u64, report: &mut BlockReport) -> usize {
    let mut count = 0;
    for line in lines {
        for_each_span(line, block, report, |_, _| count += 1);
    }
    count
}
