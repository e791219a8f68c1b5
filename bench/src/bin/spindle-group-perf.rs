//! `spindle-group-perf`: the multicast workloads of [`spindle_bench::workload`] as an
//! installed binary (the multi-process tests start it).

use clap::Parser;

fn main() {
    spindle_bench::workload::main_with(spindle_bench::workload::Args::parse());
}
