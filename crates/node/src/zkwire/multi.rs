//! ZooKeeper's `multi` (op 14) and `multiRead` (op 22) on the wire
//! (`MultiOperationRecord`, `MultiResponse`): a request is a run of
//! operations, each a `MultiHeader` (type, done, err) then its record,
//! ended by a header with `done` set; a reply is a run of results the
//! same way, each header's type the operation's (or −1, an
//! `ErrorResult` with its code).
//!
//! A failed `multi` is answered as ZooKeeper's `DataTree` does
//! (`processTxn`, `OpCode.multi`): every result is an `ErrorResult`; the
//! operations before the failing one carry `Ok` (0), the failing one its
//! code, those after it `RuntimeInconsistency` (−2). The reply header's
//! error is 0 then: clients (the Java client, kazoo) read the results.

use super::jute::{JuteError, Reader, Writer};
use super::ops::{creation, error_code, version, Creation, Plan, Shape};
use super::proto::{decode_body, err, op, write_stat, ZkRequest};
use quorumkv_core::znode::{MultiOk, MultiOp, Stat, ZnodeOp, ZnodeReply};

/// `KeeperException.Code.RUNTIMEINCONSISTENCY`: an operation after the
/// failing one of a `multi`.
pub const RUNTIME_INCONSISTENCY: i32 = -2;

/// A `MultiHeader`.
fn header(w: &mut Writer, kind: i32, done: bool, err: i32) {
    w.int(kind).bool(done).int(err);
}

/// The operations of a `multi` or `multiRead` body, up to the header
/// with `done` set. Each takes at least its 9-byte header from the
/// packet, so the count is bounded by the packet's length. An operation
/// of another type cannot be decoded (ZooKeeper's "Invalid type of op",
/// a marshalling error that closes the connection).
pub fn decode(r: &mut Reader<'_>) -> Result<Vec<ZkRequest>, JuteError> {
    let mut ops = Vec::new();
    loop {
        let (kind, done, _err) = (r.int()?, r.bool()?, r.int()?);
        if done {
            return Ok(ops);
        }
        ops.push(match kind {
            op::CHECK => ZkRequest::Check {
                path: r.string()?,
                version: r.int()?,
            },
            op::CREATE
            | op::CREATE2
            | op::CREATE_TTL
            | op::CREATE_CONTAINER
            | op::DELETE
            | op::SET_DATA
            | op::GET_DATA
            | op::GET_CHILDREN => decode_body(kind, r)?,
            other => return Err(JuteError::NotInMulti(other)),
        });
    }
}

/// The plan for a `multi`: one `ZnodeOp::Multi`, answered with each
/// operation's result under its own type (`create` or `create2`; a
/// container's or TTL node's create is answered as `create2`, with the
/// stat, as ZooKeeper's `FinalRequestProcessor` does). A read in it, or an
/// operation that a single request of its kind would have refused before
/// reaching the service (a negative version other than −1, a bad mode or
/// TTL), refuses the whole request with that code.
pub fn plan_multi(reqs: Vec<ZkRequest>) -> Plan {
    let mut kinds = Vec::with_capacity(reqs.len());
    let mut ops = Vec::with_capacity(reqs.len());
    for req in reqs {
        let (kind, one) = match req {
            ZkRequest::Check { path, version: v } => (
                op::CHECK,
                version(v).map(|version| MultiOp::Check { path, version }),
            ),
            ZkRequest::Create {
                path,
                data,
                acl,
                flags,
                with_stat,
                ttl,
            } => {
                let c = creation(path, data, acl, flags, ttl);
                let kind = match c {
                    Ok(Creation::Node(_)) if !with_stat => op::CREATE,
                    _ => op::CREATE2,
                };
                (kind, c.map(Creation::into_multi_op))
            }
            ZkRequest::Delete { path, version: v } => (
                op::DELETE,
                version(v).map(|version| MultiOp::Delete { path, version }),
            ),
            ZkRequest::SetData {
                path,
                data,
                version: v,
            } => (
                op::SET_DATA,
                version(v).map(|version| MultiOp::SetData {
                    path,
                    data,
                    version,
                }),
            ),
            _ => return Plan::Error(err::BAD_ARGUMENTS),
        };
        match one {
            Ok(o) => ops.push(o),
            Err(code) => return Plan::Error(code),
        }
        kinds.push(kind);
    }
    Plan::Ops(vec![ZnodeOp::Multi { ops }], Shape::Multi { kinds })
}

/// The plan for a `multiRead`: `getData` and `getChildren` only (a write
/// in it refuses the whole request, `BadArguments`).
pub fn plan_multi_read(reqs: Vec<ZkRequest>) -> Plan {
    let mut ops = Vec::with_capacity(reqs.len());
    for req in reqs {
        ops.push(match req {
            ZkRequest::GetData { path, watch } => ZnodeOp::GetData { path, watch },
            ZkRequest::GetChildren { path, watch, .. } => ZnodeOp::GetChildren { path, watch },
            _ => return Plan::Error(err::BAD_ARGUMENTS),
        });
    }
    Plan::Ops(vec![ZnodeOp::MultiRead { ops }], Shape::MultiRead)
}

/// An `ErrorResult` with `code`.
fn error_result(w: &mut Writer, code: i32) {
    header(w, -1, false, code);
    w.int(code);
}

/// A `multi`'s `MultiResponse`: the results under the operations' types
/// `kinds`; `Err` when the answer is not one of a multi of these.
pub fn write_multi(kinds: &[i32], reply: &ZnodeReply, w: &mut Writer) -> Result<(), i32> {
    match reply {
        ZnodeReply::Multi(done) if done.len() == kinds.len() => {
            for (&kind, ok) in kinds.iter().zip(done) {
                header(w, kind, false, err::OK);
                match ok {
                    MultiOk::Checked | MultiOk::Deleted => {}
                    MultiOk::Created { path, stat } => {
                        w.string(path);
                        if kind == op::CREATE2 {
                            write_stat(w, stat);
                        }
                    }
                    MultiOk::Set(stat) => write_stat(w, stat),
                }
            }
        }
        ZnodeReply::MultiFailed { index, error } => {
            let failed = usize::try_from(*index).unwrap_or(usize::MAX);
            for i in 0..kinds.len() {
                let code = match i.cmp(&failed) {
                    std::cmp::Ordering::Less => err::OK,
                    std::cmp::Ordering::Equal => error_code(error),
                    std::cmp::Ordering::Greater => RUNTIME_INCONSISTENCY,
                };
                error_result(w, code);
            }
        }
        _ => return Err(err::SYSTEM_ERROR),
    }
    header(w, -1, true, -1);
    Ok(())
}

/// A `multiRead`'s `MultiResponse`: each read's result or error.
pub fn write_reads(reply: &ZnodeReply, w: &mut Writer) -> Result<(), i32> {
    let ZnodeReply::Reads(replies) = reply else {
        return Err(err::SYSTEM_ERROR);
    };
    for r in replies {
        match r {
            ZnodeReply::Data { data, stat } => {
                header(w, op::GET_DATA, false, err::OK);
                w.buffer(data);
                write_stat(w, stat);
            }
            ZnodeReply::Children(names) => {
                header(w, op::GET_CHILDREN, false, err::OK);
                w.strings(names);
            }
            ZnodeReply::Error(e) => error_result(w, error_code(e)),
            _ => error_result(w, err::SYSTEM_ERROR),
        }
    }
    header(w, -1, true, -1);
    Ok(())
}

/// The largest zxid the stats of a multi's or multiRead's results show.
pub fn max_zxid(reply: &ZnodeReply) -> u64 {
    let stat_zxid = |s: &Stat| s.mzxid.max(s.pzxid).max(s.czxid);
    let stats: Vec<&Stat> = match reply {
        ZnodeReply::Multi(done) => (done.iter())
            .filter_map(|d| match d {
                MultiOk::Created { stat, .. } | MultiOk::Set(stat) => Some(stat),
                _ => None,
            })
            .collect(),
        ZnodeReply::Reads(rs) => (rs.iter())
            .filter_map(|r| match r {
                ZnodeReply::Data { stat, .. } => Some(stat),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    stats.into_iter().map(stat_zxid).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::ops::reply;
    use super::super::proto::{write_acls, Packet};
    use super::*;
    use bytes::Bytes;
    use quorumkv_core::znode::{Acl, ZkError};
    use quorumkv_core::Response;

    /// A `multi` packet as kazoo sends one: check, create, setData,
    /// delete, then the closing header.
    fn kazoo_multi() -> Vec<u8> {
        let mut w = Writer::default();
        w.int(9).int(op::MULTI);
        header(&mut w, op::CHECK, false, -1);
        w.string("/a").int(0);
        header(&mut w, op::CREATE, false, -1);
        w.string("/a/n-").buffer(b"x");
        write_acls(&mut w, &[Acl::new(31, "world", "anyone")]);
        w.int(2);
        header(&mut w, op::SET_DATA, false, -1);
        w.string("/a").buffer(b"y").int(-1);
        header(&mut w, op::DELETE, false, -1);
        w.string("/b").int(3);
        header(&mut w, -1, true, -1);
        w.buf.to_vec()
    }

    #[test]
    fn a_multi_decodes_and_plans_as_one_operation() {
        let p = Packet::decode(&kazoo_multi()).unwrap();
        let Plan::Ops(ops, shape) = super::super::ops::plan(p.req) else {
            panic!()
        };
        let want = vec![
            MultiOp::Check {
                path: "/a".into(),
                version: Some(0),
            },
            MultiOp::Create {
                path: "/a/n-".into(),
                data: Bytes::from_static(b"x"),
                ephemeral: false,
                sequential: true,
                acl: None,
            },
            MultiOp::SetData {
                path: "/a".into(),
                data: Bytes::from_static(b"y"),
                version: None,
            },
            MultiOp::Delete {
                path: "/b".into(),
                version: Some(3),
            },
        ];
        assert_eq!(ops, vec![ZnodeOp::Multi { ops: want }]);
        let kinds = vec![op::CHECK, op::CREATE, op::SET_DATA, op::DELETE];
        assert_eq!(shape, Shape::Multi { kinds });
    }

    /// What cannot be in a multi: an unknown type ends the connection
    /// (undecodable); a read, a bad version or a TTL node refuse the whole
    /// request; a record cut short is an error.
    #[test]
    fn what_a_multi_refuses() {
        let mut w = Writer::default();
        w.int(1).int(op::MULTI);
        header(&mut w, op::SYNC, false, -1);
        w.string("/");
        assert_eq!(Packet::decode(&w.buf), Err(JuteError::NotInMulti(op::SYNC)));
        let read = vec![ZkRequest::GetData {
            path: "/a".into(),
            watch: false,
        }];
        assert_eq!(plan_multi(read), Plan::Error(err::BAD_ARGUMENTS));
        let bad_version = vec![ZkRequest::Check {
            path: "/a".into(),
            version: -3,
        }];
        assert_eq!(plan_multi(bad_version), Plan::Error(err::BAD_VERSION));
        let write = vec![ZkRequest::Delete {
            path: "/a".into(),
            version: -1,
        }];
        assert_eq!(plan_multi_read(write), Plan::Error(err::BAD_ARGUMENTS));
        let whole = kazoo_multi();
        for cut in 8..whole.len() - 1 {
            assert!(Packet::decode(&whole[..cut]).is_err(), "cut at {cut}");
        }
        let no_ttl = vec![create(op::CREATE_TTL, 5, 0)];
        assert_eq!(plan_multi(no_ttl), Plan::Error(err::BAD_ARGUMENTS));
    }

    /// A multi's create as the Java client sends it: `createTTL` with
    /// its TTL, `createContainer`, `create`.
    fn create(code: i32, flags: i32, ttl: i64) -> ZkRequest {
        let mut w = Writer::default();
        w.string("/c").buffer(b"");
        write_acls(&mut w, &[Acl::new(31, "world", "anyone")]);
        w.int(flags);
        if code == op::CREATE_TTL {
            w.long(ttl);
        }
        let mut r = Reader::new(&w.buf);
        let req = decode_body(code, &mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        req
    }

    /// A container's and a TTL node's creates in a multi are operations
    /// of it, answered as `create2` (with their stat).
    #[test]
    fn containers_and_ttl_nodes_in_a_multi() {
        let reqs = vec![
            create(op::CREATE_CONTAINER, 4, -1),
            create(op::CREATE_TTL, 6, 500),
            create(op::CREATE, 0, -1),
        ];
        let Plan::Ops(ops, shape) = plan_multi(reqs) else {
            panic!()
        };
        let path = || "/c".to_string();
        let want = vec![
            MultiOp::CreateContainer {
                path: path(),
                data: Bytes::new(),
                acl: None,
            },
            MultiOp::CreateTtl {
                path: path(),
                data: Bytes::new(),
                sequential: true,
                ttl_ms: 500,
                acl: None,
            },
            MultiOp::Create {
                path: path(),
                data: Bytes::new(),
                ephemeral: false,
                sequential: false,
                acl: None,
            },
        ];
        assert_eq!(ops, vec![ZnodeOp::Multi { ops: want }]);
        let kinds = vec![op::CREATE2, op::CREATE2, op::CREATE];
        assert_eq!(shape, Shape::Multi { kinds });
    }

    /// Read `n` results of a `MultiResponse`: (type, err, body bytes
    /// left after the header of the next), checking the closing header.
    fn results(body: &[u8]) -> Vec<(i32, i32)> {
        let mut r = Reader::new(body);
        let mut out = Vec::new();
        loop {
            let (kind, done, e) = (r.int().unwrap(), r.bool().unwrap(), r.int().unwrap());
            if done {
                assert_eq!((kind, e, r.remaining()), (-1, -1, 0));
                return out;
            }
            match kind {
                -1 => assert_eq!(r.int().unwrap(), e),
                k if k == op::CREATE => drop(r.string().unwrap()),
                k if k == op::CREATE2 => {
                    r.string().unwrap();
                    (0..68).for_each(|_| drop(r.bool()));
                }
                k if k == op::SET_DATA || k == op::GET_DATA => {
                    if k == op::GET_DATA {
                        r.buffer().unwrap();
                    }
                    (0..68).for_each(|_| drop(r.bool()));
                }
                k if k == op::GET_CHILDREN => drop(r.strings().unwrap()),
                _ => {}
            }
            out.push((kind, e));
        }
    }

    /// The reply body after its 16-byte header (length, xid, zxid, err);
    /// the header's error code.
    fn answer(shape: &Shape, r: ZnodeReply) -> (i32, Vec<u8>) {
        let mut zxid = 0;
        let b = reply(4, shape, &[Response::Znode(r)], &mut zxid);
        let code = i32::from_be_bytes([b[16], b[17], b[18], b[19]]);
        (code, b[20..].to_vec())
    }

    #[test]
    fn results_and_failures_encode_as_zookeeper_does() {
        let kinds = vec![op::CHECK, op::CREATE2, op::SET_DATA, op::DELETE];
        let shape = Shape::Multi {
            kinds: kinds.clone(),
        };
        let stat = Stat {
            mzxid: 12,
            ..Stat::default()
        };
        let done = ZnodeReply::Multi(vec![
            MultiOk::Checked,
            MultiOk::Created {
                path: "/a".into(),
                stat,
            },
            MultiOk::Set(stat),
            MultiOk::Deleted,
        ]);
        let (code, body) = answer(&shape, done);
        assert_eq!(code, err::OK);
        let ok: Vec<(i32, i32)> = kinds.iter().map(|&k| (k, 0)).collect();
        assert_eq!(results(&body), ok);
        // Failed at 1: Ok before, its code, RuntimeInconsistency after;
        // the reply header says Ok (the results tell).
        let failed = ZnodeReply::MultiFailed {
            index: 1,
            error: ZkError::NodeExists,
        };
        let (code, body) = answer(&shape, failed);
        assert_eq!(code, err::OK);
        let want = [(-1, 0), (-1, -110), (-1, -2), (-1, -2)];
        assert_eq!(results(&body), want);
        // A whole-request error keeps its code, with no body.
        let (code, body) = answer(&shape, ZnodeReply::Error(ZkError::BadArguments("x".into())));
        assert_eq!((code, body.len()), (err::BAD_ARGUMENTS, 0));
        // multiRead: each read its own result or error.
        let reads = ZnodeReply::Reads(vec![
            ZnodeReply::Data {
                data: Bytes::from_static(b"v"),
                stat,
            },
            ZnodeReply::Error(ZkError::NoNode),
            ZnodeReply::Children(vec!["k".into()]),
        ]);
        let (code, body) = answer(&Shape::MultiRead, reads);
        assert_eq!(code, err::OK);
        let want = [(op::GET_DATA, 0), (-1, -101), (op::GET_CHILDREN, 0)];
        assert_eq!(results(&body), want);
    }
}
