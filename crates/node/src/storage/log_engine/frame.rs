//! Frames: `MAGIC` (4 bytes), the payload's length (u32, little-endian),
//! a CRC-32 (IEEE, `crc32fast`) of the file's id, the frame's
//! offset, the length and the payload, then the payload. The id and offset
//! are in the checksum, not in the file: a frame copied elsewhere (a value
//! that holds the bytes of a frame, stale bytes) never checks at another
//! place.
//!
//! A frame with an empty payload ends a file (a batch is never empty: its
//! record count takes a byte): a checkpoint's last frame, and a segment's
//! seal, written when the engine moves to the next segment. What follows
//! it is not read: zeros, or the stale frames of a recycled segment.

use std::ops::Range;

pub const MAGIC: [u8; 4] = *b"QKLF";
pub const HEADER: usize = 12;

fn crc(file_id: u64, offset: u64, len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&file_id.to_le_bytes());
    h.update(&offset.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Start a frame buffer: room for the header, the payload appended after.
pub fn start() -> Vec<u8> {
    vec![0; HEADER]
}

/// Fill in the header of `buf` (from [`start`], payload appended) for the
/// frame at `offset` of file `file_id`.
pub fn seal(buf: &mut [u8], file_id: u64, offset: u64) -> std::io::Result<()> {
    let len = u32::try_from(buf.len() - HEADER)
        .map_err(|_| std::io::Error::other("a batch of more than 4 GiB"))?;
    let sum = crc(file_id, offset, len, &buf[HEADER..]);
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&len.to_le_bytes());
    buf[8..12].copy_from_slice(&sum.to_le_bytes());
    Ok(())
}

/// The payload of the frame at `at` of `data`, if a whole, valid one is there.
pub fn at(data: &[u8], file_id: u64, at: usize) -> Option<Range<usize>> {
    let head = data.get(at..at.checked_add(HEADER)?)?;
    if head[..4] != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(head[4..8].try_into().ok()?);
    let sum = u32::from_le_bytes(head[8..12].try_into().ok()?);
    let start = at + HEADER;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    let payload = data.get(start..end)?;
    (crc(file_id, at as u64, len, payload) == sum).then_some(start..end)
}

/// How a file's frames end.
#[derive(Debug, PartialEq, Eq)]
pub struct Scan {
    /// The payloads of the valid frames from the start, in order.
    pub frames: Vec<Range<usize>>,
    /// Where they end: the first byte not in a valid frame (after the
    /// end frame if there is one).
    pub end: usize,
    /// The frames end with an empty one (not in `frames`): the file is whole.
    pub sealed: bool,
    /// Unsealed, and something other than zeros follows `end` (a torn
    /// write, stale frames of a recycled segment, or damage).
    pub dirty: bool,
    /// Unsealed, and a valid frame somewhere after `end`: damage, not a
    /// torn tail. (Each candidate is checked once: the scan is linear.)
    pub valid_after: Option<usize>,
}

/// Read the frames of `data` from its start, up to an end frame.
pub fn scan(data: &[u8], file_id: u64) -> Scan {
    let mut frames = Vec::new();
    let mut pos = 0;
    let mut sealed = false;
    while let Some(r) = at(data, file_id, pos) {
        pos = r.end;
        if r.is_empty() {
            sealed = true;
            break;
        }
        frames.push(r);
    }
    let rest = &data[pos..];
    let dirty = !sealed && rest.iter().any(|&b| b != 0);
    let valid_after = match dirty {
        true => (pos + 1..data.len().saturating_sub(HEADER - 1))
            .filter(|&i| data[i..i + 4] == MAGIC)
            .find(|&i| at(data, file_id, i).is_some()),
        false => None,
    };
    Scan {
        frames,
        end: pos,
        sealed,
        dirty,
        valid_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(file_id: u64, offset: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = start();
        b.extend_from_slice(payload);
        seal(&mut b, file_id, offset).unwrap();
        b
    }

    #[test]
    fn frames_check_only_where_they_were_written() {
        let mut data = frame(3, 0, b"hello");
        let second = frame(3, data.len() as u64, b"world");
        data.extend_from_slice(&second);
        data.extend_from_slice(&[0; 40]);
        let s = scan(&data, 3);
        assert_eq!(s.frames.len(), 2);
        assert_eq!(&data[s.frames[1].clone()], b"world");
        assert!(!s.dirty && s.valid_after.is_none());
        // Another file's id, or the same bytes at another offset: not valid.
        assert!(scan(&data, 4).frames.is_empty());
        let mut moved = vec![0; 7];
        moved.extend_from_slice(&frame(3, 0, b"hello"));
        assert_eq!(at(&moved, 3, 7), None);
    }

    #[test]
    fn a_bad_frame_before_a_good_one_is_found() {
        let mut data = frame(1, 0, b"one");
        let n = data.len();
        data.extend_from_slice(&frame(1, n as u64, b"two"));
        data.extend_from_slice(&[0; 16]);
        data[HEADER + 1] ^= 1;
        let s = scan(&data, 1);
        assert_eq!((s.frames.len(), s.end, s.dirty), (0, 0, true));
        assert_eq!(s.valid_after, Some(n));
    }

    /// A recycled file: this file's frames, its end frame, then stale frames
    /// of another file (valid there, not here), which the scan never reads.
    #[test]
    fn an_end_frame_ends_the_scan_and_stale_frames_do_not_check() {
        let mut data = frame(9, 0, b"new");
        let n = data.len();
        data.extend_from_slice(&frame(9, n as u64, b""));
        let sealed_at = data.len();
        let stale = frame(2, sealed_at as u64, b"old frame");
        data.extend_from_slice(&stale);
        let s = scan(&data, 9);
        assert_eq!((s.frames.len(), s.end, s.sealed), (1, sealed_at, true));
        assert!(!s.dirty && s.valid_after.is_none());
        // Without the end frame the stale bytes are a dirty tail, and not
        // a valid frame: a torn tail, not damage.
        let mut open = frame(9, 0, b"new");
        let stale = frame(2, n as u64, b"old frame");
        open.extend_from_slice(&stale);
        let s = scan(&open, 9);
        assert_eq!((s.frames.len(), s.end, s.sealed), (1, n, false));
        assert!(s.dirty && s.valid_after.is_none());
        assert!(
            at(&open, 2, n).is_some(),
            "the stale frame checks for its own file"
        );
    }
}
