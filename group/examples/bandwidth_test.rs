//! Derecho's `bandwidth_test`, ported: every sender sends `--messages` messages as fast as
//! the window allows; prints the JSON line of [`spindle_group::workload`].
//!
//! ```text
//! cargo run --release -p spindle-group --example bandwidth_test -- --backend <sim|tcp|shm> \
//!     --nodes N --senders <all|half|one> --size BYTES --messages M --mode <atomic|unordered>
//! ```

use clap::Parser;

fn main() {
    spindle_group::workload::main_with(spindle_group::workload::Args::parse());
}
