//! The log engine: a plain append log on disk and the live state in
//! memory. Each batch the sync thread hands over is one checksummed frame
//! ([`frame`]) appended to the current segment ([`files`]); segments are
//! zero-filled and synced when created (the next one in the background,
//! ahead of need), so a steady-state `fdatasync` writes the frame's blocks
//! and nothing else: no extent conversion, no size change.
//!
//! On open the newest checkpoint is read, then the segments after it are
//! replayed in order. The replay stops at the first frame that is not
//! whole and valid: if nothing valid follows it, that is a torn last write
//! (never acknowledged) and the segment is cut there before appending
//! again; if a valid frame follows, the log is damaged and the open fails
//! naming the file and offset.
//!
//! When the frames written since the last checkpoint exceed
//! max([`MIN_LOG_BYTES`], 4 × the live state), the engine moves to a new
//! segment, clones the state (the only pause of the sync thread) and a
//! background thread writes it as a checkpoint, then removes the segments
//! and checkpoints it covers.

mod files;
mod frame;
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
    /// Segment `cur.no + 1`, being zero-filled in the background.
    spare: Option<JoinHandle<io::Result<File>>>,
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
    /// The last segment holding frames, and where they end.
    last: Option<(u64, u64)>,
    /// Segments after it without a frame (a spare made ahead of need).
    empty: Vec<u64>,
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
        let (segs, ckpts) = files::list(dir)?;
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
            std::fs::remove_file(files::segment(dir, s))?;
        }
        let live: Vec<u64> = segs.into_iter().filter(|&s| s >= next).collect();
        let replayed = replay(dir, &live, &mut state)?;
        let cur = Self::first_segment(dir, seg_size, next, &replayed)?;
        let mut engine = LogEngine {
            dir: dir.to_path_buf(),
            seg_size,
            min_log,
            state,
            spare: None,
            log_bytes: replayed.log_bytes,
            checkpoint: None,
            next_checkpoint: 0,
            checkpoints_started: 0,
            cur,
        };
        engine.spare = engine.make_spare();
        Ok(engine)
    }

    /// Cut the last segment after its last whole frame (a torn write, or
    /// the zeros of its unused end) and start a new one after it (reusing
    /// an empty spare of full size).
    fn first_segment(dir: &Path, size: u64, next: u64, r: &Replayed) -> io::Result<Segment> {
        if let Some((no, end)) = r.last {
            let f = OpenOptions::new()
                .write(true)
                .open(files::segment(dir, no))?;
            if f.metadata()?.len() != end {
                f.set_len(end)?;
                f.sync_all()?;
            }
        }
        let no = r.last.map_or(next, |(no, _)| no + 1);
        let mut reused = None;
        for &e in &r.empty {
            let path = files::segment(dir, e);
            if e == no && std::fs::metadata(&path)?.len() == size {
                reused = Some(OpenOptions::new().read(true).write(true).open(&path)?);
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        let file = match reused {
            Some(f) => f,
            None => files::create_segment(dir, no, size)?,
        };
        Ok(Segment {
            no,
            file,
            pos: 0,
            size,
        })
    }

    /// Start zero-filling segment `cur.no + 1` in the background.
    fn make_spare(&self) -> Option<JoinHandle<io::Result<File>>> {
        let (dir, no, size) = (self.dir.clone(), self.cur.no + 1, self.seg_size);
        std::thread::Builder::new()
            .name("quorumkv-log-spare".into())
            .spawn(move || files::create_segment(&dir, no, size))
            .ok()
    }

    /// Move to segment `cur.no + 1`, at least `need` bytes long.
    fn rotate(&mut self, need: u64) -> io::Result<()> {
        let no = self.cur.no + 1;
        let size = self.seg_size.max(need);
        let file = match self.spare.take().map(|h| h.join()) {
            Some(Ok(Ok(f))) => f,
            // The spare failed (a full disk?): try once more here, and
            // fail the write if it fails again.
            _ => files::create_segment(&self.dir, no, size)?,
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
        let (dir, next, state) = (self.dir.clone(), self.cur.no, self.state.clone());
        let paused = t.elapsed();
        let covered = self.log_bytes;
        let thread = std::thread::Builder::new()
            .name("quorumkv-log-checkpoint".into())
            .spawn(move || write_checkpoint(&dir, next, &state, covered))?;
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
                self.next_checkpoint = self.log_bytes + self.min_log;
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

/// The background part of a checkpoint: write it, then remove what it covers.
fn write_checkpoint(dir: &Path, next: u64, state: &State, covered: u64) -> io::Result<()> {
    let t = Instant::now();
    let records = state.records();
    let bytes = files::write_checkpoint(dir, next, &records)?;
    let (segs, ckpts) = files::list(dir)?;
    for &s in segs.iter().filter(|&&s| s < next) {
        std::fs::remove_file(files::segment(dir, s))?;
    }
    for &c in ckpts.iter().filter(|&&c| c < next) {
        std::fs::remove_file(files::checkpoint(dir, c))?;
    }
    files::sync_dir(dir)?;
    tracing::info!(
        "log checkpoint before segment {next}: {} records, {bytes} bytes, replaces {covered} \
         bytes of log, in {:.3}s",
        records.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Replay segments `live` (ascending) into `state`.
fn replay(dir: &Path, live: &[u64], state: &mut State) -> io::Result<Replayed> {
    let mut out = Replayed::default();
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
        if s.frames.is_empty() && !s.dirty {
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
        out.log_bytes += s.end as u64;
        if s.dirty {
            torn = Some((path, s.end));
        }
        out.last = Some((no, s.end as u64));
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
        if self.cur.pos + need > self.cur.size {
            self.rotate(need)?;
        }
        frame::seal(&mut buf, self.cur.no, self.cur.pos)?;
        self.cur.file.write_all_at(&buf, self.cur.pos)?;
        self.cur.pos += need;
        self.log_bytes += need;
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
