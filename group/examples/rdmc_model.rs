//! Prints, as a Markdown table, the modelled completion time of one RDMC message per
//! schedule for 1 MiB, 16 MiB and 256 MiB to 1…1024 receivers, next to the paper's bound
//! for the binomial pipeline (`k + ceil(log2 n) - 1` block steps, RDMC §4.4), on the NIC
//! model of `spindle_group::rdmc::model` (100 Gb/s per direction, 1 µs per transfer).
//!
//! `cargo run --release -p spindle-group --example rdmc_model [-- --block-bytes N]`

use spindle_group::rdmc::model::{binomial_pipeline_bound_us, completion_us, LinkModel};
use spindle_group::rdmc::ScheduleKind;

fn main() -> Result<(), spindle_group::Error> {
    let mut block_bytes: usize = 1 << 20;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--block-bytes") {
        block_bytes = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| spindle_group::Error::Config("--block-bytes takes a number".into()))?;
    }
    let link = LinkModel {
        link_bytes_per_s: 12_500_000_000,
        latency_us: 1.0,
    };
    println!(
        "block {block_bytes} B, NIC {} B/s per direction, {} µs per transfer; times in ms",
        link.link_bytes_per_s, link.latency_us
    );
    println!("\n| size | receivers | binomial pipeline | bound | ÷ bound | chain | binomial tree | sequential |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for size in [1usize << 20, 16 << 20, 256 << 20] {
        let blocks = size.div_ceil(block_bytes) as u32;
        for receivers in [1u32, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
            let members = receivers + 1;
            let mut t = Vec::new();
            for kind in ScheduleKind::ALL {
                t.push(completion_us(kind, members, blocks, block_bytes, &link)? / 1e3);
            }
            let bound = binomial_pipeline_bound_us(members, blocks, block_bytes, &link) / 1e3;
            println!(
                "| {} MiB | {receivers} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                size >> 20,
                t[0],
                bound,
                t[0] / bound,
                t[1],
                t[2],
                t[3]
            );
        }
    }
    Ok(())
}
