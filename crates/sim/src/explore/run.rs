//! The explorer's entry points, type-erased: a protocol named at run time
//! becomes its types through core's registry ([`Visitor`]).

use super::choice::Choice;
use super::config::ExploreConfig;
use super::report::{Progress, Report};
use super::search::search;
use super::state::Setup;
use super::trace::{run_path, Replayed};
use quorumkv_core::protocol::registry::visit_named;
use quorumkv_core::protocol::{InjectedBugs, ProtocolDef, ProtocolOptions, Visitor};

/// The scope resolved against `D`: options (variant, then `--opt`), bug.
fn setup<D: ProtocolDef>(cfg: &ExploreConfig) -> Result<Setup<D>, String> {
    if cfg.replicas == 0 || cfg.clients == 0 {
        return Err("need at least one replica and one client".into());
    }
    if cfg.durability == crate::config::Durability::Buffered {
        return Err("--durability buffered is not modelled: use fsync or memory".into());
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(name) = cfg.variant.as_deref().filter(|v| *v != "default") {
        let v = (D::VARIANTS.iter().find(|v| v.name == name)).ok_or_else(|| {
            let names: Vec<_> = D::VARIANTS.iter().map(|v| v.name).collect();
            format!(
                "{}: no variant '{name}' (known: default {})",
                D::NAME,
                names.join(" ")
            )
        })?;
        pairs.extend(
            v.options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
    }
    pairs.extend(cfg.opts.iter().cloned());
    let opts = D::Options::from_pairs(&pairs).map_err(|e| format!("{}: {e}", D::NAME))?;
    opts.check_size(cfg.replicas as usize)?;
    let bug = match cfg.bug.as_deref() {
        None => None,
        Some(name) => Some(D::Bug::find(name).ok_or_else(|| {
            let names: Vec<_> = D::Bug::all().iter().map(|b| b.name()).collect();
            format!("{}: no bug '{name}' (known: {})", D::NAME, names.join(", "))
        })?),
    };
    Ok(Setup {
        cfg: cfg.clone(),
        opts,
        bug,
        members: (1..=cfg.replicas).collect(),
        may_crash: D::max_crashed(cfg.replicas as usize) >= 1,
    })
}

struct Explore<'a> {
    cfg: &'a ExploreConfig,
    progress: &'a mut dyn FnMut(&Progress),
}

impl Visitor for Explore<'_> {
    type Output = Result<Report, String>;
    fn visit<D: ProtocolDef>(self) -> Self::Output {
        let setup = setup::<D>(self.cfg)?;
        Ok(search(&setup, self.progress))
    }
}

struct Replay<'a> {
    cfg: &'a ExploreConfig,
    path: &'a [Choice],
}

impl Visitor for Replay<'_> {
    type Output = Result<Replayed, String>;
    fn visit<D: ProtocolDef>(self) -> Self::Output {
        let setup = setup::<D>(self.cfg)?;
        Ok(run_path(&setup, self.path))
    }
}

fn unknown(name: &str) -> String {
    let names: Vec<_> = crate::registry().iter().map(|r| r.name).collect();
    format!("unknown protocol '{name}' (known: {})", names.join(", "))
}

/// Explore every path of `cfg`'s scope; `progress` is called as it goes.
pub fn explore(cfg: &ExploreConfig, progress: &mut dyn FnMut(&Progress)) -> Result<Report, String> {
    let v = Explore { cfg, progress };
    visit_named(&cfg.protocol, v).map_err(|_| unknown(&cfg.protocol))?
}

/// Re-execute `path` in `cfg`'s scope with a full trace.
pub fn replay_path(cfg: &ExploreConfig, path: &[Choice]) -> Result<Replayed, String> {
    visit_named(&cfg.protocol, Replay { cfg, path }).map_err(|_| unknown(&cfg.protocol))?
}
