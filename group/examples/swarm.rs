//! Runs a range of swarm seeds (crate `spindle_group::swarm`): each seed draws a cluster
//! of 3–7 nodes and a fault schedule, runs a safety phase under the faults and a
//! liveness phase after them, and checks virtual synchrony throughout.
//!
//! `cargo run --release -p spindle-group --example swarm -- --start S --seeds N`
//!
//! Prints each failing seed with the command that reruns it, then one JSON line:
//! `{"start","seeds","violations","liveness_failures","views_installed","messages_delivered",
//! "large_delivered","large_later_view","dare_delivered"}` (large: above the slot, by RDMC
//! in the same order; later view: cut off by a view change and re-sent; dare: in the dare
//! subgroup).
//! Exits with 1 if any seed failed.

use clap::Parser;
use spindle_group::swarm::{reproduce_command, run_seed, SwarmConfig};

#[derive(Parser, Debug)]
#[command(about = "Swarm simulation of view changes under faults")]
struct Args {
    /// First seed.
    #[arg(long, default_value_t = 1)]
    start: u64,
    /// How many seeds.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// Print every seed's report.
    #[arg(long)]
    verbose: bool,
}

fn main() {
    let args = Args::parse();
    let cfg = SwarmConfig::default();
    let (mut violations, mut liveness, mut views, mut delivered) = (0u64, 0u64, 0u64, 0u64);
    let (mut large, mut large_later, mut dare) = (0u64, 0u64, 0u64);
    for seed in args.start..args.start.saturating_add(args.seeds) {
        let r = run_seed(seed, &cfg);
        views += r.views_installed;
        delivered += r.messages_delivered;
        large += r.large_delivered;
        dare += r.dare_delivered;
        large_later += r.large_later_view;
        if args.verbose {
            println!("{r:?}");
        }
        if !r.violations.is_empty() {
            violations += r.violations.len() as u64;
            println!(
                "seed {seed}: {} violations: {:?}",
                r.violations.len(),
                r.violations
            );
        }
        if let Some(l) = &r.liveness_failure {
            liveness += 1;
            println!("seed {seed}: liveness: {l}");
        }
        if !r.violations.is_empty() || r.liveness_failure.is_some() {
            println!("reproduce: {}", reproduce_command(seed));
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "start": args.start,
            "seeds": args.seeds,
            "violations": violations,
            "liveness_failures": liveness,
            "views_installed": views,
            "messages_delivered": delivered,
            "large_delivered": large,
            "dare_delivered": dare,
            "large_later_view": large_later,
        })
    );
    if violations > 0 || liveness > 0 {
        std::process::exit(1);
    }
}
