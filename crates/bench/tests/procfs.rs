//! Parsing of /proc tables used for the servers' CPU seconds.

use quorumkv_bench::runner::{cpu_seconds, parse_cpu_ticks};
use quorumkv_bench::target::{listening_inodes, local_listener_pids};

#[test]
fn cpu_ticks_count_from_the_last_parenthesis() {
    // comm with a space and a ')' inside, as the kernel allows.
    let stat = "1234 (we ird) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0";
    assert_eq!(parse_cpu_ticks(stat), Some(300));
    assert_eq!(parse_cpu_ticks("garbage"), None);
    let me = cpu_seconds(&[std::process::id()]).expect("own /proc entry");
    assert!(me >= 0.0);
    assert_eq!(cpu_seconds(&[]), None);
}

#[test]
fn listening_sockets_by_port() {
    let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 0100007F:18EB 0100007F:D3A2 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 20 4 30 10 -1
   2: 0100007F:0951 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0 100 0 0 10 0
";
    assert_eq!(listening_inodes(table, &[6379]), vec![4242]);
    assert_eq!(listening_inodes(table, &[2385, 6379]), vec![4242, 4444]);
    assert!(listening_inodes(table, &[1]).is_empty());
}

#[test]
fn finds_the_owner_of_a_listening_port_but_not_itself() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // Our own process is excluded (the bench never measures itself).
    assert!(local_listener_pids(&[format!("127.0.0.1:{port}")]).is_empty());
    assert!(local_listener_pids(&["example.com:80".into()]).is_empty());
}
