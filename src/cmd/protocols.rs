//! `quorumkv protocols`: what every registered protocol is and offers.

use clap::Args as ClapArgs;
use quorumkv_core::protocol::registry::infos;
use quorumkv_core::protocol::ProtocolInfo;
use std::process::ExitCode;

/// List the replication protocols: their options, bench variants, injected
/// bugs, the links they assume and how many replicas may be down at once
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only this protocol.
    name: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    let chosen: Vec<&ProtocolInfo> = (infos().iter())
        .filter(|i| {
            a.name
                .as_deref()
                .is_none_or(|n| i.name.eq_ignore_ascii_case(n))
        })
        .collect();
    if chosen.is_empty() {
        let names: Vec<_> = infos().iter().map(|i| i.name).collect();
        let asked = a.name.unwrap_or_default();
        return super::fail(format!(
            "unknown protocol '{asked}' (known: {})",
            names.join(", ")
        ));
    }
    for info in chosen {
        print!("{}", describe(info));
    }
    ExitCode::SUCCESS
}

fn describe(i: &ProtocolInfo) -> String {
    let coord = if i.has_client_coordinator {
        "in the client library (direct) or a server (proxy)"
    } else {
        "in a server (clients go through it)"
    };
    let mut s = format!("{}: {}\n", i.name, i.about);
    s += &format!("  links assumed     {}\n", i.link_model);
    s += &format!("  coordinator       {coord}\n");
    let down: Vec<_> = [3, 5, 7]
        .iter()
        .map(|&n| format!("{} of {n}", i.max_crashed(n)))
        .collect();
    s += &format!("  may be down       {}\n", down.join(", "));
    s += &format!("  liveness promised {}\n", i.promises_liveness);
    s += &format!("  retries deduped   {}\n", i.deduplicates_requests);
    s += "  options (--opt KEY=VALUE):\n";
    for o in i.options {
        s += &format!("    {:<18} {} [default: {}]\n", o.name, o.help, o.default);
    }
    s += "  bench variants (--variant NAME):\n    default\n";
    for v in i.variants {
        s += &format!("    {:<18} {}\n", v.name, v.about);
    }
    s += "  injected bugs (quorumkv sim --inject-bug NAME):\n";
    for b in &i.bugs {
        s += &format!("    {:<28} {}\n", b.name, b.about);
    }
    s
}
