//! The log's files: segments `NNNNNNNNNNNNNNNN.seg` (written over in full
//! before use, so that appending never allocates), checkpoints
//! `NNNNNNNNNNNNNNNN.checkpoint` (the live state before segment N, written
//! to a temporary name, synced, renamed, the directory synced) and free
//! segments `NNNNNNNNNNNNNNNN.free` (segment N, covered by a checkpoint and
//! kept to become a later segment instead of zero-filling a new file).

use super::frame;
use quorumkv_core::protocol::Record;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub fn segment(dir: &Path, no: u64) -> PathBuf {
    dir.join(format!("{no:016}.seg"))
}

pub fn free(dir: &Path, no: u64) -> PathBuf {
    dir.join(format!("{no:016}.free"))
}

pub fn checkpoint(dir: &Path, next: u64) -> PathBuf {
    dir.join(format!("{next:016}.checkpoint"))
}

/// The id a checkpoint's frames are checksummed with (segments use their number).
fn checkpoint_id(next: u64) -> u64 {
    next | 1 << 63
}

pub fn damaged(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The numbers of the files in a log directory, each list ascending.
#[derive(Debug, Default)]
pub struct Listing {
    pub segs: Vec<u64>,
    pub ckpts: Vec<u64>,
    pub free: Vec<u64>,
}

/// The segments', checkpoints' and free segments' numbers in `dir`.
/// Leftover temporary files (a checkpoint cut short) are removed.
pub fn list(dir: &Path) -> io::Result<Listing> {
    let (mut segs, mut ckpts, mut free) = (Vec::new(), Vec::new(), Vec::new());
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let num = |suffix: &str| {
            name.strip_suffix(suffix)
                .and_then(|n| n.parse::<u64>().ok())
        };
        if let Some(n) = num(".seg") {
            segs.push(n);
        } else if let Some(n) = num(".checkpoint") {
            ckpts.push(n);
        } else if let Some(n) = num(".free") {
            free.push(n);
        } else if name.ends_with(".tmp") {
            std::fs::remove_file(e.path())?;
        }
    }
    segs.sort_unstable();
    ckpts.sort_unstable();
    free.sort_unstable();
    Ok(Listing { segs, ckpts, free })
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Write zeros from `from` up to `size` and sync them: the blocks are then
/// allocated and written, and a later write plus `fdatasync` is one device
/// write (no extent to convert, no size to update).
pub fn zero_fill(file: &File, from: u64, size: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK];
    let mut at = from;
    while at < size {
        let n = (size - at).min(CHUNK as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_all()
}

/// Create segment `no` of `size` zeroed bytes, synced with its directory entry.
pub fn create_segment(dir: &Path, no: u64, size: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(segment(dir, no))?;
    zero_fill(&file, 0, size)?;
    sync_dir(dir)?;
    Ok(file)
}

/// Records per checkpoint frame.
const CHUNK_RECORDS: usize = 4096;

/// Write the checkpoint of everything before segment `next`: frames of
/// records, then an empty frame that marks the end.
pub fn write_checkpoint(dir: &Path, next: u64, records: &[Record]) -> io::Result<u64> {
    let tmp = dir.join(format!("{next:016}.checkpoint.tmp"));
    let mut out = io::BufWriter::new(File::create(&tmp)?);
    let id = checkpoint_id(next);
    let mut offset = 0u64;
    let payloads = (records.chunks(CHUNK_RECORDS))
        .map(|chunk| postcard::to_extend(chunk, frame::start()).map_err(io::Error::other))
        .chain([Ok(frame::start())]);
    for buf in payloads {
        let mut buf = buf?;
        frame::seal(&mut buf, id, offset)?;
        out.write_all(&buf)?;
        offset += buf.len() as u64;
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, checkpoint(dir, next))?;
    sync_dir(dir)?;
    Ok(offset)
}

/// The records of checkpoint `next`; a damaged or incomplete one is refused.
pub fn read_checkpoint(dir: &Path, next: u64) -> io::Result<Vec<Record>> {
    let path = checkpoint(dir, next);
    let data = std::fs::read(&path)?;
    let s = frame::scan(&data, checkpoint_id(next));
    if s.end != data.len() || !s.sealed {
        return Err(damaged(format!(
            "checkpoint {} is damaged at offset {}",
            path.display(),
            s.end
        )));
    }
    let mut out = Vec::new();
    for r in &s.frames {
        let recs: Vec<Record> = postcard::from_bytes(&data[r.clone()]).map_err(|e| {
            damaged(format!(
                "checkpoint {} holds a bad batch at offset {}: {e}",
                path.display(),
                r.start - frame::HEADER
            ))
        })?;
        out.extend(recs);
    }
    Ok(out)
}
