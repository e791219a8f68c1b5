//! Prints, as a Markdown table, the completion time of one RDMC message per schedule for
//! 1 MiB, 16 MiB and 256 MiB to 2…1024 receivers, run by a real `RdmcGroup` per member on
//! the sim fabric with its bandwidth model (`SimConfig::link_rate_bytes_per_s`), next to
//! the paper's bound for the binomial pipeline (`k + ceil(log2 n) - 1` block steps, RDMC
//! §4.4) and, as a cross-check, the schedule model's figure for the binomial pipeline
//! (`spindle_group::rdmc::model`, the same links, no fabric).
//!
//! Times are virtual: the same command prints the same table on any machine, whatever
//! its load. Block writes are payload-free (`RdmcData::Phantom`: the fabric moves their
//! length, not their bytes), so 256 MiB to 1024 receivers fits in memory.
//!
//! `cargo run --release -p spindle-group --example rdmc_sim_table [-- --sizes-mib 1,16
//! --receivers 2,4 --schedules binomial_pipeline,chain --rate-bytes-per-s N --latency-us
//! N --block-bytes N]`

use std::time::Instant;

use clap::Parser;
use spindle_group::rdmc::model::{binomial_pipeline_bound_us, completion_us};
use spindle_group::rdmc::ScheduleKind;
use spindle_group::rdmc_sim::{measure_completion, CompletionCase, LinkSpec, RdmcData};

#[derive(Parser, Debug)]
#[command(about = "RDMC completion times on the sim fabric's bandwidth model")]
struct Args {
    /// Message sizes, in MiB.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 16, 256])]
    sizes_mib: Vec<usize>,
    /// Receiver counts (the root comes on top).
    #[arg(long, value_delimiter = ',', default_values_t = [2u32, 4, 8, 16, 32, 64, 128, 256, 512, 1024])]
    receivers: Vec<u32>,
    /// Schedules to run (binomial_pipeline, chain, binomial_tree, sequential); the others'
    /// columns print "-".
    #[arg(long, value_delimiter = ',', default_values_t = ScheduleKind::ALL.map(|k| k.name().to_string()))]
    schedules: Vec<String>,
    /// Each NIC's rate per direction, bytes per second (100 Gb/s).
    #[arg(long, default_value_t = 12_500_000_000)]
    rate_bytes_per_s: u64,
    /// Latency added to every transfer, µs.
    #[arg(long, default_value_t = 1)]
    latency_us: u64,
    /// Block size, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    block_bytes: usize,
    /// The fabric's seed (with a fixed latency nothing is drawn from it that changes times).
    #[arg(long, default_value_t = 14)]
    seed: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut kinds = Vec::new();
    for name in &args.schedules {
        kinds.push(
            ScheduleKind::from_name(name).ok_or_else(|| format!("unknown schedule {name:?}"))?,
        );
    }
    let link = LinkSpec {
        rate_bytes_per_s: args.rate_bytes_per_s,
        latency_us: args.latency_us,
    };
    let model = link.model();
    println!(
        "block {} B, NIC {} B/s per direction, {} µs per transfer; virtual times in ms",
        args.block_bytes, link.rate_bytes_per_s, link.latency_us
    );
    println!(
        "\n| size | receivers | binomial pipeline | bound | ÷ bound | chain | binomial tree | sequential | model (bp) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let started = Instant::now();
    let mut worst_vs_model: (f64, String) = (0.0, String::new());
    for &mib in &args.sizes_mib {
        let size = mib << 20;
        let blocks = size.div_ceil(args.block_bytes) as u32;
        for &receivers in &args.receivers {
            let members = receivers + 1;
            let mut cells = Vec::new();
            let mut bp = None;
            for kind in ScheduleKind::ALL {
                if !kinds.contains(&kind) {
                    cells.push("-".to_string());
                    continue;
                }
                let case = CompletionCase {
                    schedule: kind,
                    receivers,
                    size_bytes: size,
                    block_bytes: args.block_bytes,
                };
                let t0 = Instant::now();
                let c = measure_completion(case, link, RdmcData::Phantom, args.seed)?;
                let sim_ms = c.last_us as f64 / 1e3;
                let model_ms =
                    completion_us(kind, members, blocks, args.block_bytes, &model)? / 1e3;
                let off = (sim_ms / model_ms - 1.0).abs();
                if off > worst_vs_model.0 {
                    worst_vs_model = (off, format!("{} {mib} MiB to {receivers}", kind.name()));
                }
                eprintln!(
                    "{} {mib} MiB to {receivers}: {sim_ms:.3} ms virtual (model {model_ms:.3}), \
                     {} links, {} deliveries, {:.1} s wall",
                    kind.name(),
                    c.links,
                    c.fabric_steps,
                    t0.elapsed().as_secs_f64()
                );
                if kind == ScheduleKind::BinomialPipeline {
                    bp = Some(sim_ms);
                }
                cells.push(format!("{sim_ms:.3}"));
            }
            let bound = binomial_pipeline_bound_us(members, blocks, args.block_bytes, &model) / 1e3;
            let ratio = bp.map_or("-".to_string(), |t| format!("{:.3}", t / bound));
            let model_bp = completion_us(
                ScheduleKind::BinomialPipeline,
                members,
                blocks,
                args.block_bytes,
                &model,
            )? / 1e3;
            println!(
                "| {mib} MiB | {receivers} | {} | {bound:.3} | {ratio} | {} | {} | {} | {model_bp:.3} |",
                cells[0], cells[1], cells[2], cells[3]
            );
        }
    }
    println!(
        "\nLargest difference from the schedule model, over every cell run: {:.2}% ({})",
        worst_vs_model.0 * 100.0,
        worst_vs_model.1
    );
    eprintln!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
