//! Generates the etcd v3 gRPC client (KV.Range, KV.Put, Cluster.MemberList)
//! from the vendored subset of etcd's API in `vendor/proto/`. `protox`
//! parses the .proto files in Rust, so the build needs no `protoc`.

const PROTOS: [&str; 2] = [
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/etcdserverpb/rpc.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=vendor/proto");
    let fds = protox::compile(PROTOS, ["vendor/proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        // Keys and values arrive as `Bytes`: no copy into a `Vec`.
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
