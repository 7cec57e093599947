//! One endpoint is enough: a direct-mode client needs a link to every
//! replica (its coordinator asks them all), but may be given fewer. The
//! hello of any replica names every member and where it listens
//! (`Welcome::addrs`), so the client dials the ones it was not given; if
//! they do not answer there (an address only the replicas can reach), it
//! goes through the endpoints it was given (proxy) instead. Either way it
//! says so in one line ([`super::Client::connect_note`]).

use super::{handshake, resolve, Dial, Dialing, Handshake, ServerHello};
use quorumkv_core::quorum::majority;
use quorumkv_core::NodeId;
use std::collections::BTreeSet;
use tokio::time::Instant;

/// How a direct client reaches the cluster once it has tried the
/// members it learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// The endpoints cover every member: as asked.
    Direct,
    /// Direct, with links to the learned members too.
    DirectLearned,
    /// Too few members answered for a quorum: through a server.
    Proxy,
}

/// `members` replicas, of which `given` answered at the endpoints given
/// and `learned` of `tried` at the addresses a hello named.
pub(super) fn route(members: usize, given: usize, tried: usize, learned: usize) -> Route {
    if tried == 0 {
        return Route::Direct;
    }
    if given.saturating_add(learned) >= majority(members) {
        Route::DirectLearned
    } else {
        Route::Proxy
    }
}

/// What [`learn_members`] found.
pub(super) struct Learned {
    /// Links to the members no endpoint reached, as their hellos went.
    pub links: Vec<(Dial, Handshake)>,
    pub route: Route,
    /// One line for the user when the route is not [`Route::Direct`].
    pub note: Option<String>,
}

/// Dial the members that no given endpoint reached, at the address
/// `hello` names for each, by `deadline`.
pub(super) async fn learn_members(
    hello: &ServerHello,
    given: &[(Dial, Handshake)],
    how: &Dialing,
    deadline: Instant,
) -> Learned {
    let answered: BTreeSet<NodeId> = (given.iter())
        .filter_map(|(_, h)| h.as_ref().ok().map(|(h, _, _)| h.node))
        .collect();
    let mut dials = Vec::new();
    for (id, name) in &hello.addrs {
        if answered.contains(id) || !hello.members.contains(id) {
            continue;
        }
        let Ok(mut found) = resolve(std::slice::from_ref(name), deadline).await else {
            continue;
        };
        let dial = found.pop().expect("one name, one address");
        // A given endpoint that did not answer: the member is down, not unknown.
        if given.iter().all(|(d, _)| d.addr != dial.addr) {
            dials.push((*id, name.clone(), dial));
        }
    }
    let wait = deadline.saturating_duration_since(Instant::now());
    let tries = (dials.iter()).map(|(_, _, d)| handshake(d.clone(), wait, how.clone()));
    let results = super::futures_join_all(tries).await;
    let reached = results.iter().filter(|r| r.is_ok()).count();
    let route = route(hello.members.len(), answered.len(), dials.len(), reached);
    let named: Vec<String> = (dials.iter())
        .map(|(id, name, _)| format!("{id} at {name}"))
        .collect();
    let from = hello.addr;
    let note = match route {
        Route::Direct => None,
        Route::DirectLearned => Some(format!(
            "direct mode: learned replica {} from {from}",
            named.join(", replica ")
        )),
        Route::Proxy => Some(format!(
            "going through {from} (proxy mode): replica {} did not answer at the address \
             {from} gave (unreachable from here?)",
            named.join(", replica ")
        )),
    };
    let links = (dials.into_iter().map(|(_, _, d)| d))
        .zip(results)
        .collect();
    Learned { links, route, note }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_when_the_endpoints_cover_every_member() {
        assert_eq!(route(3, 3, 0, 0), Route::Direct);
        // Given all, one down: still direct (nothing to learn).
        assert_eq!(route(3, 2, 0, 0), Route::Direct);
    }

    #[test]
    fn learned_members_count_towards_the_quorum_else_proxy() {
        assert_eq!(route(3, 1, 2, 2), Route::DirectLearned);
        assert_eq!(route(3, 1, 2, 1), Route::DirectLearned);
        assert_eq!(route(3, 1, 2, 0), Route::Proxy);
        assert_eq!(route(5, 1, 4, 1), Route::Proxy);
        assert_eq!(route(5, 2, 3, 1), Route::DirectLearned);
    }
}
