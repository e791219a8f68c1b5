//! Derecho's `latency_test`, ported: each sender keeps one message in flight and times it
//! from commit to its own delivery; prints the JSON line of [`spindle_bench::workload`].
//!
//! ```text
//! cargo run --release -p spindle-bench --example latency_test -- --backend <sim|tcp|shm> \
//!     --nodes N --senders <all|half|one> --size BYTES --messages M --mode <atomic|unordered>
//! ```

use clap::Parser;

fn main() {
    let mut args = spindle_bench::workload::Args::parse();
    args.latency = true;
    spindle_bench::workload::main_with(args);
}
