//! `quorumkv cert`: a cluster CA and the certificates it signs (rcgen,
//! ECDSA P-256), as the replicas' `[tls]` table and the clients expect.

use clap::{Args as ClapArgs, Subcommand};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Make TLS certificates for a cluster: a CA, then one per replica and client
///
/// Files are written to DIR (created if needed), keys readable by their
/// owner only (0600):
///   ca.pem, ca.key                 the cluster CA (keep ca.key safe: it signs)
///   replica-N.pem, replica-N.key   replica N: SAN replica-N.quorumkv (peers
///                                  check it), 127.0.0.1, localhost and --host's
///   client-NAME.pem, client-NAME.key   a client: CN = NAME
///
/// A cluster file then says `[tls] dir = "DIR"`; clients give `--tls-ca DIR/ca.pem`
/// (and `--cert`/`--key` where the replicas run with client_cert_auth).
/// Renewing: run `replica`/`client` again (the CA stays) and send the
/// replicas SIGHUP: new connections use the new certificate.
///
/// Example:
///   quorumkv cert ca --dir tls
///   quorumkv cert replica --dir tls --id 1 --host qkv1.example.com
///   quorumkv cert client --dir tls --name alice
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    Ca(CaArgs),
    Replica(ReplicaArgs),
    Client(ClientArgs),
}

/// Create the cluster CA: DIR/ca.pem and DIR/ca.key (0600)
#[derive(ClapArgs, Debug)]
pub struct CaArgs {
    /// Where the files go.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The CA's common name.
    #[arg(long, default_value = "quorumkv cluster CA")]
    name: String,
    /// Valid for this many days.
    #[arg(long, default_value_t = 3650)]
    days: u32,
    /// Replace an existing CA (every certificate it signed stops being trusted).
    #[arg(long)]
    force: bool,
}

/// A replica's certificate, signed by DIR's CA: DIR/replica-N.pem and .key
///
/// Its subjectAltNames: replica-N.quorumkv (what peers verify on replica
/// links), 127.0.0.1, localhost, and every --host (the names and addresses
/// clients dial it at: its advertised host, a load balancer's name...).
#[derive(ClapArgs, Debug)]
pub struct ReplicaArgs {
    /// Where the CA is and the files go.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The replica's id (1-63).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..64))]
    id: u32,
    /// Another host name or IP address clients reach it at (repeat).
    #[arg(long, value_name = "HOST")]
    host: Vec<String>,
    /// Valid for this many days.
    #[arg(long, default_value_t = 825)]
    days: u32,
}

/// A client certificate, signed by DIR's CA: DIR/client-NAME.pem and .key
#[derive(ClapArgs, Debug)]
pub struct ClientArgs {
    /// Where the CA is and the files go.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The client's name (the certificate's common name).
    #[arg(long)]
    name: String,
    /// Valid for this many days.
    #[arg(long, default_value_t = 825)]
    days: u32,
}

pub fn run(a: Args) -> ExitCode {
    let done = match a.cmd {
        Cmd::Ca(a) => make_ca(&a),
        Cmd::Replica(a) => make_replica(&a),
        Cmd::Client(a) => make_client(&a),
    };
    match done {
        Ok(written) => {
            for p in written {
                println!("wrote {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(format!("{e:#}")),
    }
}

type Written = anyhow::Result<Vec<PathBuf>>;

fn make_ca(a: &CaArgs) -> Written {
    let (pem, key) = (a.dir.join("ca.pem"), a.dir.join("ca.key"));
    if !a.force && (pem.exists() || key.exists()) {
        anyhow::bail!(
            "{} already has a CA; replacing it untrusts every certificate it signed (--force to do so)",
            a.dir.display()
        );
    }
    let ca_key = KeyPair::generate()?;
    let mut params = ca_params(&a.name);
    validity(&mut params, a.days)?;
    let cert = params.self_signed(&ca_key)?;
    write_pair(&a.dir, "ca", &cert, &ca_key)
}

/// The CA's parameters, the same when it signs as when it was made (rcgen
/// takes the issuer's name and key usages from them).
fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = named(name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn named(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

/// DIR's CA, to sign with.
fn load_ca(dir: &Path) -> anyhow::Result<(Certificate, KeyPair)> {
    use anyhow::Context;
    let (pem, key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let hint = || {
        format!(
            "no CA in {} (run `quorumkv cert ca --dir {0}` first)",
            dir.display()
        )
    };
    let key_text = std::fs::read_to_string(&key).with_context(hint)?;
    let cert_text = std::fs::read_to_string(&pem).with_context(hint)?;
    let ca_key = KeyPair::from_pem(&key_text)
        .with_context(|| format!("{}: not a private key", key.display()))?;
    let der =
        pem_der(&cert_text).with_context(|| format!("{}: not a certificate", pem.display()))?;
    let names = quorumkv_node::tls::cert_names(&der)
        .with_context(|| format!("{}: cannot read the certificate", pem.display()))?;
    let name = names.common_name.unwrap_or_default();
    Ok((ca_params(&name).self_signed(&ca_key)?, ca_key))
}

fn pem_der(text: &str) -> Option<Vec<u8>> {
    use rustls_pki_types::pem::PemObject;
    let cert = rustls_pki_types::CertificateDer::from_pem_slice(text.as_bytes()).ok()?;
    Some(cert.to_vec())
}

fn make_replica(a: &ReplicaArgs) -> Written {
    let (ca, ca_key) = load_ca(&a.dir)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = named(&format!("quorumkv replica {}", a.id));
    let mut hosts = vec![
        format!("replica-{}.quorumkv", a.id),
        "127.0.0.1".into(),
        "localhost".into(),
    ];
    for h in &a.host {
        if !hosts.contains(h) {
            hosts.push(h.clone());
        }
    }
    params.subject_alt_names = hosts.iter().map(|h| san(h)).collect::<Result<_, _>>()?;
    // Both ways: the server of its ports, the client of the links it dials.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    sign(
        params,
        a.days,
        &a.dir,
        &format!("replica-{}", a.id),
        (&ca, &ca_key),
    )
}

fn make_client(a: &ClientArgs) -> Written {
    if a.name.is_empty()
        || !a
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        anyhow::bail!("--name: letters, digits and - _ . @ only (it names the files)");
    }
    let (ca, ca_key) = load_ca(&a.dir)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = named(&a.name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign(
        params,
        a.days,
        &a.dir,
        &format!("client-{}", a.name),
        (&ca, &ca_key),
    )
}

fn san(host: &str) -> anyhow::Result<SanType> {
    Ok(match host.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(
            host.to_string()
                .try_into()
                .map_err(|e| anyhow::anyhow!("--host {host}: {e}"))?,
        ),
    })
}

fn sign(
    mut params: CertificateParams,
    days: u32,
    dir: &Path,
    stem: &str,
    (ca, ca_key): (&Certificate, &KeyPair),
) -> Written {
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca, ca_key)?;
    write_pair(dir, stem, &cert, &key)
}

/// From a day ago (clocks differ) for `days`, with a random serial (a
/// renewed certificate is told apart from the old one).
fn validity(params: &mut CertificateParams, days: u32) -> anyhow::Result<()> {
    if days == 0 {
        anyhow::bail!("--days must be at least 1");
    }
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(i64::from(days));
    let mut serial: [u8; 16] = rand::random();
    serial[0] &= 0x7f; // positive
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    Ok(())
}

/// DIR/STEM.pem and DIR/STEM.key (0600), each replaced whole.
fn write_pair(dir: &Path, stem: &str, cert: &Certificate, key: &KeyPair) -> Written {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let pem = dir.join(format!("{stem}.pem"));
    let key_path = dir.join(format!("{stem}.key"));
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&pem, cert.pem().as_bytes(), 0o644)?;
    Ok(vec![pem, key_path])
}

/// Write through a temporary file and rename, so a replica reloading on
/// SIGHUP never reads half a file.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use anyhow::Context;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
