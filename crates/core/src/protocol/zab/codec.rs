//! The byte encoding of log payloads and snapshots.

use bytes::Bytes;

/// Little-endian, length-prefixed encoding.
#[derive(Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    pub fn finish(self) -> Bytes {
        Bytes::from(self.0)
    }
}

pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn u8(&mut self) -> Option<u8> {
        let (&v, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(v)
    }
    pub fn u64(&mut self) -> Option<u64> {
        if self.0.len() < 8 {
            return None;
        }
        let (v, rest) = self.0.split_at(8);
        self.0 = rest;
        Some(u64::from_le_bytes(v.try_into().ok()?))
    }
    pub fn bytes(&mut self) -> Option<Bytes> {
        let n = usize::try_from(self.u64()?).ok()?;
        if self.0.len() < n {
            return None;
        }
        let (v, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(Bytes::copy_from_slice(v))
    }
}
