//! `spindle-group-perf`: the multicast workloads of [`spindle_group::workload`] as an
//! installed binary (the multi-process tests start it).

use clap::Parser;

fn main() {
    spindle_group::workload::main_with(spindle_group::workload::Args::parse());
}
