//! [`ServerOnly`]: the short form of a [`ProtocolDef`] for a protocol whose
//! clients always go through a server and whose states the simulator does
//! not check step by step. The test protocols of the simulator and node
//! crates are written this way, and it is the smallest start for a new one.

use super::def::{ClientSpec, InjectedBugs, LinkModel, NodeSpec, ProtocolDef};
use super::invariants::NoInvariants;
use super::role::Protocol;
use crate::protocol::options::ProtocolOptions;
use crate::quorum::minority;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

/// A protocol with no client-side coordinator (clients go through a
/// server) and no per-step invariants. Every `ServerOnly` is a
/// [`ProtocolDef`] with `HAS_CLIENT_COORDINATOR = false`, the node as its
/// `Client` type (never built) and [`NoInvariants`]; the constants and
/// methods here mean what they mean there.
pub trait ServerOnly: 'static {
    const NAME: &'static str;
    const ABOUT: &'static str;
    const LINK_MODEL: LinkModel;
    const PROMISES_LIVENESS: bool;
    const DEDUPLICATES_REQUESTS: bool = false;

    type Msg: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + 'static;
    type Node: Protocol<Msg = Self::Msg> + Debug + Send + 'static;
    type Options: ProtocolOptions;
    type Bug: InjectedBugs;

    /// [`ProtocolDef::max_crashed`].
    fn max_crashed(n: usize) -> usize {
        minority(n)
    }
    fn node(spec: &NodeSpec<'_>, opts: &Self::Options, bug: Option<Self::Bug>) -> Self::Node;
    /// [`ProtocolDef::available`].
    fn available(_node: &Self::Node) -> bool {
        true
    }
    /// [`ProtocolDef::vary`].
    fn vary(_opts: &mut Self::Options, _knobs: u64) {}
}

impl<S: ServerOnly> ProtocolDef for S {
    const NAME: &'static str = <S as ServerOnly>::NAME;
    const ABOUT: &'static str = <S as ServerOnly>::ABOUT;
    const LINK_MODEL: LinkModel = <S as ServerOnly>::LINK_MODEL;
    const HAS_CLIENT_COORDINATOR: bool = false;
    const PROMISES_LIVENESS: bool = <S as ServerOnly>::PROMISES_LIVENESS;
    const DEDUPLICATES_REQUESTS: bool = <S as ServerOnly>::DEDUPLICATES_REQUESTS;

    type Msg = <S as ServerOnly>::Msg;
    type Node = <S as ServerOnly>::Node;
    type Client = <S as ServerOnly>::Node;
    type Options = <S as ServerOnly>::Options;
    type Bug = <S as ServerOnly>::Bug;
    type Invariants = NoInvariants;

    fn max_crashed(n: usize) -> usize {
        <S as ServerOnly>::max_crashed(n)
    }
    fn node(spec: &NodeSpec<'_>, opts: &Self::Options, bug: Option<Self::Bug>) -> Self::Node {
        <S as ServerOnly>::node(spec, opts, bug)
    }
    fn client(_: &ClientSpec<'_>, _: &Self::Options, _: Option<Self::Bug>) -> Self::Node {
        unreachable!("{}: no client-side coordinator", <S as ServerOnly>::NAME)
    }
    fn available(node: &Self::Node) -> bool {
        <S as ServerOnly>::available(node)
    }
    fn vary(opts: &mut Self::Options, knobs: u64) {
        <S as ServerOnly>::vary(opts, knobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::{NoBugs, Out, ProtocolInfo};
    use crate::protocol::options::NoOptions;
    use crate::protocol::test_harness::node_spec;
    use crate::types::{ClientRef, Peer, Request, Time};

    /// A server that never answers.
    #[derive(Debug)]
    struct Mute(u32);

    impl Protocol for Mute {
        type Msg = ();
        type Timer = ();
        fn on_client(&mut self, _: Time, _: ClientRef, _: Request, _: &mut Out<(), ()>) {}
        fn on_msg(&mut self, _: Time, _: Peer, _: (), _: &mut Out<(), ()>) {}
        fn on_timer(&mut self, _: Time, _: (), _: &mut Out<(), ()>) {}
    }

    struct MuteDef;

    impl ServerOnly for MuteDef {
        const NAME: &'static str = "mute";
        const ABOUT: &'static str = "answers nothing";
        const LINK_MODEL: LinkModel = LinkModel::Unreliable;
        const PROMISES_LIVENESS: bool = false;
        type Msg = ();
        type Node = Mute;
        type Options = NoOptions;
        type Bug = NoBugs;
        fn node(spec: &NodeSpec<'_>, _: &NoOptions, _: Option<NoBugs>) -> Mute {
            Mute(spec.id)
        }
    }

    #[test]
    fn a_server_only_protocol_is_a_protocol_def_without_a_client_coordinator() {
        let info = ProtocolInfo::of::<MuteDef>();
        assert_eq!((info.name, info.about), ("mute", "answers nothing"));
        assert_eq!(info.link_model, LinkModel::Unreliable);
        assert!(!info.has_client_coordinator && !info.promises_liveness);
        assert!(!info.deduplicates_requests && info.bugs.is_empty());
        assert_eq!((info.max_crashed(3), info.max_crashed(5)), (1, 2));
        let spec = node_spec(2, &[1, 2, 3]);
        let node = <MuteDef as ProtocolDef>::node(&spec, &NoOptions, None);
        assert_eq!(node.0, 2);
        assert!(<MuteDef as ProtocolDef>::available(&node));
        assert!(!<MuteDef as ProtocolDef>::client_may_send(&()));
    }
}
