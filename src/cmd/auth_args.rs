//! The login flags of the client commands (`get`, `put`, `del`, `zk`,
//! `endpoints status`), and how a password is read (shared with `quorumkv
//! user`): a file, `$QUORUMKV_PASSWORD`, or a prompt without echo.

use anyhow::Context;
use clap::Args as ClapArgs;
use quorumkv_node::client::Credentials;
use std::path::{Path, PathBuf};

#[derive(ClapArgs, Debug, Clone, Default)]
pub struct AuthArgs {
    /// Log in as this user (replicas started with a users file require a
    /// login). The password comes from --password-file, else
    /// $QUORUMKV_PASSWORD, else a prompt.
    #[arg(long, value_name = "NAME", env = "QUORUMKV_USER")]
    user: Option<String>,
    /// Read the password from this file (its first line).
    #[arg(long, value_name = "FILE", requires = "user")]
    password_file: Option<PathBuf>,
}

impl AuthArgs {
    /// The login to send, if a user was named.
    pub fn credentials(&self) -> anyhow::Result<Option<Credentials>> {
        let Some(user) = &self.user else {
            return Ok(None);
        };
        let prompt = format!("Password for {user}: ");
        let password = read_password(self.password_file.as_deref(), &prompt, false)?;
        Ok(Some(Credentials {
            user: user.clone(),
            password,
        }))
    }
}

/// A password: the first line of `file`, else `$QUORUMKV_PASSWORD`, else
/// asked on the terminal without echo (twice when `confirm`). Never empty.
pub fn read_password(file: Option<&Path>, prompt: &str, confirm: bool) -> anyhow::Result<String> {
    let password = if let Some(f) = file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("cannot read password file {}", f.display()))?;
        text.lines().next().unwrap_or("").to_string()
    } else if let Some(p) = std::env::var_os("QUORUMKV_PASSWORD") {
        p.into_string()
            .map_err(|_| anyhow::anyhow!("$QUORUMKV_PASSWORD is not UTF-8 text"))?
    } else {
        let no_tty = |e: std::io::Error| {
            anyhow::anyhow!(
                "no password given and no terminal to ask on ({e}): use --password-file FILE \
                 or $QUORUMKV_PASSWORD"
            )
        };
        let first = rpassword::prompt_password(prompt).map_err(no_tty)?;
        if confirm {
            let again = rpassword::prompt_password("Again: ").map_err(no_tty)?;
            if first != again {
                anyhow::bail!("the two passwords differ; nothing changed");
            }
        }
        first
    };
    if password.is_empty() {
        anyhow::bail!("the password is empty");
    }
    Ok(password)
}
