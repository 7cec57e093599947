//! The Wing–Gong search with Lowe's memoisation, as in Porcupine and Knossos.
//!
//! The history of one partition becomes a doubly linked list of call and
//! return entries in time order. Walking from the head, a call entry is
//! *linearized* if the model accepts its operation in the current state and
//! the pair (set of linearized operations, new state) was never seen before;
//! the operation's call and return entries are then lifted out of the list
//! and the walk restarts at the head. Reaching a return entry means the
//! operation it closes can no longer be placed: pop the last linearized
//! operation, put its entries back and try the next call after it. An empty
//! stack at that point proves the history is not linearizable.
//!
//! Operations whose outcome is unknown have no return entry: nothing forces
//! them to be placed, which is "never took effect", and when tried they may
//! be placed anywhere after their call. Reaching the end of the list (only
//! such calls left) proves linearizability.
//!
//! The memo stores the linearized set exactly but compactly: operations are
//! numbered in call order, so the set is almost always "everything below some
//! index, plus a few recent ones". A key is the state, the index of the first
//! 64-bit word that is not all ones, and the words from there to the last
//! non-zero one.
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Applies operation `op` (an index into the partition) to interned state `s`.
pub(crate) trait Stepper {
    /// The new state, or `None` if the model forbids the operation here.
    fn step(&mut self, s: u32, op: usize) -> Option<u32>;

    /// True if `op` never changes the state (a read): `step` gives either
    /// `None` or `Some(s)`. Such an operation, when legal, is placed at once
    /// and that choice is never revisited (see [`search`]).
    fn is_read_only(&self, _op: usize) -> bool {
        false
    }
}

/// Times of one operation. Operations must be sorted by `call`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub call: u64,
    /// `None`: unknown outcome, never forced.
    pub ret: Option<u64>,
}

/// Result of one search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    Linearizable,
    Illegal,
    Timeout,
}

/// When to give up: a wall-clock deadline and/or a shared cancel flag.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Deadline<'a> {
    pub at: Option<Instant>,
    pub cancel: Option<&'a AtomicBool>,
}

impl Deadline<'_> {
    pub fn expired(&self) -> bool {
        self.at.is_some_and(|t| Instant::now() >= t)
            || self.cancel.is_some_and(|c| c.load(Ordering::Relaxed))
    }
}

/// Statistics of one search, for the benchmark.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stats {
    pub steps: u64,
    pub memo: usize,
}

const END: u32 = u32::MAX;
const NONE: u32 = u32::MAX;

/// The entries in time order as a doubly linked list over indices; the
/// sentinel `head` is the last index.
struct List {
    next: Vec<u32>,
    prev: Vec<u32>,
    /// The operation of each entry.
    op: Vec<u32>,
    /// Whether each entry is a call.
    is_call: Vec<bool>,
    /// For a call entry, its return entry (`NONE` for an unknown outcome).
    ret_of: Vec<u32>,
    head: u32,
}

impl List {
    fn new(spans: &[Span]) -> List {
        // (time, 0 = call / 1 = return, op): a call at the same instant as a
        // return sorts first, so the two are concurrent.
        let mut ev: Vec<(u64, u8, u32)> = Vec::with_capacity(spans.len() * 2);
        for (i, s) in spans.iter().enumerate() {
            ev.push((s.call, 0, i as u32));
            if let Some(r) = s.ret {
                ev.push((r.max(s.call), 1, i as u32));
            }
        }
        ev.sort_unstable();
        let m = ev.len();
        let head = m as u32;
        let mut next = vec![END; m + 1];
        let mut prev = vec![NONE; m + 1];
        let mut op = vec![0; m];
        let mut ret_of = vec![NONE; m];
        let mut is_call = vec![false; m];
        let mut call_entry = vec![NONE; spans.len()];
        let mut last = head;
        for (e, &(_, kind, o)) in ev.iter().enumerate() {
            let e = e as u32;
            op[e as usize] = o;
            if kind == 0 {
                is_call[e as usize] = true;
                call_entry[o as usize] = e;
            } else {
                ret_of[call_entry[o as usize] as usize] = e;
            }
            next[last as usize] = e;
            prev[e as usize] = last;
            last = e;
        }
        List {
            next,
            prev,
            op,
            is_call,
            ret_of,
            head,
        }
    }

    fn unlink(&mut self, e: u32) {
        let (p, n) = (self.prev[e as usize], self.next[e as usize]);
        self.next[p as usize] = n;
        if n != END {
            self.prev[n as usize] = p;
        }
    }

    fn relink(&mut self, e: u32) {
        let (p, n) = (self.prev[e as usize], self.next[e as usize]);
        self.next[p as usize] = e;
        if n != END {
            self.prev[n as usize] = e;
        }
    }

    /// Removes call entry `c` and its return entry.
    fn lift(&mut self, c: u32) {
        self.unlink(c);
        let r = self.ret_of[c as usize];
        if r != NONE {
            self.unlink(r);
        }
    }

    /// Undoes `lift(c)`; must be called in reverse order of lifts.
    fn unlift(&mut self, c: u32) {
        let r = self.ret_of[c as usize];
        if r != NONE {
            self.relink(r);
        }
        self.relink(c);
    }
}

/// FxHash (rustc's hasher): fast, and the memo keys are not adversarial.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

/// The set of linearized operations, with the bookkeeping for compact keys.
struct Bits {
    words: Vec<u64>,
    /// No word below `full` is partial (all below are all ones).
    full: usize,
    /// No word at or above `top` is non-zero.
    top: usize,
}

impl Bits {
    fn new(n: usize) -> Bits {
        Bits {
            words: vec![0; n.div_ceil(64)],
            full: 0,
            top: 0,
        }
    }

    fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
        self.top = self.top.max(i / 64 + 1);
    }

    fn clear(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
        self.full = self.full.min(i / 64);
    }

    /// The memo key of (this set, `state`).
    fn key(&mut self, state: u32) -> Key {
        while self.full < self.words.len() && self.words[self.full] == u64::MAX {
            self.full += 1;
        }
        while self.top > self.full && self.words[self.top - 1] == 0 {
            self.top -= 1;
        }
        let lo = self.full;
        let hi = self.top.max(lo);
        let header = ((lo as u64) << 32) | state as u64;
        let window = &self.words[lo..hi];
        if window.len() < INLINE {
            let mut w = [0; INLINE];
            w[0] = header;
            w[1..=window.len()].copy_from_slice(window);
            Key { w, spill: None }
        } else {
            let mut w = [0; INLINE];
            w[0] = header;
            Key {
                w,
                spill: Some(window.into()),
            }
        }
    }
}

const INLINE: usize = 4;

/// A memo key: `w[0]` = first partial word << 32 | state, then the window of
/// the bitset, inline when it has fewer than `INLINE` words (no allocation).
/// Trailing zero words are never stored, so equal sets give equal keys.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Key {
    w: [u64; INLINE],
    spill: Option<Box<[u64]>>,
}

/// Decides whether the operations `spans` (sorted by call), interpreted by
/// `stepper` from state `init`, can be linearized.
pub(crate) fn search(
    spans: &[Span],
    init: u32,
    stepper: &mut impl Stepper,
    deadline: Deadline<'_>,
) -> (Found, Stats) {
    debug_assert!(spans.windows(2).all(|w| w[0].call <= w[1].call));
    let mut list = List::new(spans);
    let mut bits = Bits::new(spans.len());
    let mut memo: HashSet<Key, FxBuild> = HashSet::default();
    let mut stack: Vec<Frame> = Vec::new();
    let mut state = init;
    let mut stats = Stats::default();
    let mut entry = list.next[list.head as usize];
    let mut fresh = true; // `entry` is the first entry of a new node
    loop {
        stats.steps += 1;
        if stats.steps % 4096 == 0 && deadline.expired() {
            stats.memo = memo.len();
            return (Found::Timeout, stats);
        }
        if entry == END {
            // Only calls of unknown-outcome operations are left.
            stats.memo = memo.len();
            return (Found::Linearizable, stats);
        }
        if fresh {
            fresh = false;
            // A legal read placed now loses nothing: it changes no state and
            // every operation that must precede it is already placed. So
            // if this child fails, the whole node fails.
            if let Some(c) = legal_read(&list, stepper, state) {
                let op = list.op[c as usize] as usize;
                bits.set(op);
                if memo_insert(&mut memo, bits.key(state)) {
                    stack.push(Frame {
                        call: c,
                        state,
                        forced: true,
                    });
                    list.lift(c);
                    entry = list.next[list.head as usize];
                    fresh = true;
                    continue;
                }
                bits.clear(op);
                match backtrack(&mut list, &mut bits, &mut stack, &mut state) {
                    Some(e) => entry = e,
                    None => {
                        stats.memo = memo.len();
                        return (Found::Illegal, stats);
                    }
                }
                continue;
            }
        }
        let e = entry as usize;
        if list.is_call[e] {
            let op = list.op[e] as usize;
            if let Some(next_state) = stepper.step(state, op) {
                bits.set(op);
                if memo_insert(&mut memo, bits.key(next_state)) {
                    stack.push(Frame {
                        call: entry,
                        state,
                        forced: false,
                    });
                    state = next_state;
                    list.lift(entry);
                    entry = list.next[list.head as usize];
                    fresh = true;
                    continue;
                }
                bits.clear(op);
            }
            entry = list.next[e];
        } else {
            // The operation closed here was not placed: undo the last choice.
            match backtrack(&mut list, &mut bits, &mut stack, &mut state) {
                Some(e) => entry = e,
                None => {
                    stats.memo = memo.len();
                    return (Found::Illegal, stats);
                }
            }
        }
    }
}

/// Memo entries kept at most (about 64 bytes each). Forgetting them costs
/// time, never correctness: the memo only prunes configurations already
/// known to fail.
const MEMO_CAP: usize = 1 << 22;

fn memo_insert(memo: &mut HashSet<Key, FxBuild>, k: Key) -> bool {
    if memo.len() >= MEMO_CAP {
        memo.clear();
    }
    memo.insert(k)
}

/// One placed operation: its call entry and the state before it.
struct Frame {
    call: u32,
    state: u32,
    /// Placed as a legal read: no alternative needs trying at its node.
    forced: bool,
}

/// The first enabled call (before the first remaining return) that is a
/// read legal in `state`.
fn legal_read(list: &List, stepper: &mut impl Stepper, state: u32) -> Option<u32> {
    let mut e = list.next[list.head as usize];
    while e != END && list.is_call[e as usize] {
        let op = list.op[e as usize] as usize;
        if stepper.is_read_only(op) && stepper.step(state, op).is_some() {
            return Some(e);
        }
        e = list.next[e as usize];
    }
    None
}

/// Undoes placements up to and including the last unforced one and returns
/// the entry to try next at its node; `None` if nothing is left to undo.
fn backtrack(
    list: &mut List,
    bits: &mut Bits,
    stack: &mut Vec<Frame>,
    state: &mut u32,
) -> Option<u32> {
    loop {
        let f = stack.pop()?;
        bits.clear(list.op[f.call as usize] as usize);
        *state = f.state;
        list.unlift(f.call);
        if !f.forced {
            return Some(list.next[f.call as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register over small integers: op = (is_write, value).
    struct Reg(Vec<(bool, u32)>);
    impl Stepper for Reg {
        fn step(&mut self, s: u32, op: usize) -> Option<u32> {
            let (w, v) = self.0[op];
            if w {
                Some(v)
            } else {
                (s == v).then_some(s)
            }
        }
    }

    fn sp(call: u64, ret: u64) -> Span {
        Span {
            call,
            ret: Some(ret),
        }
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        // w(1) [0,10] overlaps r->0 [1,2] and r->1 [3,4]
        let spans = [sp(0, 10), sp(1, 2), sp(3, 4)];
        let mut m = Reg(vec![(true, 1), (false, 0), (false, 1)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default()).0,
            Found::Linearizable
        );
        // ... but not new then old.
        let mut m = Reg(vec![(true, 1), (false, 1), (false, 0)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default()).0,
            Found::Illegal
        );
    }

    #[test]
    fn unknown_write_is_optional_and_late() {
        let unknown = Span { call: 0, ret: None };
        // r->0 after the unknown write's call, then r->1: it took effect late.
        let spans = [unknown, sp(1, 2), sp(3, 4)];
        let mut m = Reg(vec![(true, 1), (false, 0), (false, 1)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default()).0,
            Found::Linearizable
        );
        // never taking effect is fine too
        let mut m = Reg(vec![(true, 1), (false, 0), (false, 0)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default()).0,
            Found::Linearizable
        );
    }

    #[test]
    fn keys_are_exact_across_word_boundaries() {
        let mut b = Bits::new(200);
        for i in 0..70 {
            b.set(i);
        }
        b.set(130);
        let k1 = b.key(3);
        assert_eq!(
            k1.w[0],
            (1 << 32) | 3,
            "word 0 is full: folded into the header"
        );
        assert_eq!(k1.w[1], (1 << 6) - 1, "word 1 holds ops 64..70");
        assert_eq!(k1.w[2], 1 << 2, "word 2 holds op 130");
        assert_eq!(k1.w[3], 0);
        b.clear(130);
        b.set(131);
        assert_ne!(b.key(3), k1);
        b.clear(5);
        assert_eq!(
            b.key(3).w[0] >> 32,
            0,
            "a hole in word 0 moves the window back"
        );
        for i in 131..200 {
            b.set(i);
        }
        assert!(b.key(3).spill.is_some(), "wide windows spill to the heap");
    }

    #[test]
    fn ties_are_concurrent() {
        // w(1) returns at 5, r->0 called at 5: concurrent, so r may go first.
        let spans = [sp(0, 5), sp(5, 6)];
        let mut m = Reg(vec![(true, 1), (false, 0)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default()).0,
            Found::Linearizable
        );
        let spans = [sp(0, 5), sp(6, 7)];
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default()).0,
            Found::Illegal
        );
    }
}
