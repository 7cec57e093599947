//! Where a loopback chaos cluster listens: replica i on native port P+i
//! (its clients and its peers) and RESP port P+100+i, as `quorumkv cluster
//! --port-base P` lays them out. With `move` faults replica i also has
//! P+64+i, the other machine it moves to and back from.
//!
//! The ports must stay free for the whole run, not only at its start: a
//! killed replica's ports are free until its restart binds them again. Two
//! things could take them meanwhile, and each is kept out:
//! - an outgoing connection's source port, which the OS picks from its
//!   ephemeral range: a drawn base lies below that range;
//! - another chaos run choosing its ports: every port is reserved by an
//!   advisory lock (`flock`) on a file of its own, held until the run ends,
//!   and a run never takes a port another one reserved.
//!
//! Anything else that binds one of them while its replica is down makes the
//! restart fail, and the run stops saying which port (never silently).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Drawn bases lie in blocks of this many ports from `DRAWN_FROM` up
/// (63 replicas use P+1..P+163: blocks never overlap).
const BLOCK: u16 = 200;
const DRAWN_FROM: u16 = 10_000;
/// Drawn bases stay below this, and below the ephemeral range.
const DRAWN_TO: u16 = 20_000;

/// The ports of a run, reserved until this is dropped.
pub struct Ports {
    pub base: u16,
    /// Drawn (no `--port-base`).
    pub drawn: bool,
    _locks: Vec<File>,
}

/// Where `move` faults take replica i: P+64+i (below the RESP ports).
pub const MOVED: u16 = 64;
/// Most replicas `move` faults can take ([`MOVED`] + i stays below P+101).
pub const MOST_MOVED: usize = 36;

/// Replica i's ports and what each is, e.g. "replica 2's RESP port"; with
/// `moves`, its second native port too.
fn layout(base: u16, replicas: usize, moves: bool) -> Result<Vec<(u16, String)>, String> {
    if moves && replicas > MOST_MOVED {
        return Err(format!("move faults take at most {MOST_MOVED} replicas"));
    }
    let mut ports = Vec::new();
    let offsets: &[(usize, &str)] = match moves {
        true => &[
            (0, "native"),
            (100, "RESP"),
            (MOVED as usize, "moved native"),
        ],
        false => &[(0, "native"), (100, "RESP")],
    };
    for i in 1..=replicas {
        for &(offset, what) in offsets {
            let port = u16::try_from(base as usize + offset + i).map_err(|_| {
                format!("--port-base {base} leaves no room for {replicas} replicas (RESP ports go up to P+100+N)")
            })?;
            ports.push((port, format!("replica {i}'s {what} port")));
        }
    }
    Ok(ports)
}

/// Reserve `--port-base base`: every port free and reserved by no other
/// chaos run, or an error naming the first that is not and what to do.
pub fn given(base: u16, replicas: usize, moves: bool) -> Result<Ports, String> {
    let locks = reserve(base, replicas, moves)
        .map_err(|why| format!("--port-base {base}: {why}; pick another --port-base"))?;
    Ok(Ports {
        base,
        drawn: false,
        _locks: locks,
    })
}

/// Draw a base below the ephemeral range, from block `start` on (wrapping),
/// skipping `tried`: the first whose ports are all free.
pub fn drawn(replicas: usize, moves: bool, start: u64, tried: &[u16]) -> Result<Ports, String> {
    let top = DRAWN_TO.min(quorumkv_node::local::ephemeral_range().0);
    let blocks = top.saturating_sub(DRAWN_FROM) / BLOCK;
    for k in 0..u64::from(blocks) {
        let block = (start.wrapping_add(k) % u64::from(blocks)) as u16;
        let base = DRAWN_FROM + block * BLOCK;
        if tried.contains(&base) {
            continue;
        }
        if let Ok(locks) = reserve(base, replicas, moves) {
            return Ok(Ports {
                base,
                drawn: true,
                _locks: locks,
            });
        }
    }
    Err(format!(
        "no free block of ports between {DRAWN_FROM} and {top}: give --port-base P \
         (replica i uses P+i and P+100+i)"
    ))
}

/// Lock every port's file, then check each can be bound on loopback.
fn reserve(base: u16, replicas: usize, moves: bool) -> Result<Vec<File>, String> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut locks = Vec::new();
    for (port, what) in layout(base, replicas, moves)? {
        let path = dir.join(format!("{port}.lock"));
        let file =
            File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        // SAFETY: flock(2) on a descriptor this function owns.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            return Err(format!(
                "port {port} ({what}) is reserved by another quorumkv chaos run"
            ));
        }
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return Err(format!(
                "port {port} ({what}) is taken ({e}); see what holds it with `ss -ltnp 'sport = :{port}'`"
            ));
        }
        locks.push(file);
    }
    Ok(locks)
}

fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("quorumkv-chaos-ports")
}

/// A line for the run's header.
pub fn describe(p: &Ports, replicas: usize) -> String {
    let how = match p.drawn {
        true => "drawn below the ephemeral range; --port-base P to choose",
        false => "--port-base",
    };
    let (b, n) = (p.base as usize, replicas);
    format!(
        "ports: replica i on 127.0.0.1 port {b}+i (clients and peers: {}..{}) and RESP {}+i ({}..{}); base {b} ({how})",
        b + 1,
        b + n,
        b + 100,
        b + 101,
        b + 100 + n
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_named_and_a_reserved_one_is_not_taken_twice() {
        // Replica 2's native port is held here. Other processes may hold
        // other ports of a layout (tests run side by side): try bases
        // between the drawn ones and the ephemeral range until the error
        // can only be about ours.
        let named = (0..40u16).find_map(|i| {
            let base = 21_000 + 250 * i;
            let held = std::net::TcpListener::bind(("127.0.0.1", base + 2)).ok()?;
            let err = given(base, 3, false).err().expect("a port is held");
            assert!(err.contains("pick another --port-base"), "{err}");
            drop(held);
            let ours = format!("port {} (replica 2's native port) is taken", base + 2);
            err.contains(&ours).then_some(err)
        });
        assert!(named.is_some(), "no base named the held port");

        let first = drawn(3, false, 7, &[]).unwrap();
        assert!(first.drawn && first.base >= DRAWN_FROM && first.base < DRAWN_TO);
        let again = given(first.base, 3, false).err().expect("reserved");
        assert!(
            again.contains("reserved by another quorumkv chaos run"),
            "{again}"
        );
        let second = drawn(3, false, 7, &[]).unwrap();
        assert_ne!(second.base, first.base);
        drop(first);
        assert!(layout(u16::MAX - 101, 3, false).is_err());
        let moved = layout(1000, 3, true).unwrap();
        assert!(
            moved.contains(&(1066, "replica 2's moved native port".into())),
            "{moved:?}"
        );
        assert!(layout(1000, 37, true).is_err());
    }
}
