//! `getAllChildrenNumber`: ZooKeeper counts a subtree in its in-memory
//! tree; the coordination service has no such operation, so the port
//! walks the subtree with `getChildren` reads, one per node, in order on
//! the connection. Not atomic: nodes created or deleted during the walk
//! may or may not be counted.

use super::ops::error_code;
use super::proto::err;
use crate::driver::Input;
use quorumkv_core::znode::{ZnodeOp, ZnodeReply};
use quorumkv_core::Response;
use tokio::sync::{mpsc, oneshot};

/// Most nodes one walk visits; a larger subtree is answered `BadArguments`
/// rather than held up for ever.
pub const MAX_WALK: usize = 1_000_000;

/// Send one read; its answer (`None`: the driver is gone).
pub type Read<'a> = Box<
    dyn FnMut(
            ZnodeOp,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Response>> + Send + 'a>>
        + Send
        + 'a,
>;

/// How many nodes are below `path` (not counting it), or ZooKeeper's error.
pub async fn count_below(path: String, mut read: Read<'_>) -> Result<i32, i32> {
    let mut todo = vec![path];
    let mut count: usize = 0;
    let mut first = true;
    while let Some(p) = todo.pop() {
        let op = ZnodeOp::GetChildren {
            path: p.clone(),
            watch: false,
        };
        let names = match read(op).await {
            Some(Response::Znode(ZnodeReply::Children(names))) => names,
            // A child deleted during the walk: nothing below it.
            Some(Response::Znode(ZnodeReply::Error(_))) if !first => continue,
            Some(Response::Znode(ZnodeReply::Error(e))) => return Err(error_code(&e)),
            Some(Response::Failed(_)) | None => return Err(err::CONNECTION_LOSS),
            Some(_) => return Err(err::SYSTEM_ERROR),
        };
        first = false;
        count = count.saturating_add(names.len());
        if count > MAX_WALK {
            return Err(err::BAD_ARGUMENTS);
        }
        let base = if p == "/" { "" } else { p.as_str() };
        todo.extend(names.iter().map(|n| format!("{base}/{n}")));
    }
    i32::try_from(count).map_err(|_| err::BAD_ARGUMENTS)
}

/// A `Read` that sends each operation to the driver for this connection.
pub fn driver_read<'a, M: Send + 'static>(
    tx: &'a mpsc::Sender<Input<M>>,
    ids: (u64, u64),
    seq: &'a mut u64,
) -> Read<'a> {
    Box::new(move |op| {
        *seq += 1;
        let s = *seq;
        Box::pin(async move {
            let (otx, orx) = oneshot::channel();
            let input = Input::Client {
                req: quorumkv_core::Request::Znode(op),
                session: ids.0,
                op: quorumkv_core::OpId {
                    client: ids.1,
                    seq: s,
                },
                reply: crate::driver::ReplyTo::Local(otx),
            };
            tx.send(input).await.ok()?;
            orx.await.ok()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumkv_core::znode::ZkError;
    use std::collections::BTreeMap;

    fn tree_read(tree: BTreeMap<&'static str, Vec<&'static str>>) -> Read<'static> {
        Box::new(move |op| {
            let ZnodeOp::GetChildren { path, .. } = op else {
                panic!("reads children only")
            };
            let r = match tree.get(path.as_str()) {
                Some(kids) => ZnodeReply::Children(kids.iter().map(|s| s.to_string()).collect()),
                None => ZnodeReply::Error(ZkError::NoNode),
            };
            Box::pin(async move { Some(Response::Znode(r)) })
        })
    }

    #[tokio::test]
    async fn counts_every_node_below() {
        let tree = BTreeMap::from([
            ("/", vec!["a", "b"]),
            ("/a", vec!["x", "y"]),
            ("/a/x", vec![]),
            ("/a/y", vec!["z"]),
            ("/a/y/z", vec![]),
            ("/b", vec![]),
        ]);
        assert_eq!(
            count_below("/".into(), tree_read(tree.clone())).await,
            Ok(5)
        );
        assert_eq!(
            count_below("/a".into(), tree_read(tree.clone())).await,
            Ok(3)
        );
        assert_eq!(
            count_below("/b".into(), tree_read(tree.clone())).await,
            Ok(0)
        );
        assert_eq!(
            count_below("/no".into(), tree_read(tree)).await,
            Err(err::NO_NODE)
        );
        // A child that went away during the walk is skipped.
        let racy = BTreeMap::from([("/", vec!["gone"])]);
        assert_eq!(count_below("/".into(), tree_read(racy)).await, Ok(1));
    }
}
