//! The log engine: a plain append log on disk and the live state in
//! memory. Each batch the sync thread hands over is one checksummed frame
//! ([`frame`]) appended to the current segment ([`files`]). A segment's
//! blocks are all written before it is used — zero-filled when created, or
//! a free segment a checkpoint left ([`free`]) — and the next one is
//! prepared in the background ahead of need, so a steady-state
//! `fdatasync` writes the frame's blocks and nothing else: no extent
//! conversion, no size change. Moving to the next segment first seals the
//! current one with an end frame (an empty frame) and syncs it.
//!
//! On open the newest checkpoint is read, then the segments after it are
//! replayed in order. A segment's replay stops at its end frame, or at the
//! first frame that is not whole and valid: if nothing valid follows it,
//! that is a torn last write (never acknowledged) and the segment is
//! sealed there before appending again; if a valid frame follows, the log
//! is damaged and the open fails naming the file and offset.
//!
//! When the frames written since the last checkpoint exceed
//! max([`MIN_LOG_BYTES`], 4 × the live state), the engine moves to a new
//! segment, clones the state (the only pause of the sync thread) and a
//! background thread writes it as a checkpoint, then frees the segments it
//! covers (keeping up to [`free::KEEP`] as free segments, removing the
//! rest) and removes older checkpoints.
//!
//! # Recycled segments
//!
//! A free segment renamed to segment N still holds the frames of the
//! segment M < N it was. Their checksums cover M and their offsets, so
//! none checks as a frame of N (a CRC-32 collision aside, the same odds as
//! any damaged frame passing): after N's last frame they read as a torn
//! tail, never as frames, and never as "a valid frame after a bad one",
//! which stays damage. The scan for such a frame tests each `QKLF` after
//! the stop once: linear in the segment's size.
//!
//! A zero-filled segment had a clean tail, so stale bytes in a segment
//! *followed by frames* used to mean damage. A recycled segment's unused
//! end is stale bytes, so the rule needs the end frame: a segment is
//! sealed and synced before any frame goes to the next, so an unsealed
//! segment with a dirty tail followed by frames is still damage, and a
//! sealed one is read up to its end frame only. Crash points:
//! - *Between releasing a segment and the directory sync*: the checkpoint
//!   covering it is durable first, so either name is right (a covered
//!   `.seg` is released again at open).
//! - *Between renaming a free segment to the next segment and the
//!   directory sync*: the spare is either still free or a segment without
//!   a valid frame (stale bytes only): read as an empty spare, reused as
//!   the next segment or freed. No frame is written into it before that
//!   sync returns.
//! - *After some frames went into a recycled segment*: it is the last
//!   segment (the one before it is sealed); its frames are replayed up to
//!   the first invalid one, the rest is the torn tail, sealed over at open.
//! - *While sealing*: the next segment holds no frame yet, so the unsealed
//!   segment is the last one, and its tail a torn tail.
//! - *Free segments at open*: those of full size are kept, up to
//!   [`free::KEEP`]; the others removed. Only a full-size file is reused,
//!   so a reused segment's blocks are all written.
//!
//! Segments of a data directory written before end frames existed have
//! zero tails: a clean tail without an end frame is still read as before.

mod files;
mod frame;
mod free;
mod state;
#[cfg(test)]
mod tests;

use super::pipeline::Engine;
use super::Durability;
use files::damaged;
use quorumkv_core::protocol::Record;
use state::State;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

/// A segment's size (a bigger batch gets a segment of its own size).
pub const SEGMENT_BYTES: u64 = 16 << 20;
/// The log is checkpointed when its frames exceed this and 4× the state.
pub const MIN_LOG_BYTES: u64 = 64 << 20;

struct Segment {
    no: u64,
    file: File,
    /// Where the next frame goes.
    pos: u64,
    size: u64,
}

/// A checkpoint being written: the frame bytes it covers, and its thread.
struct Running {
    covered: u64,
    thread: JoinHandle<io::Result<()>>,
}

pub struct LogEngine {
    dir: PathBuf,
    seg_size: u64,
    min_log: u64,
    state: State,
    cur: Segment,
    /// Segment `cur.no + 1`, being prepared in the background.
    spare: Option<JoinHandle<io::Result<File>>>,
    /// The free segments, which the spare is taken from.
    free: free::Pool,
    /// Bytes of frames in the segments that no checkpoint covers.
    log_bytes: u64,
    checkpoint: Option<Running>,
    /// No checkpoint before the log exceeds this (raised after a failed one).
    next_checkpoint: u64,
    /// Checkpoints started since the engine opened.
    checkpoints_started: u64,
}

/// What the replay of the segments found.
#[derive(Default)]
struct Replayed {
    log_bytes: u64,
    /// The last segment holding frames (or sealed).
    last: Option<Last>,
    /// Segments after it without a frame (a spare made ahead of need).
    empty: Vec<u64>,
}

struct Last {
    no: u64,
    /// Where its frames end.
    end: u64,
    sealed: bool,
}

impl LogEngine {
    /// Open (or create) the log in `dir` and replay it.
    pub fn open(dir: &Path) -> io::Result<LogEngine> {
        Self::open_with(dir, SEGMENT_BYTES, MIN_LOG_BYTES)
    }

    pub fn open_with(dir: &Path, seg_size: u64, min_log: u64) -> io::Result<LogEngine> {
        std::fs::create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            files::sync_dir(parent)?;
        }
        let files::Listing { segs, ckpts, free } = files::list(dir)?;
        let free = free::Pool::open(dir, seg_size, &free)?;
        let mut state = State::default();
        let next = ckpts.last().copied().unwrap_or(0);
        if ckpts.last().is_some() {
            for r in files::read_checkpoint(dir, next)? {
                state.apply(&r);
            }
        }
        // What a checkpoint covers, left by one cut short before removing it.
        for &c in ckpts.iter().filter(|&&c| c < next) {
            std::fs::remove_file(files::checkpoint(dir, c))?;
        }
        for &s in segs.iter().filter(|&&s| s < next) {
            free.release(s)?;
        }
        let live: Vec<u64> = segs.into_iter().filter(|&s| s >= next).collect();
        let replayed = replay(dir, &live, &mut state)?;
        let cur = Self::first_segment(dir, &free, next, &replayed)?;
        let mut engine = LogEngine {
            dir: dir.to_path_buf(),
            seg_size,
            min_log,
            state,
            spare: None,
            free,
            log_bytes: replayed.log_bytes,
            checkpoint: None,
            next_checkpoint: 0,
            checkpoints_started: 0,
            cur,
        };
        engine.spare = engine.make_spare();
        Ok(engine)
    }

    /// Seal the last segment after its last whole frame (dropping a torn
    /// write, stale frames or the zeros of its unused end) and start a new
    /// one after it (reusing an empty spare of full size).
    fn first_segment(
        dir: &Path,
        free: &free::Pool,
        next: u64,
        r: &Replayed,
    ) -> io::Result<Segment> {
        let size = free.size();
        if let Some(last) = r.last.as_ref().filter(|l| !l.sealed) {
            let file = OpenOptions::new()
                .write(true)
                .open(files::segment(dir, last.no))?;
            let len = file.metadata()?.len();
            if last.end + frame::HEADER as u64 <= len {
                seal(&file, last.no, last.end)?;
            } else if len != last.end {
                // No room for an end frame (a file from before they
                // existed): a tail this short holds no frame; cut it.
                file.set_len(last.end)?;
                file.sync_all()?;
            }
        }
        let no = r.last.as_ref().map_or(next, |l| l.no + 1);
        let mut reused = None;
        for &e in &r.empty {
            let path = files::segment(dir, e);
            if e == no && std::fs::metadata(&path)?.len() == size {
                reused = Some(OpenOptions::new().read(true).write(true).open(&path)?);
            } else {
                free.release(e)?;
            }
        }
        let file = match reused {
            Some(f) => f,
            None => free.segment(no, size)?,
        };
        Ok(Segment {
            no,
            file,
            pos: 0,
            size,
        })
    }

    /// Start preparing segment `cur.no + 1` in the background (from a free
    /// segment, else zero-filled).
    fn make_spare(&self) -> Option<JoinHandle<io::Result<File>>> {
        let (free, no, size) = (self.free.clone(), self.cur.no + 1, self.seg_size);
        std::thread::Builder::new()
            .name("quorumkv-log-spare".into())
            .spawn(move || free.segment(no, size))
            .ok()
    }

    /// Seal the current segment and move to segment `cur.no + 1`, with
    /// room for `need` bytes of frame and an end frame.
    fn rotate(&mut self, need: u64) -> io::Result<()> {
        // Synced before the next segment gets a frame: a segment followed
        // by frames is sealed, so stale bytes after its end are never read
        // as a torn tail in the middle of the log.
        seal(&self.cur.file, self.cur.no, self.cur.pos)?;
        let no = self.cur.no + 1;
        let size = self.seg_size.max(need + frame::HEADER as u64);
        let file = match self.spare.take().map(|h| h.join()) {
            Some(Ok(Ok(f))) => f,
            // The spare failed (a full disk?): try once more here, and
            // fail the write if it fails again.
            _ => self.free.segment(no, self.seg_size)?,
        };
        if size > self.seg_size {
            files::zero_fill(&file, self.seg_size, size)?;
        }
        self.cur = Segment {
            no,
            file,
            pos: 0,
            size,
        };
        self.spare = self.make_spare();
        Ok(())
    }

    fn checkpoint_due(&self) -> bool {
        let limit = (self.min_log.max(4 * self.state.bytes())).max(self.next_checkpoint);
        self.checkpoint.is_none() && self.log_bytes > limit
    }

    /// Checkpoint everything before a new segment, in the background.
    fn start_checkpoint(&mut self) -> io::Result<()> {
        let t = Instant::now();
        self.rotate(0)?;
        let (free, next, state) = (self.free.clone(), self.cur.no, self.state.clone());
        let dir = self.dir.clone();
        let paused = t.elapsed();
        let covered = self.log_bytes;
        let thread = std::thread::Builder::new()
            .name("quorumkv-log-checkpoint".into())
            .spawn(move || write_checkpoint(&dir, &free, next, &state, covered))?;
        tracing::info!(
            "log checkpoint before segment {next} started: writes paused {} us",
            paused.as_micros()
        );
        self.checkpoint = Some(Running { covered, thread });
        self.checkpoints_started += 1;
        Ok(())
    }

    /// Take the result of a finished checkpoint.
    fn reap_checkpoint(&mut self, wait: bool) {
        // One still running stays in place: dropping it would detach its
        // thread, forget what it covers, and start another at every write.
        let done = (self.checkpoint.as_ref()).is_some_and(|r| wait || r.thread.is_finished());
        let Some(run) = self.checkpoint.take_if(|_| done) else {
            return;
        };
        match run.thread.join() {
            Ok(Ok(())) => self.log_bytes = self.log_bytes.saturating_sub(run.covered),
            res => {
                let why = match res {
                    Ok(Err(e)) => e.to_string(),
                    _ => "its thread panicked".into(),
                };
                tracing::error!("cannot checkpoint the log ({why}); trying again later");
                self.next_checkpoint = self.log_bytes.saturating_add(self.min_log);
            }
        }
    }

    /// Wait for the background threads (before a reopen or a drop).
    fn join_background(&mut self) {
        if let Some(h) = self.spare.take() {
            let _ = h.join();
        }
        self.reap_checkpoint(true);
    }
}

/// Write the end frame of segment `no` at `pos` and sync it.
fn seal(file: &File, no: u64, pos: u64) -> io::Result<()> {
    let mut end = frame::start();
    frame::seal(&mut end, no, pos)?;
    file.write_all_at(&end, pos)?;
    file.sync_data()
}

/// The background part of a checkpoint: write it, then free what it covers.
fn write_checkpoint(
    dir: &Path,
    free: &free::Pool,
    next: u64,
    state: &State,
    covered: u64,
) -> io::Result<()> {
    let t = Instant::now();
    let records = state.records();
    let bytes = files::write_checkpoint(dir, next, &records)?;
    let files::Listing { segs, ckpts, .. } = files::list(dir)?;
    for &s in segs.iter().filter(|&&s| s < next) {
        free.release(s)?;
    }
    for &c in ckpts.iter().filter(|&&c| c < next) {
        std::fs::remove_file(files::checkpoint(dir, c))?;
    }
    files::sync_dir(dir)?;
    tracing::info!(
        "log checkpoint before segment {next}: {} records, {bytes} bytes, replaces {covered} \
         bytes of log, in {:.3}s ({} segments made from free ones since open)",
        records.len(),
        t.elapsed().as_secs_f64(),
        free.reused()
    );
    Ok(())
}

/// Replay segments `live` (ascending) into `state`.
fn replay(dir: &Path, live: &[u64], state: &mut State) -> io::Result<Replayed> {
    let mut out = Replayed::default();
    // An unsealed segment with bytes after its frames: a torn tail if it
    // is the last with frames, damage if frames follow.
    let mut torn: Option<(PathBuf, usize)> = None;
    for (i, &no) in live.iter().enumerate() {
        let path = files::segment(dir, no);
        if i > 0 && live[i - 1] + 1 != no {
            let want = files::segment(dir, live[i - 1] + 1);
            return Err(damaged(format!(
                "log segment {} is missing",
                want.display()
            )));
        }
        let data = std::fs::read(&path)?;
        let s = frame::scan(&data, no);
        if let Some(at) = s.valid_after {
            return Err(damaged(format!(
                "log segment {} is damaged at offset {} (valid frames follow at offset {at})",
                path.display(),
                s.end
            )));
        }
        if s.frames.is_empty() && !s.sealed {
            // A spare never written to: zeros, or a free segment's stale
            // frames (which frames after it make damage).
            if s.dirty && torn.is_none() {
                torn = Some((path, 0));
            }
            out.empty.push(no);
            continue;
        }
        if let Some((p, at)) = torn.take() {
            return Err(damaged(format!(
                "log segment {} is damaged at offset {at} (later segments hold valid frames)",
                p.display()
            )));
        }
        out.empty.clear();
        for r in &s.frames {
            let recs: Vec<Record> = postcard::from_bytes(&data[r.clone()]).map_err(|e| {
                let at = r.start - frame::HEADER;
                damaged(format!(
                    "log segment {} holds a bad batch at offset {at}: {e}",
                    path.display()
                ))
            })?;
            recs.iter().for_each(|r| state.apply(r));
        }
        out.log_bytes = out.log_bytes.saturating_add(s.end as u64);
        if s.dirty {
            torn = Some((path, s.end));
        }
        out.last = Some(Last {
            no,
            end: s.end as u64,
            sealed: s.sealed,
        });
    }
    Ok(out)
}

impl Engine for LogEngine {
    fn write(&mut self, recs: &[Record]) -> io::Result<()> {
        self.reap_checkpoint(false);
        if self.checkpoint_due() {
            self.start_checkpoint()?;
        }
        let mut buf = postcard::to_extend(recs, frame::start()).map_err(io::Error::other)?;
        let need = buf.len() as u64;
        // Room is left for the end frame that seals the segment.
        if self.cur.pos + need + frame::HEADER as u64 > self.cur.size {
            self.rotate(need)?;
        }
        frame::seal(&mut buf, self.cur.no, self.cur.pos)?;
        self.cur.file.write_all_at(&buf, self.cur.pos)?;
        self.cur.pos += need;
        self.log_bytes = self.log_bytes.saturating_add(need);
        recs.iter().for_each(|r| self.state.apply(r));
        Ok(())
    }

    fn sync(&mut self, mode: Durability) -> io::Result<()> {
        match mode {
            Durability::Fsync => self.cur.file.sync_data(),
            // The frame is written to the OS already.
            _ => Ok(()),
        }
    }

    fn reopen(&mut self) -> io::Result<()> {
        self.join_background();
        *self = LogEngine::open_with(&self.dir, self.seg_size, self.min_log)?;
        Ok(())
    }

    fn load(&mut self) -> io::Result<Vec<Record>> {
        Ok(self.state.records())
    }
}

impl Drop for LogEngine {
    fn drop(&mut self) {
        self.join_background();
    }
}
