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
use std::sync::atomic::{AtomicUsize, Ordering};
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

    /// True if `op` overwrites the state with a value nobody ever observes,
    /// on an object whose only other updates are overwrites too. When no
    /// read is legal, the next operation of any valid order is an update,
    /// so such an `op` can go first at no loss: it is overwritten at once.
    fn is_blind(&self, _op: usize) -> bool {
        false
    }

    /// Operations with the same class change every state alike (two
    /// deletes, two puts of one value). Among such operations with an
    /// unknown outcome, whose spans both run to the end of the history,
    /// placing the later-called one while the earlier is still open is
    /// the same choice under another name, so the search skips it.
    fn effect_class(&self, _op: usize) -> Option<u64> {
        None
    }
}

/// Times of one operation. Operations must be sorted by `call`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub call: u64,
    /// `None`: unknown outcome, never forced.
    pub ret: Option<u64>,
}

/// Result of one search, or of one slice of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    Linearizable,
    Illegal,
    /// The deadline passed (or the search was cancelled).
    Timeout,
    /// The slice's step budget is spent; [`Search::run`] again to go on.
    Paused,
}

/// When to give up: a wall-clock deadline and/or a cancel mark shared by
/// several searches: `(mark, rank)` cancels this search once the mark
/// drops below `rank`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Deadline<'a> {
    pub at: Option<Instant>,
    pub cancel: Option<(&'a AtomicUsize, usize)>,
}

impl Deadline<'_> {
    pub fn expired(&self) -> bool {
        self.at.is_some_and(|t| Instant::now() >= t)
            || self
                .cancel
                .is_some_and(|(mark, rank)| mark.load(Ordering::Relaxed) < rank)
    }
}

/// How far a search got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Search steps (one per candidate tried or backtrack).
    pub steps: u64,
    /// Memo entries held at the end.
    pub memo: usize,
    /// Configurations (linearized set, state) explored: memo insertions,
    /// counting those forgotten when the memo was cleared.
    pub states: u64,
    /// Operations linearized when the search stopped.
    pub placed: usize,
    /// Most operations linearized at once.
    pub deepest: usize,
    /// Longest prefix of the events (calls and returns in time order) whose
    /// operations were all linearized at once.
    pub prefix_events: usize,
    /// Events in the partition (calls plus known returns).
    pub events: usize,
}

/// The bounds of one call to [`Search::run`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slice {
    /// Steps allowed in this call.
    pub steps: u64,
    /// Memo entries kept at most (see [`MEMO_CAP`]).
    pub memo_cap: usize,
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
///
/// Operations with a known return get bits in call order, so that the set
/// is "all bits below `full` words, plus a window". Operations with an
/// unknown outcome may stay unplaced forever and would pin that window
/// open, so they get their own bits after the others.
struct Bits {
    words: Vec<u64>,
    /// Bit of each operation.
    pos: Vec<u32>,
    /// First word of the unknown-outcome region.
    split: usize,
    /// No word below `full` is partial (all below are all ones).
    full: usize,
    /// No known-region word at or above `top` is non-zero.
    top: usize,
}

impl Bits {
    fn new(spans: &[Span]) -> Bits {
        let known = spans.iter().filter(|s| s.ret.is_some()).count();
        let split = known.div_ceil(64);
        let (mut k, mut u) = (0u32, (split * 64) as u32);
        let pos = spans
            .iter()
            .map(|s| {
                let slot = if s.ret.is_some() { &mut k } else { &mut u };
                *slot += 1;
                *slot - 1
            })
            .collect();
        let n_words = (u as usize).div_ceil(64).max(split);
        Bits {
            words: vec![0; n_words],
            pos,
            split,
            full: 0,
            top: 0,
        }
    }

    fn set(&mut self, op: usize) {
        let i = self.pos[op] as usize;
        self.words[i / 64] |= 1 << (i % 64);
        if i / 64 < self.split {
            self.top = self.top.max(i / 64 + 1);
        }
    }

    fn clear(&mut self, op: usize) {
        let i = self.pos[op] as usize;
        self.words[i / 64] &= !(1 << (i % 64));
        if i / 64 < self.split {
            self.full = self.full.min(i / 64);
        }
    }

    /// The memo key of (this set's known-outcome part, `state`): the first
    /// partial word and the state, then the known window. The
    /// unknown-outcome part is kept apart ([`Bits::unknown`]): the memo
    /// compares it by inclusion, not equality.
    fn key(&mut self, state: u32) -> Key {
        while self.full < self.split && self.words[self.full] == u64::MAX {
            self.full += 1;
        }
        while self.top > self.full && self.words[self.top - 1] == 0 {
            self.top -= 1;
        }
        let known = &self.words[self.full..self.top.max(self.full)];
        let header = ((self.full as u64) << 32) | state as u64;
        let len = 1 + known.len();
        let mut w = [0; INLINE];
        if len <= INLINE {
            w[0] = header;
            w[1..len].copy_from_slice(known);
            Key { w, spill: None }
        } else {
            let mut v = Vec::with_capacity(len);
            v.push(header);
            v.extend_from_slice(known);
            Key {
                w,
                spill: Some(v.into_boxed_slice()),
            }
        }
    }

    /// The unknown-outcome part of the set, one word per 64 such
    /// operations (the same length for every set of one search).
    fn unknown(&self) -> &[u64] {
        &self.words[self.split..]
    }
}

const INLINE: usize = 5;

/// A memo key (see [`Bits::key`]), inline when it fits in `INLINE` words
/// (no allocation), else all of it in `spill` and `w` zero. Windows never
/// end in a zero word, so equal known sets give equal keys.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Key {
    w: [u64; INLINE],
    spill: Option<Box<[u64]>>,
}

/// Decides whether the operations `spans` (sorted by call), interpreted by
/// `stepper` from state `init`, can be linearized, in one [`Search`] of at
/// most `max_steps` steps ([`Found::Paused`] past them).
///
/// Two refinements over the plain walk, neither of which changes the
/// answer, only the order in which the tree is searched:
/// * a read that is legal now is placed at once and never revisited (see
///   the comment at its use), and so is a blind write ([`Stepper::is_blind`]);
/// * the other candidates of a node (calls before the first remaining
///   return) are tried in a useful order: when the operation of that
///   return is illegal now, first those after which it is legal (it must
///   be placed before anything called after its return, so something
///   placed before it has to make it legal); then those after which some
///   waiting read becomes legal; then by earliest return. On histories of a
///   correct system this follows the real order of effects closely, so the
///   search rarely backtracks far.
pub(crate) fn search(
    spans: &[Span],
    init: u32,
    stepper: &mut impl Stepper,
    deadline: Deadline<'_>,
    max_steps: u64,
) -> (Found, Progress) {
    let mut s = Search::new(spans, init);
    let slice = Slice {
        steps: max_steps,
        memo_cap: MEMO_CAP,
    };
    let found = s.run(stepper, deadline, slice);
    (found, s.progress())
}

/// A search that can run in slices: [`Search::run`] returns
/// [`Found::Paused`] when its slice is spent and resumes where it stopped.
pub(crate) struct Search {
    list: List,
    bits: Bits,
    memo: Memo,
    stack: Vec<Frame>,
    /// Candidates of the nodes on the current path: (call entry, state after).
    arena: Vec<(u32, u32)>,
    state: u32,
    /// Return time of each operation (`u64::MAX` if unknown).
    rets: Vec<u64>,
    /// Scratch buffers of `expand`.
    reads: Vec<u32>,
    keyed: Vec<(bool, bool, u64, u32, u32)>,
    /// Effect classes of the open unknown-outcome calls seen by `expand`.
    twins: HashSet<u64, FxBuild>,
    /// The untried candidates `arena[next..end]` of the current node, or
    /// `None` if the current node is new and must be expanded first.
    cur: Option<(u32, u32)>,
    progress: Progress,
    /// Try an unknown-outcome operation only where the first remaining
    /// return's operation is illegal (see [`Search::lazy`]).
    lazy: bool,
}

/// One placed operation.
struct Frame {
    call: u32,
    /// The state before it.
    state: u32,
    /// Its node's untried candidates are `arena[next..end]`; none for a
    /// read placed as legal (its node needs no other try).
    next: u32,
    end: u32,
}

/// What a node offers.
enum Node {
    /// No return entry left: only unknown-outcome calls remain.
    Done,
    /// A legal read or a blind write to place; no alternative needs trying.
    Forced(u32),
    /// Candidates pushed on the arena from this index.
    Try(usize),
}

impl Search {
    pub fn new(spans: &[Span], init: u32) -> Search {
        debug_assert!(spans.windows(2).all(|w| w[0].call <= w[1].call));
        let list = List::new(spans);
        let progress = Progress {
            events: list.op.len(),
            ..Progress::default()
        };
        Search {
            list,
            bits: Bits::new(spans),
            memo: Memo::default(),
            stack: Vec::new(),
            arena: Vec::new(),
            state: init,
            rets: spans.iter().map(|s| s.ret.unwrap_or(u64::MAX)).collect(),
            reads: Vec::new(),
            keyed: Vec::new(),
            twins: HashSet::default(),
            cur: None,
            progress,
            lazy: false,
        }
    }

    /// A search that places an unknown-outcome operation only where the
    /// operation of the first remaining return is illegal. It explores
    /// part of the tree: a linearization it finds is one, but
    /// [`Found::Illegal`] from it proves nothing.
    pub fn lazy(spans: &[Span], init: u32) -> Search {
        Search {
            lazy: true,
            ..Search::new(spans, init)
        }
    }

    /// The operations placed, in order: after [`Found::Linearizable`], a
    /// linearization.
    pub fn placed(&self) -> Vec<usize> {
        (self.stack.iter())
            .map(|f| self.list.op[f.call as usize] as usize)
            .collect()
    }

    pub fn progress(&self) -> Progress {
        Progress {
            memo: self.memo.sets,
            placed: self.stack.len(),
            ..self.progress
        }
    }

    /// Searches on for at most `slice.steps` steps. Once it has returned
    /// anything but [`Found::Paused`] it must not be run again.
    pub fn run(
        &mut self,
        stepper: &mut impl Stepper,
        deadline: Deadline<'_>,
        slice: Slice,
    ) -> Found {
        let stop_at = self.progress.steps.saturating_add(slice.steps);
        loop {
            if self.progress.steps >= stop_at {
                return Found::Paused;
            }
            self.progress.steps += 1;
            if self.progress.steps.is_multiple_of(1024) && deadline.expired() {
                return Found::Timeout;
            }
            let (next, end) = match self.cur {
                Some(r) => r,
                None => match self.expand(stepper) {
                    Node::Done => return Found::Linearizable,
                    Node::Forced(c) => {
                        // A legal read placed now loses nothing: it changes
                        // no state and everything that must precede it is
                        // placed; likewise a blind write (see `is_blind`).
                        // So if this child fails, the node fails.
                        let op = self.list.op[c as usize] as usize;
                        let after = stepper.step(self.state, op).expect("forced ops are legal");
                        let at = self.arena.len() as u32;
                        if !self.try_place(c, after, (at, at), slice.memo_cap) {
                            match self.backtrack() {
                                Some(r) => self.cur = Some(r),
                                None => return Found::Illegal,
                            }
                        }
                        continue;
                    }
                    Node::Try(from) => (from as u32, self.arena.len() as u32),
                },
            };
            if next < end {
                let (c, after) = self.arena[next as usize];
                if !self.try_place(c, after, (next + 1, end), slice.memo_cap) {
                    self.cur = Some((next + 1, end));
                }
            } else {
                match self.backtrack() {
                    Some(r) => self.cur = Some(r),
                    None => return Found::Illegal,
                }
            }
        }
    }

    /// Linearizes call entry `c` (leading to state `after`) unless the
    /// resulting configuration was explored before; `untried` are the
    /// candidates of the current node left for backtracking.
    fn try_place(&mut self, c: u32, after: u32, untried: (u32, u32), memo_cap: usize) -> bool {
        let op = self.list.op[c as usize] as usize;
        self.bits.set(op);
        let key = self.bits.key(after);
        if !self.memo.insert(key, self.bits.unknown(), memo_cap) {
            self.bits.clear(op);
            return false;
        }
        self.stack.push(Frame {
            call: c,
            state: self.state,
            next: untried.0,
            end: untried.1,
        });
        self.state = after;
        self.list.lift(c);
        self.cur = None;
        let st = &mut self.progress;
        st.states += 1;
        st.deepest = st.deepest.max(self.stack.len());
        // Every entry before the first one left is linearized.
        let first = self.list.next[self.list.head as usize];
        let done = if first == END {
            st.events
        } else {
            first as usize
        };
        st.prefix_events = st.prefix_events.max(done);
        true
    }

    /// Looks at the calls before the first remaining return entry.
    fn expand(&mut self, stepper: &mut impl Stepper) -> Node {
        let from = self.arena.len();
        self.reads.clear();
        let mut blind = None;
        self.twins.clear();
        let mut e = self.list.next[self.list.head as usize];
        while e != END && self.list.is_call[e as usize] {
            let op = self.list.op[e as usize] as usize;
            let twin = self.rets[op] == u64::MAX
                && stepper
                    .effect_class(op)
                    .is_some_and(|c| !self.twins.insert(c));
            // Only an operation with a known return is forced: placing
            // it brings the search one known operation nearer its end,
            // which the memo's pruning by inclusion relies on (`Memo`).
            // A read of unknown outcome changes nothing, so it is never
            // needed; a blind write of unknown outcome is tried like any
            // other.
            let known = self.rets[op] != u64::MAX;
            if twin || (!known && stepper.is_read_only(op)) {
                // An earlier-called open twin is a candidate already.
            } else if stepper.is_read_only(op) {
                if stepper.step(self.state, op).is_some() {
                    self.arena.truncate(from);
                    return Node::Forced(e);
                }
                self.reads.push(op as u32);
            } else if let Some(after) = stepper.step(self.state, op) {
                if blind.is_none() && known && stepper.is_blind(op) {
                    blind = Some(e);
                }
                self.arena.push((e, after));
            }
            e = self.list.next[e as usize];
        }
        if e == END {
            self.arena.truncate(from);
            return Node::Done;
        }
        if let Some(b) = blind {
            self.arena.truncate(from);
            return Node::Forced(b);
        }
        // The operation of the first remaining return: placed next if
        // it is legal now, else something must make it legal first.
        let first = self.list.op[e as usize] as usize;
        let blocked = stepper.step(self.state, first).is_none();
        if self.lazy && !blocked {
            let mut keep = from;
            for i in from..self.arena.len() {
                let (c, _) = self.arena[i];
                if self.rets[self.list.op[c as usize] as usize] != u64::MAX {
                    self.arena[keep] = self.arena[i];
                    keep += 1;
                }
            }
            self.arena.truncate(keep);
        }
        if self.arena.len() - from > 1 {
            self.keyed.clear();
            for &(c, after) in &self.arena[from..] {
                let op = self.list.op[c as usize] as usize;
                let unblocks = self
                    .reads
                    .iter()
                    .any(|&r| stepper.step(after, r as usize).is_some());
                let enables = blocked && stepper.step(after, first).is_some();
                self.keyed
                    .push((!enables, !unblocks, self.rets[op], c, after));
            }
            self.keyed.sort_unstable();
            for (slot, k) in self.arena[from..].iter_mut().zip(&self.keyed) {
                *slot = (k.3, k.4);
            }
        }
        Node::Try(from)
    }

    /// Undoes placements until one whose node has untried candidates, and
    /// returns those; `None` if the root is exhausted.
    fn backtrack(&mut self) -> Option<(u32, u32)> {
        loop {
            let f = self.stack.pop()?;
            self.bits.clear(self.list.op[f.call as usize] as usize);
            self.state = f.state;
            self.list.unlift(f.call);
            self.arena.truncate(f.end as usize);
            if f.next < f.end {
                return Some((f.next, f.end));
            }
        }
    }
}

/// Memo entries kept at most by one search (at least 64 bytes each, more
/// for wide sets); searches run side by side share it. Forgetting entries
/// costs time, never correctness: the memo only prunes configurations
/// already known to fail.
pub(crate) const MEMO_CAP: usize = 1 << 22;

/// Unknown-outcome sets kept per memo key at most; past that the oldest
/// is forgotten (which only prunes less).
const SETS_PER_KEY: usize = 32;

/// The configurations seen: for each (known-outcome set, state), the
/// unknown-outcome sets placed with it, none a superset of another.
///
/// A configuration whose unknown-outcome set includes one seen with the
/// same known set and state is pruned, not only an equal one: from the
/// smaller set every order that completes the larger completes too, since
/// the operations it left unplaced have no return entry (nothing forces
/// them, nothing waits for them) and may be left out for good. Soundness
/// of the pruning: take, among the visited configurations from which an
/// order completes, one with the fewest known-outcome operations left and
/// then the shortest completion; its completion's first step (or the
/// forced operation, which has a known return: `expand` forces no other)
/// leads to a configuration that is visited, or pruned by a seen one with
/// the same known set and state and no larger unknown set: either way one
/// nearer the end, a contradiction, so a completable history is never
/// refuted. (Forcing an unknown outcome would break this: it leads nowhere
/// nearer, and its child may be pruned by the node itself.) What this buys: unknown outcomes placed in different subsets
/// that reach the same state (a write overwritten, a create then deleted)
/// are explored once, from the smallest subset.
#[derive(Default)]
struct Memo {
    map: std::collections::HashMap<Key, Vec<u64>, FxBuild>,
    /// Sets held, over all keys.
    sets: usize,
}

impl Memo {
    /// Records (`key`, `unknown`) and returns true, or returns false if a
    /// subset of `unknown` was seen with `key`.
    fn insert(&mut self, key: Key, unknown: &[u64], cap: usize) -> bool {
        if self.sets >= cap {
            self.map.clear();
            self.sets = 0;
        }
        let width = unknown.len();
        let seen = self.map.entry(key).or_default();
        if width == 0 {
            if !seen.is_empty() {
                return false;
            }
            // One marker word: the key has been seen.
            seen.push(0);
            self.sets += 1;
            return true;
        }
        let included = |old: &[u64], new: &[u64]| old.iter().zip(new).all(|(o, n)| o & !n == 0);
        if seen.chunks(width).any(|old| included(old, unknown)) {
            return false;
        }
        let before = seen.len() / width;
        // Drop the supersets of the new set (it prunes all they did), in
        // place, and only when there is one: this runs per configuration.
        if seen.chunks(width).any(|old| included(unknown, old)) {
            let mut kept = 0;
            for i in 0..before {
                let (lo, hi) = (i * width, (i + 1) * width);
                if !included(unknown, &seen[lo..hi]) {
                    seen.copy_within(lo..hi, kept * width);
                    kept += 1;
                }
            }
            seen.truncate(kept * width);
        }
        if seen.len() / width >= SETS_PER_KEY {
            seen.drain(..width);
        }
        seen.extend_from_slice(unknown);
        let after = seen.len() / width;
        self.sets = self.sets + after - before;
        true
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
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
            Found::Linearizable
        );
        // ... but not new then old.
        let mut m = Reg(vec![(true, 1), (false, 1), (false, 0)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
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
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
            Found::Linearizable
        );
        // never taking effect is fine too
        let mut m = Reg(vec![(true, 1), (false, 0), (false, 0)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
            Found::Linearizable
        );
    }

    #[test]
    fn keys_are_exact_across_word_boundaries() {
        let mut spans = vec![sp(0, 1); 200];
        spans.push(Span { call: 0, ret: None });
        let mut b = Bits::new(&spans);
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
        assert_eq!(k1.w[3], 0, "the window ends there");
        assert_eq!(b.unknown(), &[0], "nothing unknown placed");
        b.set(200);
        assert_eq!(b.key(3), k1, "unknown outcomes are not in the key");
        assert_eq!(b.unknown(), &[1], "the unknown op has its own region");
        b.clear(200);
        assert_eq!(b.key(3), k1);
        b.clear(130);
        b.set(131);
        assert_ne!(b.key(3), k1);
        b.clear(5);
        assert_eq!(
            b.key(3).w[0] >> 32,
            0,
            "a hole in word 0 moves the window back"
        );
        let mut wide = Bits::new(&[sp(0, 1); 400]);
        wide.set(399);
        assert!(
            wide.key(3).spill.is_some(),
            "wide windows spill to the heap"
        );
        assert_eq!(wide.unknown(), &[] as &[u64]);
    }

    /// A write of unknown outcome whose value nobody reads is not forced
    /// first as a known blind write is: here it leaves the state as it
    /// was, so its child would be pruned by the node itself (its unknown
    /// outcomes include the node's) and the node would fail, on a history
    /// that is linearizable (write 7, write 5, read 5).
    #[test]
    fn an_unknown_blind_write_is_not_forced() {
        struct Blind(Reg);
        impl Stepper for Blind {
            fn step(&mut self, s: u32, op: usize) -> Option<u32> {
                self.0.step(s, op)
            }
            fn is_read_only(&self, op: usize) -> bool {
                !self.0 .0[op].0
            }
            fn is_blind(&self, op: usize) -> bool {
                let ops = &self.0 .0;
                ops[op].0 && !ops.iter().any(|&(w, v)| !w && v == ops[op].1)
            }
        }
        // A known blind write of 7 (forced), the unknown one, then 5.
        let unknown = Span { call: 0, ret: None };
        let spans = [sp(0, 1), unknown, sp(2, 10), sp(20, 30)];
        let mut m = Blind(Reg(vec![(true, 7), (true, 7), (true, 5), (false, 5)]));
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
            Found::Linearizable
        );
    }

    #[test]
    fn the_memo_prunes_a_set_that_includes_one_seen() {
        let key = |state: u64| Key {
            w: [state, 0, 0, 0, 0],
            spill: None,
        };
        let mut m = Memo::default();
        assert!(m.insert(key(1), &[0b0110, 0], MEMO_CAP));
        assert!(!m.insert(key(1), &[0b0110, 0], MEMO_CAP), "seen");
        assert!(!m.insert(key(1), &[0b0111, 1], MEMO_CAP), "a superset");
        assert!(m.insert(key(2), &[0b0111, 1], MEMO_CAP), "another state");
        assert!(m.insert(key(1), &[0b0010, 1], MEMO_CAP), "not a superset");
        // A subset of both replaces both.
        assert!(m.insert(key(1), &[0b0010, 0], MEMO_CAP));
        assert_eq!(m.map[&key(1)], vec![0b0010, 0]);
        assert_eq!(m.sets, 2);
        assert!(!m.insert(key(1), &[0b1010, 0], MEMO_CAP));
        // With no unknown outcomes, a key is seen or not.
        let mut m = Memo::default();
        assert!(m.insert(key(1), &[], MEMO_CAP));
        assert!(!m.insert(key(1), &[], MEMO_CAP));
        // Past the cap, everything is forgotten.
        assert!(m.insert(key(2), &[], 2));
        assert!(m.insert(key(1), &[], 2));
        assert_eq!(m.sets, 1);
    }

    /// Dropping a superset keeps the sets around it, in order, whatever
    /// the width (two words here: over 64 unknown outcomes), and a key
    /// holds at most `SETS_PER_KEY` sets, the oldest going first.
    #[test]
    fn the_memo_keeps_the_other_sets_when_it_drops_supersets() {
        let key = Key {
            w: [1, 0, 0, 0, 0],
            spill: None,
        };
        let (s1, s2, s3) = ([0b100, 0], [0b011, 1], [0, 0b10]);
        let mut m = Memo::default();
        for s in [s1, s2, s3] {
            assert!(m.insert(key.clone(), &s, MEMO_CAP));
        }
        // A subset of s2 only: s2 goes, s3 moves up behind s1.
        assert!(m.insert(key.clone(), &[0b001, 1], MEMO_CAP));
        assert_eq!(m.map[&key], vec![0b100, 0, 0, 0b10, 0b001, 1]);
        assert_eq!(m.sets, 3);
        assert!(!m.insert(key.clone(), &s1, MEMO_CAP), "s1 kept");
        assert!(!m.insert(key.clone(), &s3, MEMO_CAP), "s3 kept");
        // Incomparable sets (one bit each) up to the cap and one more.
        let mut m = Memo::default();
        let one = |i: usize| [0, 1u64 << i];
        for i in 0..=SETS_PER_KEY {
            assert!(m.insert(key.clone(), &one(i), MEMO_CAP));
        }
        assert_eq!(m.map[&key].len(), 2 * SETS_PER_KEY);
        assert_eq!(m.sets, SETS_PER_KEY);
        assert!(m.insert(key.clone(), &one(0), MEMO_CAP), "the oldest went");
        assert!(!m.insert(key.clone(), &one(SETS_PER_KEY), MEMO_CAP));
    }

    #[test]
    fn a_search_run_in_tiny_slices_ends_where_one_run_does() {
        use crate::gen::{mutate_stale_read, RegisterGen, SplitMix64};
        use crate::model::ValueStepper;
        let mut refuted = 0;
        for seed in 0..40 {
            let g = RegisterGen {
                seed,
                ops: 60,
                clients: 5,
                values: [None, Some(3)][seed as usize % 2],
                unknown_ratio: 0.1,
                ..Default::default()
            };
            let mut h = g.history();
            if seed % 3 == 0 {
                h = mutate_stale_read(&h, &mut SplitMix64(seed)).unwrap_or(h);
            }
            let spans: Vec<Span> = h
                .ops
                .iter()
                .map(|o| Span {
                    call: o.call,
                    ret: o.ret,
                })
                .collect();
            let mut m = ValueStepper::new(&h.ops);
            let (whole, p) = search(&spans, 0, &mut m, Deadline::default(), u64::MAX);
            let mut sliced = Search::new(&spans, 0);
            let slice = Slice {
                steps: 1 + seed % 5,
                memo_cap: MEMO_CAP,
            };
            let mut m = ValueStepper::new(&h.ops);
            let found = loop {
                match sliced.run(&mut m, Deadline::default(), slice) {
                    Found::Paused => continue,
                    f => break f,
                }
            };
            assert_eq!(found, whole, "seed {seed}");
            assert_eq!(sliced.progress(), p, "seed {seed}: the very same search");
            refuted += (found == Found::Illegal) as u32;
        }
        assert!(refuted >= 5, "{refuted} refuted: the mutation applies");
    }

    #[test]
    fn ties_are_concurrent() {
        // w(1) returns at 5, r->0 called at 5: concurrent, so r may go first.
        let spans = [sp(0, 5), sp(5, 6)];
        let mut m = Reg(vec![(true, 1), (false, 0)]);
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
            Found::Linearizable
        );
        let spans = [sp(0, 5), sp(6, 7)];
        assert_eq!(
            search(&spans, 0, &mut m, Deadline::default(), u64::MAX).0,
            Found::Illegal
        );
    }
}
