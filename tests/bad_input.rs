//! Bad input gets a clear error and loses nothing: malformed and oversized
//! frames on both ports, wrong CLI arguments, unreadable cluster files, a
//! port already in use.

mod common;

use bytes::Bytes;
use common::{binary, start_cluster};
use quorumkv_core::protocol::abd::Msg;
use quorumkv_node::client::{Client, ClientConfig};
use quorumkv_node::codec::{Frame, FrameBuf};
use std::process::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read what the server sends until it closes the connection.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut all))
        .await
        .expect("server closes");
    all
}

fn error_frame(bytes: &[u8]) -> String {
    let mut fb = FrameBuf::new(1 << 20);
    fb.buf_mut().extend_from_slice(bytes);
    match fb.next_frame::<Msg>() {
        Ok(Some(Frame::Error { message })) => message,
        other => panic!("expected an error frame, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_close_only_that_connection() {
    let cluster = start_cluster(3).await;
    let addr = cluster.native_addrs()[0];
    let client = Client::connect(cluster.native_addrs(), ClientConfig::default())
        .await
        .unwrap();
    client.put("before", "1").await.unwrap();

    // Garbage body with a valid length.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 4, 0xff, 0xfe, 0xfd, 0xfc])
        .await
        .unwrap();
    let msg = error_frame(&read_to_close(&mut s).await);
    assert!(msg.contains("malformed"), "{msg}");

    // A length far beyond the frame limit.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3])
        .await
        .unwrap();
    let msg = error_frame(&read_to_close(&mut s).await);
    assert!(msg.contains("exceeds the limit"), "{msg}");

    // A frame that makes no sense from a client.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let frame = quorumkv_node::codec::encode_to_bytes::<Msg>(&Frame::Welcome {
        node: 1,
        protocol: "abd".parse().expect("abd is registered"),
        members: vec![],
        options: vec![],
        addrs: vec![],
        role: None,
        version: None,
    });
    s.write_all(&frame).await.unwrap();
    let msg = error_frame(&read_to_close(&mut s).await);
    assert!(msg.contains("unexpected frame"), "{msg}");

    // Malformed RESP.
    let mut s = TcpStream::connect(cluster.endpoints()[0].resp)
        .await
        .unwrap();
    s.write_all(b"*1\r\n$-7\r\n").await.unwrap();
    let reply = String::from_utf8(read_to_close(&mut s).await).unwrap();
    assert!(reply.starts_with("-ERR Protocol error"), "{reply}");

    // Everyone else is still served, and nothing acknowledged was lost.
    assert_eq!(client.get("before").await.unwrap(), Some(Bytes::from("1")));
    client.put("after", "2").await.unwrap();
    assert_eq!(client.get("after").await.unwrap(), Some(Bytes::from("2")));
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(binary()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn wrong_arguments_say_what_is_wrong() {
    let (code, err) = run(&["server", "--id", "1", "--listen", "not-an-address"]);
    assert_ne!(code, 0);
    assert!(err.contains("invalid value 'not-an-address'"), "{err}");
    let (code, err) = run(&["cluster", "--protocol", "paxos"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown protocol 'paxos'"), "{err}");
    let (code, err) = run(&["get"]);
    assert_ne!(code, 0);
    assert!(err.contains("required"), "{err}");
    let (code, err) = run(&["frobnicate"]);
    assert_ne!(code, 0);
    assert!(err.contains("unrecognized subcommand"), "{err}");
}

#[test]
fn unreadable_or_invalid_cluster_file_is_one_clear_line() {
    let (code, err) = run(&[
        "server",
        "--id",
        "1",
        "--config",
        "/nonexistent/cluster.toml",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("quorumkv: cannot read cluster file /nonexistent/cluster.toml"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let dir = std::env::temp_dir().join(format!("qkv-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"nowhere\"\n",
    )
    .unwrap();
    let (code, err) = run(&["server", "--id", "1", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("invalid cluster file"), "{err}");
    std::fs::write(
        &path,
        "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let (code, err) = run(&["server", "--id", "7", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("replica id 7 is not in the cluster"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn port_in_use_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = run(&["server", "--id", "1", "--listen", &addr]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(err.to_lowercase().contains("in use"), "{err}");
}

/// A local cluster given a port another cluster's replica holds does not
/// take that replica's hello for its own (the race of two test processes
/// picking ports at once): starting fails and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_never_mistakes_another_clusters_replica_for_its_own() {
    let other = start_cluster(1).await;
    let held = other.endpoints()[0].native.port();
    let cfg = quorumkv_node::local::LocalClusterConfig {
        protocol: "abd".parse().expect("abd is registered"),
        replicas: 2,
        binary: binary(),
        // Replica 2's native port is `held`.
        port_base: Some(held - 2),
        ready_timeout: std::time::Duration::from_secs(20),
        ..Default::default()
    };
    let err = match quorumkv_node::local::LocalCluster::start(cfg).await {
        Ok(_) => panic!("a cluster started with a replica it does not own"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("another cluster") || err.contains("cannot listen on"),
        "{err}"
    );
}

#[tokio::test]
async fn unreachable_cluster_is_a_clear_client_error() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = Client::connect(vec![free], ClientConfig::default())
        .await
        .err()
        .expect("nothing listens there");
    assert!(
        err.to_string().starts_with("cannot reach any replica"),
        "{err}"
    );
    let (code, err) = run(&["get", "k", "--endpoints", &free.to_string()]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot reach any replica"), "{err}");
}

/// A client that pipelines requests but never reads the replies must not
/// make the server buffer without bound: its connection is closed once too
/// many replies are queued, and everyone else is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_cut_off() {
    use quorumkv_core::Request;
    use quorumkv_node::codec::encode;
    let cfg = quorumkv_node::local::LocalClusterConfig {
        binary: binary(),
        server_args: ["--op-timeout", "1s", "--max-queued-bytes", "1MiB"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    };
    let cluster = quorumkv_node::local::LocalCluster::start(cfg)
        .await
        .unwrap();
    let client = Client::connect(cluster.native_addrs(), ClientConfig::default())
        .await
        .unwrap();
    const VALUE: usize = 64 * 1024;
    client.put("big", vec![b'x'; VALUE]).await.unwrap();

    // 32 MiB of replies: far more than the 1 MiB one connection may have
    // queued plus what the kernel's socket buffers hold, in few requests
    // (a burst of tens of thousands overloads a debug build).
    let total = 512;
    let s = TcpStream::connect(cluster.native_addrs()[0]).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let mut buf = bytes::BytesMut::new();
    encode::<Msg>(&Frame::hello_client(), &mut buf);
    for id in 0..total as u64 {
        encode::<Msg>(
            &Frame::Request {
                id,
                op: quorumkv_core::OpId::NONE,
                req: Request::Get {
                    key: Bytes::from("big"),
                },
            },
            &mut buf,
        );
    }
    // Write everything without reading, in the background: once the server
    // cuts us off it stops reading too, and the rest of the write would block.
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&buf).await;
        wr
    });
    // Wait until replica 1 reports that it cut a connection off (INFO over
    // RESP), so every reply it will ever send us is already in flight.
    let resp = cluster.endpoints()[0].resp;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let mut r = TcpStream::connect(resp).await.unwrap();
        r.write_all(b"INFO\r\nQUIT\r\n").await.unwrap();
        let info = String::from_utf8(read_to_close(&mut r).await).unwrap();
        let cut: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("connections_cut_off:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO reports connections_cut_off");
        // Exactly our connection: the peer links must survive the burst.
        assert!(
            cut <= 1,
            "{cut} connections cut off, peer links among them: {info}"
        );
        if cut == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never cut off: {info}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Now read what the server sent before it cut us off.
    let mut received = Vec::new();
    let _ = rd.read_to_end(&mut received).await; // EOF or reset: both end it
    writer.abort();
    let mut fb = FrameBuf::new(1 << 20);
    fb.buf_mut().extend_from_slice(&received);
    let mut last_error = None;
    let mut responses = 0;
    while let Ok(Some(f)) = fb.next_frame::<Msg>() {
        match f {
            Frame::Response { .. } => responses += 1,
            Frame::Error { message } => last_error = Some(message),
            _ => {}
        }
    }
    assert!(
        responses < total,
        "the server answered all {total} requests of a client that did not read"
    );
    // Told why, if it had read: the reason is the last thing sent.
    if let Some(e) = last_error {
        assert!(e.contains("replies not read"), "{e}");
    }
    assert_eq!(
        client.get("big").await.unwrap().map(|v| v.len()),
        Some(VALUE)
    );
}
