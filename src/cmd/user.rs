//! `quorumkv user`: edit the users file replicas authenticate clients with.

use clap::{Args as ClapArgs, Subcommand};
use quorumkv_node::auth::{hash_password, Role, Users};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Manage the users file (users, roles, argon2id password hashes)
///
/// A replica started with `--users FILE` (or `users = "FILE"` in its
/// cluster file) makes RESP clients authenticate: `AUTH user password`,
/// `HELLO 2 AUTH user password`, `redis-cli --user U --pass P`. Roles:
///   read       reads only (GET, MGET, EXISTS, ZK.GET, ZK.LS, ...)
///   readwrite  reads and writes (SET, DEL, MSET, ZK.CREATE, ...)
///   admin      everything, including CONFIG
///
/// Replicas read the file at start and again on SIGHUP (`kill -HUP PID`);
/// an invalid file is logged and the users before kept. A user named
/// `default` is the one `AUTH password` (without a name) logs in as.
///
/// The password comes from --password-file, else $QUORUMKV_PASSWORD, else
/// a prompt on the terminal (not echoed, asked twice).
///
/// Examples:
///   quorumkv user add alice --role readwrite --file users.toml
///   QUORUMKV_PASSWORD=s3cret quorumkv user add reporter --role read -f users.toml
///   quorumkv user passwd alice -f users.toml
///   quorumkv user list -f users.toml
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(subcommand)]
    cmd: UserCmd,
}

#[derive(Subcommand, Debug)]
enum UserCmd {
    /// Add a user (the file is created if it does not exist)
    Add {
        name: String,
        /// read, readwrite or admin
        #[arg(long, value_name = "ROLE")]
        role: Role,
        #[command(flatten)]
        file: FileArg,
        #[command(flatten)]
        password: PasswordArg,
    },
    /// Set a user's password (and its role, with --role)
    Passwd {
        name: String,
        /// A new role: read, readwrite or admin
        #[arg(long, value_name = "ROLE")]
        role: Option<Role>,
        #[command(flatten)]
        file: FileArg,
        #[command(flatten)]
        password: PasswordArg,
    },
    /// Remove a user
    Remove {
        name: String,
        #[command(flatten)]
        file: FileArg,
    },
    /// List the users and their roles (never the hashes)
    List {
        #[command(flatten)]
        file: FileArg,
    },
}

#[derive(ClapArgs, Debug)]
struct FileArg {
    /// The users file
    #[arg(long, short = 'f', env = "QUORUMKV_USERS", value_name = "FILE")]
    file: PathBuf,
}

#[derive(ClapArgs, Debug)]
struct PasswordArg {
    /// Read the password from this file (its first line)
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

pub fn run(a: Args) -> ExitCode {
    match run_cmd(a.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(format!("{e:#}")),
    }
}

fn run_cmd(cmd: UserCmd) -> anyhow::Result<()> {
    match cmd {
        UserCmd::Add {
            name,
            role,
            file,
            password,
        } => {
            quorumkv_node::auth::check_name(&name)?;
            let mut users = load(&file.file, true)?;
            if users.role(&name).is_some() {
                anyhow::bail!(
                    "user {name:?} already exists in {} (change it with `quorumkv user passwd`)",
                    file.file.display()
                );
            }
            let hash = hash_password(read_password(&name, &password)?)?;
            users.set(&name, role, hash)?;
            save(&file.file, &users)?;
            println!("added user {name} ({role}) to {}", file.file.display());
        }
        UserCmd::Passwd {
            name,
            role,
            file,
            password,
        } => {
            let mut users = load(&file.file, false)?;
            let Some(old) = users.role(&name) else {
                anyhow::bail!("no user {name:?} in {}", file.file.display());
            };
            let role = role.unwrap_or(old);
            let hash = hash_password(read_password(&name, &password)?)?;
            users.set(&name, role, hash)?;
            save(&file.file, &users)?;
            println!(
                "set the password of {name} ({role}) in {}",
                file.file.display()
            );
        }
        UserCmd::Remove { name, file } => {
            let mut users = load(&file.file, false)?;
            if !users.remove(&name) {
                anyhow::bail!("no user {name:?} in {}", file.file.display());
            }
            save(&file.file, &users)?;
            println!("removed user {name} from {}", file.file.display());
        }
        UserCmd::List { file } => {
            let users = load(&file.file, false)?;
            let width = users.list().map(|(n, _)| n.len()).max().unwrap_or(4).max(4);
            println!("{:<width$}  ROLE", "NAME");
            for (name, role) in users.list() {
                println!("{name:<width$}  {role}");
            }
            return Ok(());
        }
    }
    eprintln!("replicas read it at start and again on SIGHUP (kill -HUP <replica pid>)");
    Ok(())
}

/// The users of `path`; no users when it does not exist and `may_be_new`.
fn load(path: &Path, may_be_new: bool) -> anyhow::Result<Users> {
    if may_be_new && !path.exists() {
        return Ok(Users::default());
    }
    Users::load(path)
}

/// Write the file whole, through a temporary file renamed over it, so a
/// replica reloading meanwhile reads the old or the new file, never half
/// of one. A new file is readable by its owner only; an existing one
/// keeps its permissions.
fn save(path: &Path, users: &Users) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o777);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(users.to_toml().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write()
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("cannot write users file {}", path.display()))
}

/// The password: --password-file, else $QUORUMKV_PASSWORD, else asked
/// twice on the terminal without echo.
fn read_password(name: &str, a: &PasswordArg) -> anyhow::Result<String> {
    let prompt = format!("Password for {name}: ");
    super::auth_args::read_password(a.password_file.as_deref(), &prompt, true)
}
