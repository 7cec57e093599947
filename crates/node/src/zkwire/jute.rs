//! Jute, ZooKeeper's record encoding (`BinaryInputArchive` /
//! `BinaryOutputArchive`): big-endian integers, a one-byte boolean,
//! strings and buffers as an `int` length (−1: null) then the bytes,
//! vectors as an `int` count (−1: null) then the elements. Every packet is
//! an `int` length then that many bytes.
//!
//! Decoding faces the network: every length is checked against the bytes
//! left before anything is allocated, so nothing a peer sends can make the
//! reader panic or allocate more than the packet it already sent.

use bytes::{BufMut, Bytes, BytesMut};

/// ZooKeeper's default `jute.maxbuffer`: a packet longer than this is
/// refused and the connection closed (`NIOServerCnxn.readLength`,
/// "Len error").
pub const DEFAULT_MAX_BUFFER: usize = 0xfffff;

/// Why a record could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JuteError {
    #[error("the record ends early")]
    Short,
    #[error("a length of {0} is negative or longer than what is left")]
    BadLength(i32),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("a packet of {len} bytes is longer than jute.maxbuffer ({max})")]
    TooLong { len: i64, max: usize },
    #[error("an operation of type {0} cannot be part of a multi")]
    NotInMulti(i32),
}

/// A reader over one packet's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], JuteError> {
        if n > self.buf.len() {
            return Err(JuteError::Short);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], JuteError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn int(&mut self) -> Result<i32, JuteError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    pub fn long(&mut self) -> Result<i64, JuteError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    /// Jute writes 0 or 1; like Java's `readBoolean`, any non-zero is true.
    pub fn bool(&mut self) -> Result<bool, JuteError> {
        Ok(self.take(1)?[0] != 0)
    }
    /// A length prefix: −1 is null (`None`), other negatives and lengths
    /// past the end of the packet are errors.
    fn len(&mut self) -> Result<Option<usize>, JuteError> {
        match self.int()? {
            -1 => Ok(None),
            n if n < 0 || n as usize > self.buf.len() => Err(JuteError::BadLength(n)),
            n => Ok(Some(n as usize)),
        }
    }
    /// A buffer (null reads as empty, as ZooKeeper's server treats it).
    pub fn buffer(&mut self) -> Result<Bytes, JuteError> {
        match self.len()? {
            None => Ok(Bytes::new()),
            Some(n) => Ok(Bytes::copy_from_slice(self.take(n)?)),
        }
    }
    /// A string (null reads as empty).
    pub fn string(&mut self) -> Result<String, JuteError> {
        match self.len()? {
            None => Ok(String::new()),
            Some(n) => {
                let b = self.take(n)?;
                String::from_utf8(b.to_vec()).map_err(|_| JuteError::NotUtf8)
            }
        }
    }
    /// A vector's element count (null reads as empty). Each element takes
    /// at least `min_size` bytes, so a count the packet cannot hold is
    /// refused before any element is read.
    pub fn count(&mut self, min_size: usize) -> Result<usize, JuteError> {
        let n = self.int()?;
        if n == -1 {
            return Ok(0);
        }
        let fits = usize::try_from(n)
            .ok()
            .and_then(|c| c.checked_mul(min_size.max(1)))
            .is_some_and(|bytes| bytes <= self.buf.len());
        match fits {
            true => Ok(n as usize),
            false => Err(JuteError::BadLength(n)),
        }
    }
    /// A vector of strings.
    pub fn strings(&mut self) -> Result<Vec<String>, JuteError> {
        let n = self.count(4)?;
        (0..n).map(|_| self.string()).collect()
    }
}

/// A writer of one record (the packet's length is added by [`frame`]).
#[derive(Default)]
pub struct Writer {
    pub buf: BytesMut,
}

impl Writer {
    pub fn int(&mut self, v: i32) -> &mut Self {
        self.buf.put_i32(v);
        self
    }
    pub fn long(&mut self, v: i64) -> &mut Self {
        self.buf.put_i64(v);
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.buf.put_u8(u8::from(v));
        self
    }
    /// Bytes with their length (lengths past `i32::MAX` cannot be sent and
    /// never are: nothing the server holds is that large).
    pub fn buffer(&mut self, b: &[u8]) -> &mut Self {
        self.buf.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
        self.buf.put_slice(b);
        self
    }
    pub fn string(&mut self, s: &str) -> &mut Self {
        self.buffer(s.as_bytes())
    }
    pub fn strings(&mut self, v: &[String]) -> &mut Self {
        self.int(i32::try_from(v.len()).unwrap_or(i32::MAX));
        for s in v {
            self.string(s);
        }
        self
    }
}

/// The record in `w` as a packet: its length, then it.
pub fn frame(w: Writer) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + w.buf.len());
    out.put_i32(i32::try_from(w.buf.len()).unwrap_or(i32::MAX));
    out.extend_from_slice(&w.buf);
    out.freeze()
}

/// The length of the packet at the start of `buf` once it is there whole:
/// `Ok(None)` until then; an error for a length that is negative or past
/// `max` (ZooKeeper closes such a connection without a reply).
pub fn packet_len(buf: &[u8], max: usize) -> Result<Option<usize>, JuteError> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let ok = usize::try_from(len).ok().filter(|&n| n <= max);
    let Some(n) = ok else {
        return Err(JuteError::TooLong {
            len: len.into(),
            max,
        });
    };
    Ok((buf.len() - 4 >= n).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip() {
        let mut w = Writer::default();
        w.int(-7)
            .long(1 << 40)
            .bool(true)
            .string("/a/b")
            .buffer(b"x\0y");
        w.strings(&["c".into(), "dd".into()]);
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.int(), Ok(-7));
        assert_eq!(r.long(), Ok(1 << 40));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.string().as_deref(), Ok("/a/b"));
        assert_eq!(r.buffer().as_deref(), Ok(&b"x\0y"[..]));
        assert_eq!(r.strings(), Ok(vec!["c".to_string(), "dd".to_string()]));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.int(), Err(JuteError::Short));
    }

    #[test]
    fn null_and_bad_lengths() {
        let null = (-1i32).to_be_bytes();
        assert_eq!(Reader::new(&null).string().as_deref(), Ok(""));
        assert_eq!(Reader::new(&null).count(4), Ok(0));
        let neg = (-2i32).to_be_bytes();
        assert_eq!(Reader::new(&neg).buffer(), Err(JuteError::BadLength(-2)));
        // A length past the end is refused before anything is allocated.
        let big = i32::MAX.to_be_bytes();
        assert_eq!(
            Reader::new(&big).string(),
            Err(JuteError::BadLength(i32::MAX))
        );
        let mut many = i32::MAX.to_be_bytes().to_vec();
        many.extend_from_slice(&[0; 16]);
        assert!(Reader::new(&many).strings().is_err());
        let bad_utf8 = [0, 0, 0, 1, 0xff];
        assert_eq!(Reader::new(&bad_utf8).string(), Err(JuteError::NotUtf8));
    }

    #[test]
    fn packets_are_bounded_by_max_buffer() {
        let mut w = Writer::default();
        w.int(5);
        let p = frame(w);
        assert_eq!(&p[..], &[0, 0, 0, 4, 0, 0, 0, 5]);
        assert_eq!(packet_len(&p, 4), Ok(Some(4)));
        assert_eq!(packet_len(&p[..6], 4), Ok(None));
        assert_eq!(packet_len(&p[..3], 4), Ok(None));
        assert!(matches!(
            packet_len(&p, 3),
            Err(JuteError::TooLong { len: 4, max: 3 })
        ));
        let neg = (-1i32).to_be_bytes();
        assert!(packet_len(&neg, DEFAULT_MAX_BUFFER).is_err());
    }
}
