//! The failure detector of native links: a peer that vanishes without
//! closing its socket (power loss, a partition, a frozen process) sends no
//! FIN, so TCP alone would keep its link "up" forever.
//!
//! Each side of a link with heartbeats sends [`Frame::Heartbeat`] every
//! `interval` while it has nothing else queued, and closes the link when
//! nothing at all arrived for `timeout` (checked once per `timeout`, not on
//! every read, so detection takes one to two timeouts); closing it makes the usual
//! `Input::LinkDown`. Replica links beat from their hello on; a client-side
//! coordinator asks for beats by sending one (so proxy clients, which send
//! none, never get any).

use crate::codec::Frame;
use crate::net::{FrameReader, FrameTx};
use quorumkv_core::protocol::LinkModel;
use std::time::Duration;
use tokio::time::MissedTickBehavior;

/// Default time between heartbeats on an idle link.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(200);
/// Default silence after which a link is declared dead.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(1);
/// The same for a protocol that takes a suspected peer for a crashed one
/// (`LinkModel::Reliable`, the ring: a perfect failure detector, seed 004
/// §2). A frozen but live replica that its peers drop from the view would
/// serve stale reads when it wakes, so only a long silence counts: a pause
/// shorter than this is slowness (writes wait for it), a killed replica's
/// closed connection is still noticed at once, and only a vanished host
/// waits this long.
pub const PERFECT_DETECTOR_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// Send a heartbeat this often while nothing else is queued.
    pub interval: Duration,
    /// Close the link when nothing arrived for this long.
    pub timeout: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            interval: DEFAULT_HEARTBEAT_INTERVAL,
            timeout: DEFAULT_HEARTBEAT_TIMEOUT,
        }
    }
}

impl HeartbeatConfig {
    /// The defaults for a protocol whose links are `model`.
    pub fn for_links(model: LinkModel) -> Self {
        let timeout = match model {
            LinkModel::Reliable => PERFECT_DETECTOR_HEARTBEAT_TIMEOUT,
            LinkModel::FifoReliable | LinkModel::Unreliable => DEFAULT_HEARTBEAT_TIMEOUT,
        };
        HeartbeatConfig {
            timeout,
            ..HeartbeatConfig::default()
        }
    }

    /// A timeout of at least two intervals, so one late beat is no failure.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.timeout < 2 * self.interval {
            return Err(format!(
                "the heartbeat timeout ({:?}) must be at least twice the interval ({:?}), \
                 which must not be zero",
                self.timeout, self.interval
            ));
        }
        Ok(())
    }
}

/// Start heartbeats on a link: beat on `ftx` (the first at once) and make
/// `reader` fail after `cfg.timeout` of silence. The beating task holds no
/// sender between beats, so it never keeps the connection open; it ends
/// with the connection's writer.
pub fn start<M: serde::Serialize + Send + 'static>(
    ftx: &FrameTx<M>,
    reader: &mut FrameReader,
    cfg: HeartbeatConfig,
) {
    reader.in_buf().expect_traffic(cfg.timeout);
    let weak = ftx.downgrade();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(cfg.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(ftx) = weak.upgrade() else { return };
            if ftx.is_closed() {
                return;
            }
            // Frames on their way prove we are alive just as well.
            if ftx.is_idle() && ftx.send(Frame::Heartbeat).is_err() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumkv_core::protocol::ProtocolKind;

    #[test]
    fn only_a_perfect_detector_protocol_waits_long_before_suspecting() {
        for kind in ProtocolKind::all() {
            let model = kind.info().link_model;
            let cfg = HeartbeatConfig::for_links(model);
            assert_eq!(cfg.validate(), Ok(()), "{}", kind.name());
            let long = model == LinkModel::Reliable;
            assert_eq!(
                cfg.timeout > DEFAULT_HEARTBEAT_TIMEOUT,
                long,
                "{}",
                kind.name()
            );
        }
        let ring = ProtocolKind::all().into_iter().find(|k| k.name() == "ring");
        let ring = HeartbeatConfig::for_links(ring.expect("registered").info().link_model);
        assert_eq!(ring.timeout, PERFECT_DETECTOR_HEARTBEAT_TIMEOUT);
    }
}
