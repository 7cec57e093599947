//! RESP (the Redis protocol) on the second client port, so `redis-cli` and
//! `redis-benchmark` work against any quorumkv cluster.
//!
//! Parsing follows the same two steps as the native codec: `Ok(None)` means
//! "incomplete, read more", an `Err` means the bytes can never become a valid
//! command (the connection gets `-ERR Protocol error` and is closed).
//! Both RESP arrays of bulk strings (what clients send) and inline commands
//! (`PING\r\n`, what a person types into telnet) are accepted.

use bytes::{BufMut, Bytes, BytesMut};

/// Largest bulk string accepted (Redis's own default is 512 MB; we are stricter).
pub const MAX_BULK: usize = 16 * 1024 * 1024;
/// Most arguments in one command.
pub const MAX_ARGS: usize = 1024;
const MAX_INLINE: usize = 64 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Protocol error: {0}")]
pub struct RespError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, RespError> {
    Err(RespError(msg.into()))
}

/// Find `\r\n` starting at `from`; returns the index of `\r`.
fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| i + from)
}

fn parse_int(bytes: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| {
            RespError(format!(
                "invalid length '{}'",
                String::from_utf8_lossy(bytes)
            ))
        })
}

/// Parse one command from the front of `buf`, consuming it.
pub fn parse_command(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, RespError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return parse_inline(buf);
    }
    // Check step: walk the array without consuming, to know it is complete.
    let Some(end) = find_crlf(buf, 0) else {
        return if buf.len() > MAX_INLINE {
            err("array header too long")
        } else {
            Ok(None)
        };
    };
    let n = parse_int(&buf[1..end])?;
    if n < 0 || n as usize > MAX_ARGS {
        return err(format!("invalid multibulk length {n}"));
    }
    let mut pos = end + 2;
    let mut spans = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if pos >= buf.len() {
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return err(format!("expected '$', got '{}'", buf[pos] as char));
        }
        let Some(e) = find_crlf(buf, pos) else {
            return if buf.len() - pos > 32 {
                err("bulk header too long")
            } else {
                Ok(None)
            };
        };
        let len = parse_int(&buf[pos + 1..e])?;
        if len < 0 || len as usize > MAX_BULK {
            return err(format!("invalid bulk length {len}"));
        }
        let start = e + 2;
        let stop = start + len as usize;
        if buf.len() < stop + 2 {
            return Ok(None);
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return err("bulk string not terminated by CRLF");
        }
        spans.push((start, stop));
        pos = stop + 2;
    }
    // Parse step: the whole command is here; split it off without copying.
    let frame = buf.split_to(pos).freeze();
    Ok(Some(
        spans.into_iter().map(|(a, b)| frame.slice(a..b)).collect(),
    ))
}

fn parse_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, RespError> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > MAX_INLINE {
            err("too big inline request")
        } else {
            Ok(None)
        };
    };
    let line = buf.split_to(end + 1);
    let text = line.strip_suffix(b"\n").unwrap_or(&line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let args: Vec<Bytes> = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(Bytes::copy_from_slice)
        .collect();
    Ok(Some(args))
}

/// A reply value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(&'static str),
    Error(String),
    Int(i64),
    Bulk(Option<Bytes>),
    Array(Vec<Reply>),
}

impl Reply {
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Reply::Simple(s) => {
                out.put_u8(b'+');
                out.put_slice(s.as_bytes());
                out.put_slice(b"\r\n");
            }
            Reply::Error(s) => {
                out.put_u8(b'-');
                // An error line must not contain CR/LF.
                out.extend(
                    s.bytes()
                        .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
                out.put_slice(b"\r\n");
            }
            Reply::Int(i) => {
                out.put_slice(format!(":{i}\r\n").as_bytes());
            }
            Reply::Bulk(None) => out.put_slice(b"$-1\r\n"),
            Reply::Bulk(Some(b)) => {
                out.put_slice(format!("${}\r\n", b.len()).as_bytes());
                out.put_slice(b);
                out.put_slice(b"\r\n");
            }
            Reply::Array(items) => {
                out.put_slice(format!("*{}\r\n", items.len()).as_bytes());
                for i in items {
                    i.encode(out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &[u8]) -> Result<Option<Vec<Bytes>>, RespError> {
        let mut b = BytesMut::from(s);
        parse_command(&mut b)
    }

    #[test]
    fn arrays_and_inline() {
        assert_eq!(
            cmd(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap().unwrap(),
            vec![Bytes::from("GET"), Bytes::from("k")]
        );
        assert_eq!(
            cmd(b"PING\r\n").unwrap().unwrap(),
            vec![Bytes::from("PING")]
        );
        assert_eq!(cmd(b"set a  b\n").unwrap().unwrap().len(), 3);
    }

    #[test]
    fn incomplete_waits_and_pipelines_split() {
        let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n";
        for cut in 0..31 {
            assert_eq!(cmd(&full[..cut]).unwrap(), None, "cut at {cut}");
        }
        let mut b = BytesMut::from(&full[..]);
        assert_eq!(parse_command(&mut b).unwrap().unwrap().len(), 3);
        assert_eq!(
            parse_command(&mut b).unwrap().unwrap(),
            vec![Bytes::from("PING")]
        );
        assert!(b.is_empty());
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(cmd(b"*1\r\n+OK\r\n").is_err());
        assert!(cmd(b"*x\r\n").is_err());
        assert!(cmd(b"*1\r\n$-5\r\n").is_err());
        assert!(cmd(b"*1\r\n$2\r\nabcd\r\n").is_err());
        assert!(cmd(b"*99999\r\n").is_err());
    }

    #[test]
    fn replies_encode() {
        let mut out = BytesMut::new();
        Reply::Array(vec![
            Reply::Bulk(Some("v".into())),
            Reply::Bulk(None),
            Reply::Int(3),
            Reply::Simple("OK"),
        ])
        .encode(&mut out);
        Reply::Error("ERR a\r\nb".into()).encode(&mut out);
        assert_eq!(
            &out[..],
            b"*4\r\n$1\r\nv\r\n$-1\r\n:3\r\n+OK\r\n-ERR a  b\r\n"
        );
    }
}
