//! ZooKeeper's four-letter words on the client port: a connection whose
//! first four bytes are a word gets its answer in text, then is closed.
//! `ruok`, `srvr` and `mntr` are answered (what monitoring tools use);
//! ZooKeeper's other words get its own refusal for words outside
//! `4lw.commands.whitelist`.

use super::server::{OPEN, RECEIVED, SENT};
use crate::driver::Input;
use quorumkv_core::protocol::Protocol;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot};

/// The ZooKeeper version whose client protocol the port follows.
pub const ZK_COMPAT_VERSION: &str = "3.8.0";

const OTHER_WORDS: [&[u8; 4]; 16] = [
    b"stat", b"conf", b"cons", b"crst", b"dump", b"envi", b"dirs", b"wchc", b"wchp", b"wchs",
    b"srst", b"gtmk", b"stmk", b"isro", b"hash", b"lead",
];

pub fn is_word(b: &[u8]) -> bool {
    matches!(b, b"ruok" | b"srvr" | b"mntr") || OTHER_WORDS.iter().any(|w| &w[..] == b)
}

/// The replica's role and last applied zxid, from the core's status line
/// in the driver's INFO text (`core:leader ... applied=N ...`).
fn role_and_zxid(info: &str) -> (String, u64) {
    let core = (info.lines())
        .find_map(|l| l.strip_prefix("core:"))
        .unwrap_or("");
    let role = core.split_whitespace().next().unwrap_or("").to_string();
    let applied = (core.split_whitespace())
        .find_map(|w| w.strip_prefix("applied="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (role, applied)
}

/// The answer to four-letter word `w`.
pub async fn four_letter<P: Protocol>(w: &[u8; 4], tx: &mpsc::Sender<Input<P::Msg>>) -> String {
    if w == b"ruok" {
        return "imok".into();
    }
    if w != b"srvr" && w != b"mntr" {
        let w = String::from_utf8_lossy(w);
        return format!("{w} is not executed because it is not in the whitelist.\n");
    }
    let (otx, orx) = oneshot::channel();
    let info = match tx.send(Input::Info { reply: otx }).await {
        Ok(()) => orx.await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let (role, zxid) = role_and_zxid(&info);
    render(w, &role, zxid)
}

fn render(w: &[u8; 4], role: &str, zxid: u64) -> String {
    // A learner (a server outside the voting configuration) serves as
    // ZooKeeper's observers do, and says so in their words.
    let role = if role == "learner" { "observer" } else { role };
    let serving = matches!(role, "leader" | "follower" | "observer");
    let version = format!("{ZK_COMPAT_VERSION}-quorumkv-{}", env!("CARGO_PKG_VERSION"));
    let (open, rcvd, sent) = (
        OPEN.load(Ordering::Relaxed),
        RECEIVED.load(Ordering::Relaxed),
        SENT.load(Ordering::Relaxed),
    );
    if w == b"mntr" {
        let state = if serving { role } else { "looking" };
        return format!(
            "zk_version\t{version}\nzk_server_state\t{state}\nzk_num_alive_connections\t{open}\nzk_packets_received\t{rcvd}\nzk_packets_sent\t{sent}\nzk_last_zxid\t{zxid}\n"
        );
    }
    if !serving {
        return "This ZooKeeper instance is not currently serving requests\n".into();
    }
    format!(
        "Zookeeper version: {version}\nReceived: {rcvd}\nSent: {sent}\nConnections: {open}\nZxid: 0x{zxid:x}\nMode: {role}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_status() {
        assert!(is_word(b"ruok") && is_word(b"mntr") && is_word(b"stat"));
        assert!(!is_word(&[0, 0, 0, 45]));
        let info = "# Server\r\nprotocol:zab\r\ncore:leader epoch=1/1 last=9 commit=9 applied=9 keys=2 leader=1\r\n";
        assert_eq!(role_and_zxid(info), ("leader".into(), 9));
        let s = render(b"srvr", "leader", 255);
        assert!(
            s.contains("Mode: leader\n") && s.contains("Zxid: 0xff\n"),
            "{s}"
        );
        assert!(render(b"srvr", "looking", 0).contains("not currently serving"));
        let m = render(b"mntr", "follower", 3);
        assert!(m.contains("zk_server_state\tfollower\n"), "{m}");
        assert!(render(b"srvr", "learner", 3).contains("Mode: observer\n"));
    }
}
