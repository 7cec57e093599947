//! Free segments: segments a checkpoint covers, kept (renamed
//! `NNNNNNNNNNNNNNNN.free`) to become later segments. A new segment is
//! otherwise zero-filled and synced, 16 MiB written for every 16 MiB of
//! log; a free one was written in full already, so overwriting it needs
//! neither that write nor an extent conversion. Its stale frames carry its
//! old number in their checksums and never check as frames of the new one
//! (the module docs of [`super`] give the recovery argument).

use super::files;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Free segments kept at most: a checkpoint's worth at the minimum
/// threshold (64 MiB of 16 MiB segments), so that between two checkpoints
/// of a small state no segment is zero-filled.
pub const KEEP: usize = 4;

/// The free segments, shared by the checkpoint thread (which adds) and the
/// spare thread (which takes).
#[derive(Clone)]
pub struct Pool {
    dir: PathBuf,
    /// A segment's size; a free segment has exactly this size.
    size: u64,
    nos: Arc<Mutex<Vec<u64>>>,
    /// Segments made from a free one since the pool opened.
    reused: Arc<AtomicU64>,
}

impl Pool {
    /// The pool of the free segments `found` in `dir` (left by a previous
    /// run): those of full size, up to [`KEEP`]; the others are removed.
    pub fn open(dir: &Path, size: u64, found: &[u64]) -> io::Result<Pool> {
        let mut nos = Vec::new();
        for &no in found.iter().rev() {
            let path = files::free(dir, no);
            if nos.len() < KEEP && std::fs::metadata(&path)?.len() == size {
                nos.push(no);
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        nos.reverse();
        Ok(Pool {
            dir: dir.to_path_buf(),
            size,
            nos: Arc::new(Mutex::new(nos)),
            reused: Arc::default(),
        })
    }

    /// A segment's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Segments made from a free one since the pool opened.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// How many free segments the pool holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.nos.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Segment `no` is covered by a checkpoint (durable already): keep it
    /// as a free segment if the pool has room and it has full size, else
    /// remove it. The caller syncs the directory; a crash before that
    /// leaves either name, and both are read right (a covered segment is
    /// released again at open, a free one is kept).
    pub fn release(&self, no: u64) -> io::Result<()> {
        let path = files::segment(&self.dir, no);
        let mut nos = self.lock();
        if nos.len() < KEEP && std::fs::metadata(&path)?.len() == self.size {
            // Renamed under the lock: a taker never sees a number whose
            // file is not there yet.
            std::fs::rename(&path, files::free(&self.dir, no))?;
            nos.push(no);
            Ok(())
        } else {
            std::fs::remove_file(&path)
        }
    }

    /// Segment `no`, `size` bytes, its directory entry synced: a free
    /// segment renamed if one fits, else a new zero-filled file.
    pub fn segment(&self, no: u64, size: u64) -> io::Result<File> {
        let taken = (size == self.size).then(|| self.lock().pop()).flatten();
        if let Some(old) = taken {
            match self.reuse(old, no) {
                Ok(f) => {
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    return Ok(f);
                }
                Err(e) => tracing::warn!("cannot reuse free log segment {old} ({e}): creating one"),
            }
        }
        files::create_segment(&self.dir, no, size)
    }

    fn reuse(&self, old: u64, no: u64) -> io::Result<File> {
        let path = files::segment(&self.dir, no);
        std::fs::rename(files::free(&self.dir, old), &path)?;
        // Before the segment's first frame: a segment whose frames are
        // durable has a durable name.
        files::sync_dir(&self.dir)?;
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let len = file.metadata()?.len();
        if len != self.size {
            // Not from this pool (it checks sizes): make it whole anyway.
            file.set_len(len.min(self.size))?;
            files::zero_fill(&file, len.min(self.size), self.size)?;
        }
        warm(&file, self.size)?;
        Ok(file)
    }
}

/// Read the file through, here in the background: an append that ends
/// inside a page the cache does not hold would read it first, in the sync
/// thread.
fn warm(file: &File, size: u64) -> io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(CHUNK) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::engine_tests as t;

    #[test]
    fn the_pool_keeps_full_segments_up_to_its_size_and_hands_them_out() {
        let d = t::tempdir("log-free-pool");
        std::fs::create_dir_all(&d).unwrap();
        // Left by an earlier run: one short, six of full size.
        std::fs::write(files::free(&d, 1), [7u8; 100]).unwrap();
        for no in 2..8 {
            std::fs::write(files::free(&d, no), [no as u8; 512]).unwrap();
        }
        let pool = Pool::open(&d, 512, &files::list(&d).unwrap().free).unwrap();
        assert_eq!(pool.len(), KEEP);
        assert_eq!(pool.reused(), 0);
        let left = files::list(&d).unwrap().free;
        assert_eq!(left, (8 - KEEP as u64..8).collect::<Vec<_>>());
        // A segment taken from it keeps its blocks (its stale bytes), under
        // the new name; one of another size is created zeroed.
        let f = pool.segment(20, 512).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 512);
        assert_eq!(std::fs::read(files::segment(&d, 20)).unwrap(), [7u8; 512]);
        assert_eq!(pool.len(), KEEP - 1);
        assert_eq!(pool.reused(), 1);
        pool.segment(21, 1024).unwrap();
        assert_eq!(std::fs::read(files::segment(&d, 21)).unwrap(), [0u8; 1024]);
        assert_eq!(pool.len(), KEEP - 1);
        assert_eq!(pool.reused(), 1, "a new file is not a reused one");
        // Released: kept while there is room and the size fits.
        pool.release(21).unwrap();
        assert!(!files::segment(&d, 21).exists() && !files::free(&d, 21).exists());
        pool.release(20).unwrap();
        assert!(files::free(&d, 20).exists());
        std::fs::write(files::segment(&d, 22), [0u8; 512]).unwrap();
        pool.release(22).unwrap();
        assert!(!files::free(&d, 22).exists(), "the pool is full");
        assert_eq!(pool.len(), KEEP);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_free_segment_cut_short_behind_the_pools_back_is_made_whole() {
        let d = t::tempdir("log-free-short");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(files::free(&d, 3), [3u8; 512]).unwrap();
        let pool = Pool::open(&d, 512, &files::list(&d).unwrap().free).unwrap();
        // Truncated after the pool checked it (by hand, or a broken disk).
        std::fs::write(files::free(&d, 3), [9u8; 100]).unwrap();
        let f = pool.segment(4, 512).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 512);
        let bytes = std::fs::read(files::segment(&d, 4)).unwrap();
        assert_eq!(bytes[..100], [9u8; 100], "reused, not created anew");
        assert_eq!(bytes[100..], [0u8; 412], "the missing tail is zero-filled");
        assert_eq!(pool.reused(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
