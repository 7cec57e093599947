//! A lease-lock server's part in membership change (`reconfig.rs` has
//! what locks add to the shared protocol): admit a request only in the
//! epoch it serves, route the change's messages, run a change asked here.

use super::msg::{Msg, Timer};
use super::node::LeaseNode;
use crate::protocol::contract::{Membership, Out};
use crate::protocol::reconfig::{Admit, ChangeMsg};
use crate::types::{NodeId, Peer, Time};

impl LeaseNode {
    /// Whether a request of `epoch` (under `lock`) is served here; a
    /// request of an older one is answered with the newer configuration.
    pub(super) fn admit(
        &mut self,
        now: Time,
        from: Peer,
        msg: &Msg,
        out: &mut Out<Msg, Timer>,
    ) -> bool {
        let (lock, epoch) = match msg {
            Msg::LockReq { lock, epoch, .. }
            | Msg::Read { lock, epoch, .. }
            | Msg::Write { lock, epoch, .. } => (*lock, *epoch),
            _ => return true,
        };
        match self.changes.epochs.admit(now, epoch, out) {
            Admit::Serve => true,
            Admit::Moved(config) => {
                out.send(from, Msg::Moved { lock, config });
                false
            }
            Admit::Hold => false,
        }
    }

    /// A membership-change message from server `from`.
    pub(super) fn on_change(
        &mut self,
        now: Time,
        from: NodeId,
        msg: ChangeMsg,
        out: &mut Out<Msg, Timer>,
    ) {
        let installed = (self.changes).on_msg(now, from, msg, &mut self.replica, out);
        if let Some(config) = installed {
            self.replica.release_all();
            self.coord.adopt(now, &config, out);
        }
    }

    /// Start changing the members to `voters` (`quorumkv member`, the
    /// simulator's `reconfig`): the epoch it decides.
    pub fn propose(
        &mut self,
        now: Time,
        voters: &[NodeId],
        out: &mut Out<Msg, Timer>,
    ) -> Result<u64, String> {
        self.changes.propose(now, voters, out)
    }

    /// Who votes, as this replica sees it (`Changes::view`).
    pub fn membership_view(&self) -> Membership {
        self.changes.view()
    }

    /// A configuration for the simulator's `reconfig` fault.
    pub fn draw_config(&self, all: &[NodeId], draw: u64) -> Option<Vec<NodeId>> {
        self.changes.draw(all, draw)
    }
}
