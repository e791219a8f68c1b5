//! Derecho's `bandwidth_test`, ported: every sender sends `--messages` messages as fast as
//! the window allows; prints the JSON line of [`spindle_bench::workload`].
//!
//! ```text
//! cargo run --release -p spindle-bench --example bandwidth_test -- --backend <sim|tcp|shm> \
//!     --nodes N --senders <all|half|one> --size BYTES --messages M --mode <atomic|unordered>
//! ```

use clap::Parser;

fn main() {
    spindle_bench::workload::main_with(spindle_bench::workload::Args::parse());
}
